"""PyTorch execution traces, captured with torch's own observer, for the tests
of ssdtrain's importer (traces/pytorch_et.h).

    observe(model, inputs, loss_fn, path)  # one training step, written to path

torch 1.13 calls the observer ExecutionGraphObserver, torch 2
ExecutionTraceObserver. Each module whose name has a number ("blocks.3") runs
inside a torch.profiler.record_function scope of that name, which is how the
importer learns layers (an execution trace holds no module names).

Run as a script, it writes the committed fixture
traces/tests/data/pytorch_et_tiny_gpt.json: a one-layer GPT (gpt.py), one step
with SGD (momentum) inside the observed region, written without indentation.
With --mlp, a two-layer MLP's step instead: the fuzz seed
fuzz/corpus/trace_pytorch_et/mlp-sgd.json.
"""

import json
import os
import re
import sys

import torch

_NUMBERED = re.compile(r"(?:^|\.)\d+$")


def _observer():
    profiler = torch.profiler
    cls = getattr(profiler, "ExecutionTraceObserver", None) or profiler.ExecutionGraphObserver
    return cls()


def _scopes(model):
    """record_function scopes around every numbered module (blocks.0, blocks.1, ...)."""
    handles = []
    for name, module in model.named_modules():
        if not _NUMBERED.search(name):
            continue

        def pre(mod, args, name=name):
            mod._ssdtrain_scope = torch.profiler.record_function(name)
            mod._ssdtrain_scope.__enter__()

        def post(mod, args, out):
            mod._ssdtrain_scope.__exit__(None, None, None)

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    return handles


def observe(model, inputs, loss_fn, path, optimizer=None, scopes=True):
    """Runs one training step (forward, loss, backward, and optimizer.step()
    when given) under torch's execution-trace observer, writing it to path."""
    handles = _scopes(model) if scopes else []
    observer = _observer()
    observer.register_callback(os.fspath(path))
    try:
        observer.start()
        loss = loss_fn(model(*inputs))
        loss.backward()
        if optimizer is not None:
            optimizer.step()
        observer.stop()
    finally:
        observer.unregister_callback()
        for h in handles:
            h.remove()
    return loss


def main(out, mlp=False):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpt import GPT, batch, loss_fn  # noqa: E402

    torch.manual_seed(0)
    if mlp:  # the fuzz seed: two numbered layers, a few dozen nodes
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 4))
        x, y = torch.randn(8, 16), torch.randn(8, 4)
        inputs, loss = (x,), lambda out: torch.nn.functional.mse_loss(out, y)
    else:
        model = GPT(layers=1, hidden=64, heads=2, seq_len=32, vocab=128)
        idx, targets = batch(0, batch_size=2, seq_len=32, vocab=128)
        inputs, loss = (idx,), lambda out: loss_fn(out, targets)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    # A first step makes the momentum buffers: the observed one reads them.
    loss(model(*inputs)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    observe(model, inputs, loss, out, optimizer=optimizer)
    with open(out) as f:  # the observer's JSON, without its indentation
        et = json.load(f)
    with open(out, "w") as f:
        json.dump(et, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--mlp"]
    main(args[0] if args else "pytorch_et_tiny_gpt.json", mlp="--mlp" in sys.argv)

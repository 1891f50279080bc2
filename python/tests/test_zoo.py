"""The zoo: models written the usual ways (zoo.py), each plain, with every block
through torch.utils.checkpoint (reentrant and not) and under bf16 autocast,
captured, planned by `ssdtrain plan --trace --policy offload-ssd` and trained
2 SGD steps by offload(policy=...) and by offload(plan=..., trace=...): bitwise
what training without offload computes, the plan's peaks of resident saved
bytes exactly (StepPlan.peaks: after forward, at backward's reads, over the
whole step), capture's saved bytes equal to a count by plain saved-tensor
hooks, and no file left."""

import contextlib
import json
import os
import shutil
import tempfile
import unittest

import torch

import ssdtrain
from ssdtrain.plan import StepPlan
from test_plan import plan_for
import zoo

STEPS = 2
torch.set_num_threads(1)  # the machine is shared: one thread is faster, and steadier
# Policies write storages of at least this; the planner offloads those of
# at least 1 MiB (sim/policy.h), which the zoo's dims give it.
MIN_BYTES = 64 << 10
VARIANTS = [(None, False), ("reentrant", False), ("non-reentrant", False), (None, True)]


def autocast(amp):
    return torch.autocast("cpu", dtype=torch.bfloat16) if amp else contextlib.nullcontext()


def header(name):
    return dict(model=f"zoo-{name}", family="t5" if name == "t5" else "gpt", hidden=zoo.HIDDEN,
                heads=zoo.HEADS, kv_heads=zoo.HEADS, layers=zoo.LAYERS, ffn_hidden=4 * zoo.HIDDEN,
                vocab=zoo.VOCAB, seq_len=zoo.SEQ, micro_batch=zoo.BATCH)


def make(name, ckpt):
    torch.manual_seed(0)
    return zoo.MODELS[name](ckpt)


def train(name, ckpt, amp, micro_batches=1, **offload):
    """STEPS SGD steps of a fresh model, each accumulating the gradients of
    `micro_batches` forwards and backwards; each step's losses and gradients and
    its offload stats (after its first forward, at the end)."""
    model = make(name, ckpt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out, stats = [], []
    for step in range(STEPS):
        opt.zero_grad()
        losses, forward = [], None
        ctx = ssdtrain.offload(model, **offload) if offload else contextlib.nullcontext()
        with ctx as off:
            for k in range(micro_batches):
                inputs, targets = zoo.batch(name, step * micro_batches + k)
                with autocast(amp):
                    loss = zoo.loss_of(name, model(*inputs), targets) / micro_batches
                if off is not None and forward is None:
                    forward = off.stats()
                loss.backward()
                losses.append(loss.detach().clone())
            if off is not None:
                stats.append(dict(forward=forward, end=off.stats()))
        out.append(losses + [p.grad.clone() for p in model.parameters() if p.grad is not None])
        opt.step()
    return out, stats


def hooked_saved_bytes(name, ckpt, amp):
    """Unique storages autograd saves in one forward and its loss, counted with
    plain saved-tensor hooks (nothing of ssdtrain): each root storage once, apart
    from parameters, buffers and the step's inputs and targets, and the Python
    numbers autograd saves (the 1 / sqrt(d) of ``att * scale``: torch wraps them
    as 0-dim float64 tensors made by no op, which a trace has as step inputs)."""
    model = make(name, ckpt)
    inputs, targets = zoo.batch(name, 0)
    resident = list(model.parameters()) + list(model.buffers()) + list(inputs) + [targets]
    skip = {t.storage().data_ptr() for t in resident}
    seen = {}

    def pack(t):
        s = t.storage()
        number = t.dim() == 0 and t.dtype == torch.float64 and t.grad_fn is None
        if t.layout == torch.strided and s.nbytes() and s.data_ptr() not in skip and not number:
            seen[s.data_ptr()] = (s.nbytes(), t)  # holds t: no address is reused
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(amp):
        loss = zoo.loss_of(name, model(*inputs), targets)
    del loss
    return sum(n for n, _ in seen.values())


def same_bits(a, b):
    return all(torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8))
               for x, y in zip(a, b))


class Zoo(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ssdtrain-zoo-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, True)

    def capture_and_plan(self, name, ckpt, amp, micro_batches=1):
        tag = f"{name}-{ckpt}-{amp}"
        trace_path = os.path.join(self.tmp, f"{tag}.trace.json")
        model = make(name, ckpt)
        inputs, targets = zoo.batch(name, 0)
        with autocast(amp):
            trace = ssdtrain.capture(model, inputs, path=trace_path, min_bytes=MIN_BYTES,
                                     loss_fn=lambda out: zoo.loss_of(name, out, targets)
                                     / micro_batches,
                                     header=header(name))
        plan_path = os.path.join(self.tmp, f"{tag}.plan.json")
        plan_for(trace_path, "offload-ssd", plan_path)
        return trace, trace_path, plan_path

    def check(self, name, ckpt, amp, micro_batches=1):
        what = f"{name}, checkpoint {ckpt}, autocast {amp}, {micro_batches} micro-batch(es)"
        trace, trace_path, plan_path = self.capture_and_plan(name, ckpt, amp, micro_batches)
        self.assertEqual(ssdtrain.saved_bytes(trace), hooked_saved_bytes(name, ckpt, amp), what)
        # A checkpointed block's recomputation is traced in backward, as such.
        recompute = [o for o in trace["ops"] if ".recompute." in o["name"]]
        self.assertEqual(bool(recompute), ckpt is not None, what)
        self.assertTrue(all(o["phase"] == "backward" for o in recompute), what)
        reference, _ = train(name, ckpt, amp, micro_batches)
        offload_dir = tempfile.mkdtemp(prefix="ssdtrain-zoo-run-", dir=self.tmp)
        # "offload-ssd" writes every storage of at least MIN_BYTES; "ssdtrain" (the
        # default, which keeps the last two leaf modules' storages) on plain models.
        hows = [dict(policy="offload-ssd", min_bytes=MIN_BYTES)]
        if ckpt is None and not amp:
            hows.append(dict(policy="ssdtrain", min_bytes=MIN_BYTES))
        for how in hows + [dict(plan=plan_path, trace=trace_path)]:
            run, stats = train(name, ckpt, amp, micro_batches, dir=offload_dir, **how)
            for step in range(STEPS):
                self.assertTrue(same_bits(run[step], reference[step]), f"{what}, {how}, {step}")
                self.assertEqual(stats[step]["end"]["files_live"], 0)
            self.assertEqual(os.listdir(offload_dir), [], f"{what}, {how}")
            if "policy" in how:
                self.assertTrue(all(s["end"]["ssd_bytes_written"] > 0 for s in stats), what)
                continue
            plan = StepPlan(plan_path, trace_path)
            planned = sum(s.bytes for s in plan.storages if s.offload)
            for s in stats:
                self.assertEqual(s["end"]["ssd_bytes_written"], micro_batches * planned, what)
                self.assert_peaks(plan, s, what)
            if ckpt is None:  # checkpointed blocks save only their inputs, under 1 MiB
                self.assertGreater(planned, 0, f"{what}: the plan offloads nothing")
                self.assertGreater(plan.peaks().at_reads, 0, f"{what}: backward reads nothing")
        return trace

    def assert_peaks(self, plan, stats, what):
        """A step's resident saved bytes are the plan's (StepPlan.peaks), to the
        byte: after forward, right after backward's reads, over the whole step."""
        peaks = plan.peaks()
        self.assertEqual(stats["forward"]["peak_saved_bytes"], peaks.forward, what)
        self.assertEqual(stats["end"]["peak_saved_bytes_at_reads"], peaks.at_reads, what)
        self.assertEqual(stats["end"]["peak_saved_bytes"], peaks.step, what)

    def check_model(self, name):
        for ckpt, amp in VARIANTS:
            with self.subTest(checkpoint=ckpt, autocast=amp):
                self.check(name, ckpt, amp)

    def test_gpt_block_written_the_usual_way(self):
        self.check_model("gpt")

    def test_torch_transformer_encoder(self):
        self.check_model("encoder")

    def test_torch_transformer_decoder(self):
        self.check_model("decoder")

    def test_llama_block(self):
        self.check_model("llama")

    def test_bert_encoder_returning_a_dict(self):
        self.check_model("bert")

    def test_t5_encoder_decoder_returning_a_tuple(self):
        self.check_model("t5")

    def test_checkpointed_under_autocast(self):
        self.check("gpt", "reentrant", True)
        self.check("bert", "non-reentrant", True)

    def test_gradient_accumulation_over_micro_batches(self):
        self.check("llama", "reentrant", False, micro_batches=2)

    def test_a_model_cast_to_bf16(self):
        self.check("bf16", None, False)

    def test_frozen_parameters_and_a_no_grad_segment(self):
        self.check("frozen", None, False)

    def test_a_module_called_twice(self):
        self.check("shared", "non-reentrant", False)

    def test_a_plan_reading_everything_at_backward_start_peaks_in_backward(self):
        # Every read moved to backward's first op: the step's peak is backward's,
        # above forward's, and still the plan's to the byte.
        _, trace_path, plan_path = self.capture_and_plan("gpt", None, False)
        with open(trace_path) as f:
            start = min(o["id"] for o in json.load(f)["ops"] if o["phase"] == "backward")
        with open(plan_path) as f:
            early = json.load(f)
        for p in early["placements"]:
            if p["action"] == "offload-ssd" and p["evict_before"] < start:
                p["prefetch_before"] = start
        early_path = os.path.join(self.tmp, "gpt-early.plan.json")
        with open(early_path, "w") as f:
            json.dump(early, f)
        plan = StepPlan(early_path, trace_path)
        self.assertGreater(plan.peaks().step, plan.peaks().forward)
        self.assertEqual(plan.peaks().at_reads, plan.peaks().step)
        offload_dir = tempfile.mkdtemp(prefix="ssdtrain-zoo-run-", dir=self.tmp)
        run, stats = train("gpt", None, False, dir=offload_dir, plan=early_path,
                           trace=trace_path)
        self.assertTrue(all(same_bits(a, b) for a, b in zip(run, train("gpt", None, False)[0])))
        for s in stats:
            self.assert_peaks(plan, s, "gpt, every read at backward's start")
        self.assertEqual(os.listdir(offload_dir), [])

    def test_a_real_difference_is_refused_naming_the_storage(self):
        _, trace_path, plan_path = self.capture_and_plan("gpt", None, False)
        offload_dir = tempfile.mkdtemp(prefix="ssdtrain-zoo-run-", dir=self.tmp)
        args = dict(dir=offload_dir, plan=plan_path, trace=trace_path)
        # The same model as bf16 autocast: storage 0 (the embeddings' sum) is
        # still fp32, the first LayerNorm's output is bf16, half the bytes.
        with self.assertRaises(ssdtrain.PlanError) as e:
            train("gpt", None, True, **args)
        self.assertRegex(str(e.exception), r"saved storage \d+ is \d+ bytes bf16 first saved in "
                                           r"blocks\.0\.attn\.qkv, but the trace's storage")
        # The same storages saved by modules of other names.
        renamed = make("gpt", None)
        renamed.layers = renamed.blocks
        del renamed.blocks
        renamed.blocks = list(renamed.layers)
        with self.assertRaises(ssdtrain.PlanError) as e:
            with ssdtrain.offload(renamed, **args):
                inputs, targets = zoo.batch("gpt", 0)
                zoo.loss_of("gpt", renamed(*inputs), targets).backward()
        self.assertIn("first saved in layers.0.ln1, but the trace's storage", str(e.exception))
        self.assertIn("first saved in blocks.0.ln1", str(e.exception))
        self.assertEqual(os.listdir(offload_dir), [])


if __name__ == "__main__":
    unittest.main()

"""ssdtrain.capture: a real PyTorch step becomes a valid ssdtrain trace whose
saved bytes are what autograd saves, which `ssdtrain plan --trace` plans and
`ssdtrain replay --verify` replays."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import torch

import ssdtrain
from gpt import GPT, HEADS, HIDDEN, LAYERS, MICRO_BATCH, SEQ_LEN, VOCAB, Block, batch, loss_fn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY_DIR = os.environ.get("SSDTRAIN_BINARY_DIR", os.path.join(ROOT, "build"))
# The installed package's `ssdtrain` command (ctest sets it), else the build's binary.
CLI = os.environ.get("SSDTRAIN_CLI", os.path.join(BINARY_DIR, "app", "ssdtrain"))
HEADER = dict(model="torch-gpt", family="gpt", hidden=HIDDEN, heads=HEADS, kv_heads=HEADS,
              layers=LAYERS, ffn_hidden=4 * HIDDEN, vocab=VOCAB, seq_len=SEQ_LEN,
              micro_batch=MICRO_BATCH, dtype="fp32")


def autograd_saved_bytes(model, inputs, loss):
    """What autograd saves for one step, counted with plain saved-tensor hooks:
    the bytes of every distinct storage saved, apart from parameters, buffers
    and the inputs."""
    state = {t.storage().data_ptr() for t in list(model.parameters()) + list(model.buffers())}
    state |= {t.storage().data_ptr() for t in inputs}
    seen = {}

    def pack(t):
        if t.storage().data_ptr() not in state:
            seen[t.storage().data_ptr()] = (t.storage().nbytes(), t)  # t held: no reuse
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss(model(*inputs))
    return sum(n for n, _ in seen.values())


def run(*args):
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


class Capture(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ssdtrain-capture-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def capture_gpt(self, path=None):
        torch.manual_seed(0)
        model = GPT()
        idx, targets = batch(0)
        return ssdtrain.capture(model, (idx,), loss_fn=lambda out: loss_fn(out, targets),
                                path=path, header=HEADER)

    def test_block_saved_bytes_equal_what_autograd_saves(self):
        torch.manual_seed(0)
        block = Block()
        x = torch.randn(SEQ_LEN, MICRO_BATCH, HIDDEN, requires_grad=True)
        trace = ssdtrain.capture(block, (x,), loss_fn=lambda out: out.sum())
        torch.manual_seed(0)
        counted = autograd_saved_bytes(Block(), (x,), lambda out: out.sum())
        captured = ssdtrain.saved_bytes(trace)
        # s·b·h = 131072 elements: fp32 qkv (3), fc1 and gelu out (4 each),
        # probs and dropped probs (a·s/h each) and ln2 in/out, ctx, residual,
        # plus one-byte dropout masks and the LayerNorm statistics: ~10.5 MB.
        self.assertGreater(captured, 10_000_000)
        self.assertLessEqual(abs(captured - counted), 0.01 * counted, (captured, counted))

    def test_gpt_saved_bytes_match_ssdtrain_trace_of_the_same_config(self):
        trace = self.capture_gpt()
        config = os.path.join(ROOT, "configs", "models", "tiny-gpt.json")
        built = os.path.join(self.tmp, "tiny.json")
        rc, out = run("trace", "--model", config, "--seq-len", str(SEQ_LEN), "--micro-batch",
                      str(MICRO_BATCH), "--dtype", "fp32", "-o", built)
        self.assertEqual(rc, 0, out)
        with open(built) as f:
            reference = json.load(f)
        self.assertEqual(reference["header"]["hidden"], HIDDEN)
        self.assertEqual(reference["header"]["vocab"], VOCAB)
        self.assertEqual(reference["header"]["layers"], LAYERS)
        captured, expected = ssdtrain.saved_bytes(trace), ssdtrain.saved_bytes(reference)
        # Both ~49.4 MB; they differ by the LayerNorm statistics (2 KiB each)
        # and the position ids, which the config's accounting leaves out.
        self.assertLessEqual(abs(captured - expected), 0.02 * expected, (captured, expected))

    def test_ops_are_in_execution_order_with_module_names_flops_and_views(self):
        trace = self.capture_gpt()
        ops, tensors = trace["ops"], trace["tensors"]
        phases = [o["phase"] for o in ops]
        first_backward = phases.index("backward")
        self.assertNotIn("forward", phases[first_backward:])
        fc1 = [o for o in ops if o["name"] == "blocks.2.fc1.addmm"]
        self.assertEqual(len(fc1), 1)
        # fc1: [s·b, h] x [h, 4h]: m = 512, n = 1024, k = 256, 2·m·n·k FLOPs.
        self.assertEqual(fc1[0]["gemm"], dict(m=512, n=1024, k=256, batch=1))
        self.assertEqual(fc1[0]["flops"], 2 * 512 * 1024 * 256)
        self.assertEqual(fc1[0]["layer"], 2)
        self.assertEqual(fc1[0]["kind"], "gemm")
        # The per-head views of the fused QKV output share its storage.
        qkv = [o for o in ops if o["name"] == "blocks.0.attn.qkv.addmm"][0]["outputs"][0]
        views = [t for t in tensors if t["alias_of"] == qkv]
        self.assertGreater(len(views), 0)
        self.assertEqual(tensors[qkv]["bytes"], SEQ_LEN * MICRO_BATCH * 3 * HIDDEN * 4)
        self.assertEqual(tensors[qkv]["dtype"], "fp32")
        # Every saved activation has a producer in forward and a consumer in backward.
        for t in tensors:
            if t["saved_for_backward"] and t["kind"] == "activation":
                self.assertEqual(ops[t["producer"]]["phase"], "forward", t["name"])
                self.assertTrue(any(ops[c]["phase"] == "backward" for c in t["consumers"]),
                                t["name"])

    def test_captured_trace_plans_and_replays_with_verify(self):
        path = os.path.join(self.tmp, "captured.json")
        self.capture_gpt(path)
        plan = os.path.join(self.tmp, "plan.json")
        hw = os.path.join(ROOT, "configs", "hardware", "cpu-local.json")
        rc, out = run("plan", "--trace", path, "--hardware", hw, "--policy", "offload-ssd",
                      "-o", plan)
        self.assertEqual(rc, 0, out)
        self.assertIn("micro-batch 4", out)
        offload_dir = os.path.join(self.tmp, "ssd")
        os.mkdir(offload_dir)
        report = os.path.join(self.tmp, "run.json")
        rc, out = run("replay", "--trace", path, "--plan", plan, "--dir", offload_dir,
                      "--backend", "cpu", "--steps", "1", "--verify", "-o", report)
        self.assertEqual(rc, 0, out)
        with open(report) as f:
            r = json.load(f)
        self.assertTrue(r["verified"])
        self.assertGreater(r["ssd_bytes_written"], 0)
        self.assertGreater(r["ssd_bytes_read"], 0)
        self.assertEqual(os.listdir(offload_dir), [])

    def test_plan_refuses_another_shape_than_the_captured_one(self):
        path = os.path.join(self.tmp, "captured.json")
        self.capture_gpt(path)
        hw = os.path.join(ROOT, "configs", "hardware", "cpu-local.json")
        rc, out = run("plan", "--trace", path, "--hardware", hw, "--micro-batch", "8",
                      "-o", os.path.join(self.tmp, "plan.json"))
        self.assertNotEqual(rc, 0)
        self.assertIn("--micro-batch 8", out)
        self.assertIn("captured at micro-batch 4", out)
        rc, out = run("plan", "--trace", path, "--model", "x.json", "--hardware", hw,
                      "-o", os.path.join(self.tmp, "plan.json"))
        self.assertNotEqual(rc, 0)
        self.assertIn("exactly one of --model", out)

    def test_a_dtype_the_format_lacks_is_refused_by_name(self):
        model = torch.nn.Linear(4, 4).to(torch.complex64)
        with self.assertRaisesRegex(ValueError, "complex64"):
            ssdtrain.capture(model, (torch.randn(2, 4, dtype=torch.complex64),),
                             loss_fn=lambda out: out.abs().sum())


if __name__ == "__main__":
    unittest.main()

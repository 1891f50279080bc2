"""PyTorch execution traces, captured with torch's own observer
(ExecutionGraphObserver in torch 1.13, ExecutionTraceObserver in torch 2), read
by ssdtrain as traces (traces/pytorch_et.h): what they save for backward is
what ssdtrain.capture finds for the same step, they plan and replay, and a
malformed file is refused naming the file and the node."""

import json
import os
import shutil
import tempfile
import unittest

import torch

import ssdtrain
from gpt import GPT, batch, loss_fn
from pytorch_et import observe

from test_capture import ROOT, run  # the CLI as the tests run it (SSDTRAIN_CLI)

HW = os.path.join(ROOT, "configs", "hardware", "cpu-local.json")
SHAPE = dict(layers=2, hidden=64, heads=2, seq_len=32, vocab=128)


class PytorchEt(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ssdtrain-et-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        torch.manual_seed(0)
        self.model = GPT(**SHAPE)
        self.idx, targets = batch(0, batch_size=2, seq_len=SHAPE["seq_len"], vocab=SHAPE["vocab"])
        self.loss = lambda out: loss_fn(out, targets)
        self.et = os.path.join(self.tmp, "et.json")
        observe(self.model, (self.idx,), self.loss, self.et)

    def imported(self):
        out = os.path.join(self.tmp, "trace.json")
        rc, text = run("trace", "--from", self.et, "-o", out)
        self.assertEqual(rc, 0, text)
        self.assertIn("a PyTorch execution trace, read as a trace; assumed:", text)
        with open(out) as f:
            return json.load(f)

    def test_saved_bytes_are_what_capture_finds(self):
        trace = self.imported()
        captured = ssdtrain.capture(self.model, (self.idx,), loss_fn=self.loss)
        # The same storages: the execution trace adds only the 4-byte gradient
        # seed of loss.backward() (made before backward, read by it).
        et, cap = ssdtrain.saved_bytes(trace), ssdtrain.saved_bytes(captured)
        self.assertGreater(cap, 600_000)
        self.assertLessEqual(abs(et - cap), 16, (et, cap))
        self.assertEqual(trace["header"]["layers"], SHAPE["layers"])  # blocks.0, blocks.1
        gemms = [o for o in trace["ops"] if o["kind"] == "gemm" and o["phase"] == "forward"]
        cap_gemms = [o for o in captured["ops"] if o["kind"] == "gemm" and o["phase"] == "forward"]
        self.assertEqual(sum(o["flops"] for o in gemms), sum(o["flops"] for o in cap_gemms))

    def test_it_plans_and_replays_verified(self):
        plan = os.path.join(self.tmp, "plan.json")
        rc, out = run("plan", "--model", self.et, "--hardware", HW, "--policy", "offload-ssd",
                      "-o", plan)
        self.assertEqual(rc, 0, out)
        self.assertIn("is a trace: planned as --trace", out)
        self.assertIn("pytorch-et on 1 x cpu-local", out)
        offload_dir = os.path.join(self.tmp, "ssd")
        os.mkdir(offload_dir)
        report = os.path.join(self.tmp, "run.json")
        rc, out = run("replay", "--trace", self.et, "--plan", plan, "--dir", offload_dir,
                      "--backend", "cpu", "--steps", "1", "--verify", "-o", report)
        self.assertEqual(rc, 0, out)
        with open(report) as f:
            self.assertTrue(json.load(f)["verified"])
        self.assertEqual(os.listdir(offload_dir), [])

    def test_a_malformed_file_is_refused_naming_the_node(self):
        with open(self.et) as f:
            et = json.load(f)
        node = next(n for n in et["nodes"] if n["name"] == "aten::linear")
        node["inputs"][0] = node["inputs"][0][:4]
        bad = os.path.join(self.tmp, "bad.json")
        with open(bad, "w") as f:
            json.dump(et, f)
        rc, out = run("plan", "--trace", bad, "--hardware", HW, "-o",
                      os.path.join(self.tmp, "plan.json"))
        self.assertEqual(rc, 1, out)
        self.assertIn(f"{bad}: node {node['id']} (aten::linear): inputs[0]: expected a tensor",
                      out)


if __name__ == "__main__":
    unittest.main()

"""ssdtrain.offload(plan=...) where a run's order is not one forward then one
backward: a storage saved again through an alias after its release, eviction
points in backward, and several forwards (micro-batches) before their
backwards. Real captures, real plans from the CLI, real files."""

import json
import os
import shutil
import tempfile
import unittest

import torch
from torch import nn

import ssdtrain
import test_plan as base
from gpt import GPT, HIDDEN, LAYERS, Block, batch, loss_fn


class AliasBlock(Block):
    """A block with a gate on a stop-gradient copy of its fc1 output: `mix`'s
    gradient needs that output, so autograd saves it again, after drop2, through
    a view of a ``.detach()`` alias and a view of its ``.data``. With the plan's
    write_lag release the fc1 output's memory is gone by then (written at gelu,
    released two leaf modules later, at drop2)."""

    def __init__(self):
        super().__init__()
        self.mix = nn.Parameter(torch.full((HIDDEN,), 0.01))

    def forward(self, x):
        x = x + self.drop1(self.attn(self.ln1(x)))
        h = self.fc1(self.ln2(x))
        y = self.drop2(self.fc2(self.gelu(h)))
        s, b, _ = h.shape
        gate = (self.mix * h.detach().view(s, b, 4, HIDDEN)).sum(2)
        gate = gate + (self.mix * h.data.view(s, b, 4, HIDDEN)).sum(2)
        return x + y + gate


class AliasGPT(GPT):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(AliasBlock() for _ in range(LAYERS))


def seeded(make):
    """make() after torch.manual_seed(0): the same weights in every run."""
    torch.manual_seed(0)
    return make()


def captured_plan(tmp, model, loss=loss_fn):
    """Captures `model` (seed 0) on batch 0 and plans it (offload-ssd); the
    trace's and the plan's paths and JSON."""
    trace_path = os.path.join(tmp, "captured.json")
    idx, targets = batch(0)
    trace = ssdtrain.capture(model, (idx,), loss_fn=lambda out: loss(out, targets),
                             path=trace_path, header=base.HEADER)
    plan_path = base.plan_for(trace_path, "offload-ssd", os.path.join(tmp, "plan.json"))
    with open(plan_path) as f:
        plan = json.load(f)
    return trace_path, trace, plan_path, plan


def rewrite(plan, path, change):
    """`plan` with change(placement) applied to every offload-ssd placement,
    written to `path`."""
    plan = json.loads(json.dumps(plan))
    for p in plan["placements"]:
        if p["action"] == "offload-ssd":
            change(p)
    with open(path, "w") as f:
        json.dump(plan, f)
    return path


def assert_bitwise(test, run, reference):
    losses, grads, _ = run
    ref_losses, ref_grads, _ = reference
    for step, (loss, ref) in enumerate(zip(losses, ref_losses)):
        test.assertTrue(torch.equal(base.bits(loss), base.bits(ref)), step)
        for a, b in zip(grads[step], ref_grads[step]):
            test.assertTrue(torch.equal(base.bits(a), base.bits(b)), f"step {step}: a gradient")


class AliasOfAReleasedStorage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ssdtrain-alias-")
        cls.trace_path, cls.trace, _, cls.plan = captured_plan(cls.tmp, seeded(AliasGPT))
        # No eviction points: each write lands, and its storage is released,
        # within write_lag leaf modules.
        cls.plan_path = rewrite(cls.plan, os.path.join(cls.tmp, "bare.json"),
                                lambda p: p.pop("evict_before", None))
        cls.reference = base.train(steps=1, model=seeded(AliasGPT))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, True)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ssdtrain-py-alias-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_a_released_storage_saved_again_through_aliases_keeps_its_number(self):
        roots = base.offloaded_storages(self.trace, self.plan)
        # The precondition: the plan offloads every block's fc1 output.
        fc1 = [t for t in roots.values() if ".fc1." in t["name"]]
        self.assertEqual(len(fc1), LAYERS)
        # Capture saw the aliases as that storage (it never releases); the run
        # sees them after the release and must number them alike, or the next
        # storage's check raises PlanError (the run's numbers off by one).
        run = base.train(steps=1, model=seeded(AliasGPT), dir=self.dir, plan=self.plan_path,
                         trace=self.trace_path)
        assert_bitwise(self, run, self.reference)
        s = run[2][0]
        planned = sum(t["bytes"] for t in roots.values())
        # Each storage written once: the aliases read the fc1 output back from
        # its file.
        self.assertEqual(s["ssd_bytes_written"], planned)
        self.assertEqual(s["saved_storages"], len(
            [t for t in self.trace["tensors"] if ssdtrain.saved_index(t["name"]) is not None]))
        self.assertEqual(s["files_live"], 0)
        self.assertEqual(os.listdir(self.dir), [])


if __name__ == "__main__":
    unittest.main()

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
        # The precondition: the plan offloads every block's fc1 output (named by
        # the module that first saves it, the GELU).
        fc1 = [t for t in roots.values() if ".gelu.t" in t["name"]]
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


class GptPlan(unittest.TestCase):
    """The GPT of test_plan, captured (with `loss`) and planned once for the class."""

    loss = staticmethod(loss_fn)

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ssdtrain-schedule-")
        cls.trace_path, cls.trace, cls.plan_path, cls.plan = captured_plan(
            cls.tmp, seeded(GPT), cls.loss)
        cls.roots = base.offloaded_storages(cls.trace, cls.plan)
        cls.planned = sum(t["bytes"] for t in cls.roots.values())

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, True)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ssdtrain-py-schedule-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def offload_args(self, plan=None):
        return dict(dir=self.dir, plan=plan or self.plan_path, trace=self.trace_path)


class EvictionPointsInBackward(GptPlan):
    def test_a_point_in_backward_is_the_end_of_the_forward_pass(self):
        # Every offloaded storage given a point in backward, one op before its
        # prefetch point. A point in its own micro-batch's backward means the
        # end of the forward pass (traces/storage_plan.h), as in the replay:
        # all are released before backward reaches the first block, each
        # waiting for its write there, and read back at its prefetch point.
        late = rewrite(self.plan, os.path.join(self.tmp, "backward.json"),
                       lambda p: p.update(evict_before=p["prefetch_before"] - 1))
        with open(late) as f:
            points = [p["evict_before"] for p in json.load(f)["placements"]
                      if p["action"] == "offload-ssd"]
        self.assertEqual(len(points), len(self.roots))  # one placement per storage
        first_backward = min(o["id"] for o in self.trace["ops"] if o["phase"] == "backward")
        self.assertTrue(all(e > first_backward for e in points))  # named in backward
        seen = {}  # block -> evicted_at_plan_points when its output's gradient is ready
        model = seeded(GPT)
        with ssdtrain.offload(model, **self.offload_args(late)) as off:
            def watch(b):
                def on_grad(grad):
                    seen.setdefault(b, off.stats()["evicted_at_plan_points"])

                def hook(module, args, out):
                    out.register_hook(on_grad)
                return hook
            for b, block in enumerate(model.blocks):
                block.register_forward_hook(watch(b))
            torch.manual_seed(0)
            idx, targets = batch(0)
            loss_fn(model(idx), targets).backward()
            s = off.stats()
        self.assertEqual(sorted(seen), list(range(LAYERS)))
        for b, evicted in seen.items():
            self.assertEqual(evicted, len(self.roots), f"block {b}")
        self.assertEqual(s["evicted_at_plan_points"], len(self.roots))
        # Each read went out at its prefetch point: nothing forwarded, nothing
        # read on demand.
        self.assertEqual((s["offloaded_storages"], s["prefetched_storages"]),
                         (len(self.roots), len(self.roots)))
        self.assertEqual((s["ssd_bytes_written"], s["ssd_bytes_read"]),
                         (self.planned, self.planned))
        self.assertEqual(os.listdir(self.dir), [])


MICRO_BATCHES = 4


def accumulate(model, batches, loss=loss_fn):
    """Gradient accumulation written the usual way: every micro-batch's forward,
    then their backwards in the same order (seed 0 for dropout); the losses and
    the accumulated gradients (of their sum: a division by the count would save
    the divisor, a storage the captured step does not have)."""
    torch.manual_seed(0)
    losses = [loss(model(idx), targets) for idx, targets in batches]
    for out in losses:
        out.backward()
    return [out.detach() for out in losses], [p.grad.clone() for p in model.parameters()]


class MicroBatchPlan(GptPlan):
    """GptPlan with `micro_batches` batches and their reference gradients."""

    micro_batches = MICRO_BATCHES

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.batches = [batch(i) for i in range(cls.micro_batches)]
        cls.reference = accumulate(seeded(GPT), cls.batches, cls.loss)

    def accumulate_offloaded(self, batches=None, plan=None, at_forward=None):
        """accumulate() in an offload block; at_forward(stats) runs as each
        forward starts, after the block's own hook."""
        model = seeded(GPT)
        with ssdtrain.offload(model, **self.offload_args(plan)) as off:
            if at_forward is not None:
                model.register_forward_pre_hook(lambda m, args: at_forward(off.stats()))
            losses, grads = accumulate(model, batches or self.batches, self.loss)
            stats = off.stats()
        self.assertEqual(stats["files_live"], 0)
        self.assertEqual(os.listdir(self.dir), [])
        return losses, grads, stats

    def assertReference(self, losses, grads, reference=None):
        ref_losses, ref_grads = reference or self.reference
        for i, (a, b) in enumerate(zip(losses, ref_losses)):
            self.assertTrue(torch.equal(base.bits(a), base.bits(b)), f"micro-batch {i}'s loss")
        for a, b in zip(grads, ref_grads):
            self.assertTrue(torch.equal(base.bits(a), base.bits(b)), "a gradient differs")


class MicroBatches(MicroBatchPlan):
    def test_gradient_accumulation_is_bitwise_and_applies_each_micro_batchs_plan(self):
        losses, grads, s = self.accumulate_offloaded()
        self.assertReference(losses, grads)
        m, n = MICRO_BATCHES, len(self.roots)
        # Every micro-batch's planned storages written once, each released at its
        # own eviction point, read back at its own prefetch points (none on
        # demand, none forwarded).
        self.assertEqual(s["ssd_bytes_written"], m * self.planned)
        self.assertEqual(s["evicted_at_plan_points"], m * n)
        self.assertEqual((s["offloaded_storages"], s["prefetched_storages"]), (m * n, m * n))
        self.assertEqual((s["forwarded_storages"], s["ssd_bytes_read"]), (0, m * self.planned))
        # The peak, at the end of the last forward, holds each micro-batch's
        # saved bytes less its planned ones (one forward's: test_plan); reads
        # of another micro-batch's storages in the first backward would add to it.
        torch.manual_seed(0)
        total, _ = base.saved_storage_bytes(GPT(), *batch(0), ssdtrain.DEFAULT_MIN_BYTES)
        self.assertEqual(s["peak_saved_bytes"], m * (total - self.planned))

    def test_micro_batches_sharing_a_targets_tensor_each_number_it(self):
        # One targets tensor for every micro-batch: each forward saves it, as a
        # capture of that forward alone would (cross-entropy saves its targets).
        shared = [(idx, self.batches[0][1]) for idx, _ in self.batches[:2]]
        reference = accumulate(seeded(GPT), shared, self.loss)
        losses, grads, s = self.accumulate_offloaded(shared)
        self.assertReference(losses, grads, reference)
        self.assertEqual(s["prefetched_storages"], 2 * len(self.roots))

    def test_each_micro_batchs_count_is_checked_at_its_backward(self):
        # The second of two micro-batches ends in out.sum(), which saves three
        # storages fewer than cross-entropy: its backward, not the first, is refused.
        losses = (loss_fn, lambda out, targets: out.sum())
        model = seeded(GPT)
        n = len([t for t in self.trace["tensors"] if ssdtrain.saved_index(t["name"]) is not None])
        backwards = 0
        with self.assertRaises(ssdtrain.PlanError) as e:
            with ssdtrain.offload(model, **self.offload_args()):
                outs = [loss(model(idx), targets)
                        for loss, (idx, targets) in zip(losses, self.batches)]
                for out in outs:
                    out.backward()
                    backwards += 1
        self.assertEqual(backwards, 1)
        self.assertIn(f"the forward saved {n - 3} storages, the trace {n} (forward 1 of the "
                      f"offload block", str(e.exception))
        self.assertEqual(os.listdir(self.dir), [])


class MicroBatchesEndingWithoutSaves(MicroBatchPlan):
    """A loss that saves nothing (the mean): forward's last ops save nothing, so
    a plan's point there is past the last save."""

    loss = staticmethod(lambda out, targets: out.mean())
    micro_batches = 3

    def test_points_at_the_end_of_forward_are_honoured_when_the_next_forward_starts(self):
        last_forward = max(o["id"] for o in self.trace["ops"] if o["phase"] == "forward")
        late = rewrite(self.plan, os.path.join(self.tmp, "end.json"),
                       lambda p: p.update(evict_before=last_forward))
        starts = []
        losses, grads, s = self.accumulate_offloaded(
            plan=late, at_forward=lambda stats: starts.append(stats["evicted_at_plan_points"]))
        self.assertReference(losses, grads)
        # The run sees forward i's end when forward i + 1 starts: every storage
        # of the forwards before is released by then, not at its backward; the
        # last micro-batch's at its backward's first unpack.
        n = len(self.roots)
        m = self.micro_batches
        self.assertEqual(starts, [i * n for i in range(m)])
        self.assertEqual(s["evicted_at_plan_points"], m * n)
        self.assertEqual(s["prefetched_storages"], m * n)


if __name__ == "__main__":
    unittest.main()

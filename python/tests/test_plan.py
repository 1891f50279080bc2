"""ssdtrain.offload(plan=...): a plan `ssdtrain plan --trace` made for a captured
GPT, applied to real training: bitwise what training without offload computes,
exactly the plan's bytes written, and a run that is not the captured one
refused by name."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import torch

import ssdtrain
from gpt import GPT, HEADS, HIDDEN, LAYERS, MICRO_BATCH, SEQ_LEN, VOCAB, batch, loss_fn
from test_offload import saved_storage_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY_DIR = os.environ.get("SSDTRAIN_BINARY_DIR", os.path.join(ROOT, "build"))
# The installed package's `ssdtrain` command (ctest sets it), else the build's binary.
CLI = os.environ.get("SSDTRAIN_CLI", os.path.join(BINARY_DIR, "app", "ssdtrain"))
HARDWARE = os.path.join(ROOT, "configs", "hardware", "cpu-local.json")
HEADER = dict(model="torch-gpt", family="gpt", hidden=HIDDEN, heads=HEADS, kv_heads=HEADS,
              layers=LAYERS, ffn_hidden=4 * HIDDEN, vocab=VOCAB, seq_len=SEQ_LEN,
              micro_batch=MICRO_BATCH, dtype="fp32")
STEPS = 2


def cli(*args):
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"ssdtrain {' '.join(args)}: {p.stdout}{p.stderr}")


def plan_for(trace_path, policy, out, *options):
    """`ssdtrain plan --trace` at the trace's own shape (micro-batch 4, sequence 128)."""
    cli("plan", "--trace", trace_path, "--hardware", HARDWARE, "--policy", policy, "-o", out,
        *options)
    return out


def offloaded_storages(trace, plan):
    """Counted from the two JSON files alone: the root row of every tensor the plan
    places offload-ssd (a placement on a view applies to its storage), by id."""
    tensors = trace["tensors"]
    roots = {}
    for p in plan["placements"]:
        if p["action"] == "offload-ssd":
            r = p["tensor"]
            while tensors[r]["alias_of"] is not None:
                r = tensors[r]["alias_of"]
            roots[r] = tensors[r]
    return roots


def train(steps=STEPS, model=None, loss=loss_fn, **offload):
    """`steps` SGD steps of a GPT (seed 0), each in its own offload block when
    `offload` options are given; the losses, the gradients and each step's stats."""
    torch.manual_seed(0)
    model = model or GPT()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads, stats = [], [], []
    for step in range(steps):
        idx, targets = batch(step)
        opt.zero_grad()
        if offload:
            with ssdtrain.offload(model, **offload) as off:
                out = loss(model(idx), targets)
                out.backward()
                stats.append(off.stats())
        else:
            out = loss(model(idx), targets)
            out.backward()
        losses.append(out.detach().clone())
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    return losses, grads, stats


def bits(t):
    return t.contiguous().view(torch.int32)


class OffloadByPlan(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ssdtrain-plan-")
        cls.trace_path = os.path.join(cls.tmp, "captured.json")
        torch.manual_seed(0)
        idx, targets = batch(0)
        cls.trace = ssdtrain.capture(GPT(), (idx,), loss_fn=lambda out: loss_fn(out, targets),
                                     path=cls.trace_path, header=HEADER)
        cls.plan_path = plan_for(cls.trace_path, "offload-ssd",
                                 os.path.join(cls.tmp, "plan.json"))
        with open(cls.plan_path) as f:
            cls.plan = json.load(f)
        cls.reference = train()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, True)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ssdtrain-py-plan-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def offload_args(self, plan=None):
        return dict(dir=self.dir, plan=plan or self.plan_path, trace=self.trace_path)

    def test_training_by_a_plan_is_bitwise_identical_and_writes_exactly_its_storages(self):
        losses, grads, stats = train(**self.offload_args())
        ref_losses, ref_grads, _ = self.reference
        for step in range(STEPS):
            self.assertTrue(torch.equal(bits(losses[step]), bits(ref_losses[step])), step)
            for a, b in zip(grads[step], ref_grads[step]):
                self.assertTrue(torch.equal(bits(a), bits(b)), f"step {step}: a gradient differs")
        roots = offloaded_storages(self.trace, self.plan)
        planned = sum(t["bytes"] for t in roots.values())
        # The planner offloads some blocks' large activations: tens of MB, not all.
        self.assertGreater(planned, 10_000_000)
        self.assertLess(planned, ssdtrain.saved_bytes(self.trace))
        for s in stats:
            # Each planned storage is written once per step, nothing else: the
            # engine's payload bytes are the plan's storages' bytes, exactly.
            self.assertEqual(s["ssd_bytes_written"], planned)
            self.assertEqual(s["offloaded_storages"] + s["forwarded_storages"], len(roots))
            # What was not forwarded (still resident when backward came) was read.
            self.assertEqual(s["ssd_bytes_read"] + s["forwarded_bytes"], planned)
            # The planner gives every storage a prefetch point ahead of its first
            # use, and the writes have all landed by then: every read went out
            # there, none on demand.
            self.assertEqual(s["prefetched_storages"], s["offloaded_storages"])
            self.assertEqual(s["files_live"], 0)
        # Memory is a function of the plan and the module order. Every planned
        # storage (blocks' qkv, softmax, dropout, fc1, gelu outputs) is released
        # by the end of forward (a write lands within write_lag = 2 leaf modules,
        # and block 3's gelu is followed by fc2, drop2, ln_f and the head), so
        # the peak, at the end of forward, is all saved minus the plan's bytes.
        torch.manual_seed(0)
        total, _ = saved_storage_bytes(GPT(), *batch(0), ssdtrain.DEFAULT_MIN_BYTES)
        for s in stats:
            self.assertEqual(s["peak_saved_bytes"], total - planned)
        self.assertEqual(os.listdir(self.dir), [])

    def rewritten_plan(self, name, **fields):
        """This class's plan with `fields` set on every offload-ssd placement
        (a value None removes the field), written beside it."""
        plan = json.loads(json.dumps(self.plan))
        for p in plan["placements"]:
            if p["action"] == "offload-ssd":
                for key, value in fields.items():
                    if value is None:
                        p.pop(key, None)
                    else:
                        p[key] = value
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            json.dump(plan, f)
        return path

    def test_the_plans_eviction_points_decide_memory(self):
        roots = offloaded_storages(self.trace, self.plan)
        planned = sum(t["bytes"] for t in roots.values())
        torch.manual_seed(0)
        total, _ = saved_storage_bytes(GPT(), *batch(0), ssdtrain.DEFAULT_MIN_BYTES)
        # The planner places an eviction point on every offloaded storage.
        placements = [p for p in self.plan["placements"] if p["action"] == "offload-ssd"]
        self.assertTrue(placements)
        self.assertTrue(all("evict_before" in p for p in placements))
        _, _, planned_stats = train(steps=1, **self.offload_args())
        self.assertEqual(planned_stats[0]["evicted_at_plan_points"],
                         planned_stats[0]["offloaded_storages"])
        # Points at the first backward op (reads on demand, so that every point
        # comes before the storage's read): no storage is freed in forward, and
        # the peak, at the end of forward, is everything saved. A test that fails
        # if the points are ignored: write_lag alone frees the plan's bytes.
        first_backward = next(o["id"] for o in self.trace["ops"] if o["phase"] == "backward")
        late = self.rewritten_plan("late.json", evict_before=first_backward, prefetch_before=None)
        _, _, late_stats = train(steps=1, **self.offload_args(late))
        s = late_stats[0]
        self.assertEqual(s["peak_saved_bytes"], total)
        self.assertEqual(s["evicted_at_plan_points"], len(roots))
        self.assertEqual(s["offloaded_storages"], len(roots))
        self.assertEqual((s["ssd_bytes_written"], s["ssd_bytes_read"]), (planned, planned))
        self.assertEqual((s["prefetched_storages"], s["forwarded_storages"]), (0, 0))
        # Without points every write lands within write_lag leaf modules: the
        # peak is everything saved less the plan's bytes.
        bare = self.rewritten_plan("bare.json", evict_before=None)
        _, _, bare_stats = train(steps=1, **self.offload_args(bare))
        self.assertEqual(bare_stats[0]["peak_saved_bytes"], total - planned)
        self.assertEqual(bare_stats[0]["evicted_at_plan_points"], 0)
        self.assertEqual(os.listdir(self.dir), [])

    def test_one_block_around_two_steps_numbers_each_forward_from_zero(self):
        torch.manual_seed(0)
        model = GPT()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        planned = sum(t["bytes"] for t in offloaded_storages(self.trace, self.plan).values())
        losses, grads = [], []
        with ssdtrain.offload(model, **self.offload_args()) as off:
            for step in range(STEPS):
                idx, targets = batch(step)
                opt.zero_grad()
                loss = loss_fn(model(idx), targets)
                loss.backward()
                # Step k has written the plan's bytes k + 1 times, and autograd
                # freed every saved tensor, so every file is gone.
                self.assertEqual(off.stats()["ssd_bytes_written"], (step + 1) * planned)
                self.assertEqual(off.stats()["files_live"], 0)
                losses.append(loss.detach().clone())
                grads.append([p.grad.clone() for p in model.parameters()])
                opt.step()
        ref_losses, ref_grads, _ = self.reference
        for step in range(STEPS):
            self.assertTrue(torch.equal(bits(losses[step]), bits(ref_losses[step])), step)
            for a, b in zip(grads[step], ref_grads[step]):
                self.assertTrue(torch.equal(bits(a), bits(b)), f"step {step}: a gradient differs")
        self.assertEqual(os.listdir(self.dir), [])

    def test_another_model_is_refused_naming_the_first_storage_that_differs(self):
        # Hidden 128 instead of 256: the position ids (storage 0) match, the
        # embedding dropout's one-byte mask (storage 1) is s·b·128 = 65536 bytes
        # where the trace has s·b·256 = 131072.
        model = GPT(hidden=128)
        with self.assertRaises(ssdtrain.PlanError) as e:
            train(steps=1, model=model, **self.offload_args())
        msg = str(e.exception)
        self.assertIn("saved storage 1 is 65536 bytes uint8 first saved in drop, but", msg)
        self.assertIn("is 131072 bytes uint8 first saved in drop", msg)
        self.assertIn("capture and plan again", msg)
        self.assertEqual(os.listdir(self.dir), [])

    def test_a_forward_that_saves_fewer_storages_is_refused_before_backward_reads(self):
        # out.sum() saves nothing where cross-entropy saves its log-probabilities,
        # the targets and the NLL loss's total weight: three storages fewer.
        with self.assertRaises(ssdtrain.PlanError) as e:
            train(steps=1, loss=lambda out, targets: out.sum(), **self.offload_args())
        n = len([t for t in self.trace["tensors"] if ssdtrain.saved_index(t["name"]) is not None])
        self.assertIn(f"the forward saved {n - 3} storages, the trace {n}", str(e.exception))
        self.assertEqual(os.listdir(self.dir), [])

    def test_recompute_plans_are_refused_by_name(self):
        plan = plan_for(self.trace_path, "recompute-full", os.path.join(self.dir, "rc.json"))
        with self.assertRaisesRegex(ssdtrain.PlanError, "recompute plans are not supported"):
            ssdtrain.offload(GPT(), **self.offload_args(plan))

    def test_a_trace_not_made_by_capture_is_refused(self):
        # `ssdtrain trace` builds the same GPT from its config, but its rows carry
        # no save numbers: no run's storage can be matched to them.
        built = os.path.join(self.dir, "built.json")
        cli("trace", "--model", os.path.join(ROOT, "configs", "models", "tiny-gpt.json"),
            "--seq-len", str(SEQ_LEN), "--micro-batch", str(MICRO_BATCH), "--dtype", "fp32",
            "-o", built)
        plan = os.path.join(self.dir, "built-plan.json")
        cli("plan", "--trace", built, "--hardware", HARDWARE, "--policy", "offload-ssd", "-o", plan)
        with self.assertRaisesRegex(ssdtrain.PlanError, "not made by ssdtrain.capture"):
            ssdtrain.offload(GPT(), self.dir, plan=plan, trace=built)

    def test_a_plan_for_another_trace_is_refused_by_its_fingerprint(self):
        other = dict(self.plan, trace_fingerprint="0x0000000000000001")
        path = os.path.join(self.dir, "other.json")
        with open(path, "w") as f:
            json.dump(other, f)
        with self.assertRaisesRegex(ssdtrain.PlanError, "trace_fingerprint: 0x0000000000000001"):
            ssdtrain.offload(GPT(), **self.offload_args(path))
        with self.assertRaisesRegex(ValueError, "together with trace="):
            ssdtrain.offload(GPT(), self.dir, plan=self.plan_path)
        with self.assertRaisesRegex(ValueError, "policy 'offload-ssd' and plan= given"):
            ssdtrain.offload(GPT(), policy="offload-ssd", **self.offload_args())


if __name__ == "__main__":
    unittest.main()

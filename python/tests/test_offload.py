"""ssdtrain.offload on CPU tensors: training with offload computes bitwise what
training without it computes, through real files on the real disk."""

import contextlib
import os
import pathlib
import shutil
import tempfile
import unittest
import warnings

import torch

import ssdtrain
from gpt import GPT, batch, loss_fn

STEPS = 2


def saved_storage_bytes(model, idx, targets, min_bytes):
    """Counts, with plain saved-tensor hooks and nothing of ssdtrain, the unique
    storages autograd saves for one step, apart from parameters, buffers and the
    input:
    (all bytes, bytes of storages of at least min_bytes)."""
    params = {p.storage().data_ptr() for p in model.parameters()}
    params |= {b.storage().data_ptr() for b in model.buffers()}
    params.add(idx.storage().data_ptr())
    seen = {}

    def pack(t):
        s = t.storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = (s.nbytes(), t)  # holds t: no address is reused
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model(idx), targets)
    del loss
    sizes = [n for n, _ in seen.values()]
    return sum(sizes), sum(n for n in sizes if n >= min_bytes)


def train(dir=None, steps=STEPS, **options):
    """Trains a fresh GPT (seed 0) for `steps` SGD steps; returns the losses, the
    gradients of every step and the offload statistics of every step."""
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads, stats = [], [], []
    for step in range(steps):
        idx, targets = batch(step)
        opt.zero_grad()
        ctx = ssdtrain.offload(model, dir, **options) if dir else contextlib.nullcontext()
        with ctx as off:
            loss = loss_fn(model(idx), targets)
            if off is not None:
                after_forward = off.stats()
                files = sorted(os.listdir(off.run_dirs()[0]))
            loss.backward()
            if off is not None:
                end = off.stats()
        if off is not None:
            stats.append(dict(end=end, after_forward=after_forward, files=files,
                              final=off.stats()))
        losses.append(loss.detach().clone())
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    return losses, grads, stats


def bits(t):
    return t.contiguous().view(torch.int32)


class OffloadTraining(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.reference = train()

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ssdtrain-py-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def assertBitwiseEqual(self, run):
        losses, grads, _ = run
        ref_losses, ref_grads, _ = self.reference
        for step in range(STEPS):
            self.assertTrue(torch.equal(bits(losses[step]), bits(ref_losses[step])), f"step {step}")
            for a, b in zip(grads[step], ref_grads[step]):
                self.assertTrue(torch.equal(bits(a), bits(b)), f"step {step}: a gradient differs")

    def test_policy_all_is_bitwise_identical_and_writes_every_large_storage(self):
        run = train(self.dir, policy="offload-ssd")
        self.assertBitwiseEqual(run)
        torch.manual_seed(0)
        model = GPT()
        idx, targets = batch(0)
        total, large = saved_storage_bytes(model, idx, targets, ssdtrain.DEFAULT_MIN_BYTES)
        s = run[2][0]
        # Every storage of >= 64 KiB is written once (dedup), so the engine's
        # payload bytes are exactly the large saved storages; what backward needed
        # before its write was released was forwarded, the rest was read back.
        self.assertEqual(s["end"]["ssd_bytes_written"], large)
        self.assertEqual(s["end"]["offloaded_bytes"] + s["end"]["forwarded_bytes"], large)
        self.assertEqual(s["end"]["ssd_bytes_read"], s["end"]["offloaded_bytes"])
        self.assertGreater(s["end"]["ssd_bytes_read"], large // 2)
        self.assertGreater(s["end"]["dedup_hits"], 0)
        # After forward, resident saved bytes are everything saved minus what was
        # written and released.
        self.assertEqual(s["after_forward"]["saved_bytes_now"],
                         total - s["after_forward"]["offloaded_bytes"])
        self.assertLess(s["end"]["peak_saved_bytes"], total - large // 2)
        # Files existed during the step; none is left after it.
        self.assertGreater(len(s["files"]), 0)
        self.assertEqual(s["end"]["files_live"], 0)
        self.assertEqual(os.listdir(self.dir), [])
        # Memory is deterministic: every step peaks at the same bytes.
        self.assertEqual(len({x["end"]["peak_saved_bytes"] for x in run[2]}), 1)

    def test_policy_none_keeps_exactly_what_autograd_saves(self):
        run = train(self.dir, policy="keep")
        self.assertBitwiseEqual(run)
        torch.manual_seed(0)
        total, _ = saved_storage_bytes(GPT(), *batch(0), ssdtrain.DEFAULT_MIN_BYTES)
        s = run[2][0]["end"]
        self.assertEqual(s["peak_saved_bytes"], total)
        self.assertEqual(s["ssd_bytes_written"], 0)

    def test_policy_ssdtrain_keeps_the_last_leaf_modules_and_is_bitwise_identical(self):
        run = train(self.dir, policy="ssdtrain")
        self.assertBitwiseEqual(run)
        torch.manual_seed(0)
        _, large = saved_storage_bytes(GPT(), *batch(0), ssdtrain.DEFAULT_MIN_BYTES)
        s = run[2][0]["end"]
        # The large storages of the last two leaf modules (the final LayerNorm
        # and the head) are never written; every other large storage is, once,
        # and is read back unless backward needed it before its write was
        # released (forwarded).
        self.assertGreater(s["kept_last_bytes"], 0)
        self.assertEqual(s["ssd_bytes_written"] + s["kept_last_bytes"], large)
        self.assertEqual(s["ssd_bytes_read"] + s["forwarded_bytes"], s["ssd_bytes_written"])
        self.assertEqual(os.listdir(self.dir), [])

    def test_stats_use_the_run_report_names_and_dir_may_be_a_path(self):
        _, _, stats = train(pathlib.Path(self.dir), policy="offload-ssd", steps=1)
        for name in ("ssd_bytes_written", "ssd_bytes_read", "peak_saved_bytes", "exposed_io_ns"):
            self.assertIn(name, stats[0]["final"])
        self.assertEqual(stats[0]["final"]["ssd_bytes_written"],
                         stats[0]["end"]["ssd_bytes_written"])

    def test_one_block_around_several_steps_frees_each_steps_files(self):
        torch.manual_seed(0)
        model = GPT()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses, grads = [], []
        with ssdtrain.offload(model, self.dir, policy="offload-ssd") as off:
            for step in range(STEPS):
                idx, targets = batch(step)
                opt.zero_grad()
                loss = loss_fn(model(idx), targets)
                loss.backward()
                # Autograd freed every saved tensor, so every file is gone.
                self.assertEqual(off.stats()["files_live"], 0)
                self.assertEqual(os.listdir(off.run_dirs()[0]), [])
                losses.append(loss.detach().clone())
                grads.append([p.grad.clone() for p in model.parameters()])
                opt.step()
            self.assertEqual(off.stats()["saved_bytes_now"], 0)
        self.assertBitwiseEqual((losses, grads, None))
        self.assertEqual(os.listdir(self.dir), [])

    def test_bad_policy_and_missing_dir_are_refused(self):
        with self.assertRaisesRegex(ValueError, "policy 'most'"):
            ssdtrain.offload(GPT(), self.dir, policy="most")
        with self.assertRaisesRegex(ValueError, "no-such-dir"):
            ssdtrain.offload(GPT(), os.path.join(self.dir, "no-such-dir"))

    def test_old_policy_names_still_work_with_a_deprecation_warning(self):
        # The names are plan's and replay's (offload-ssd, keep); all and none were Python's own.
        for old, now in (("all", "offload-ssd"), ("none", "keep")):
            with self.assertWarnsRegex(DeprecationWarning, f"policy '{old}' is now '{now}'"):
                off = ssdtrain.offload(GPT(), self.dir, policy=old)
            self.assertEqual(off.policy, now)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.assertEqual(ssdtrain.offload(GPT(), self.dir, policy="keep").policy, "keep")


if __name__ == "__main__":
    unittest.main()

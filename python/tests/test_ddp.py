"""ssdtrain.offload under torch.nn.parallel.DistributedDataParallel: 2 processes
over gloo on this machine, each rank with its own offload directory, train the
zoo's GPT (zoo.py) 2 SGD steps by policy offload-ssd and by a plan (captured and
planned once, applied on each rank) bitwise as DDP without offload, with
identical gradients on both ranks, the plan's peaks of resident saved bytes on
each rank and no file left; an EIO on rank 1 ends both ranks
with OffloadError naming rank 1's tensor and file."""

import datetime
import os
import shutil
import socket
import tempfile
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

import ssdtrain
from ssdtrain.plan import StepPlan
from test_plan import plan_for
from test_zoo import MIN_BYTES, header
import zoo

WORLD, STEPS = 2, 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(rank, offload_dir, plan=None):
    """STEPS steps of DDP over the zoo GPT on this rank's batches: the gradients
    (after all-reduce) of every step and, with offload, its stats. Without a
    plan, offload wraps the DDP model (policy offload-ssd); with one (a trace
    `capture` made of the plain model), the module DDP wraps, whose module
    names are the trace's (DDP's own are prefixed "module.")."""
    torch.manual_seed(0)
    model = DistributedDataParallel(zoo.GPT())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    grads, stats = [], []
    for step in range(STEPS):
        inputs, targets = zoo.batch("gpt", WORLD * step + rank)
        opt.zero_grad()
        if offload_dir is None:
            zoo.loss_of("gpt", model(*inputs), targets).backward()
        else:
            how = dict(policy="offload-ssd") if plan is None else dict(zip(("plan", "trace"),
                                                                           plan))
            with ssdtrain.offload(model if plan is None else model.module, dir=offload_dir,
                                  **how) as off:
                zoo.loss_of("gpt", model(*inputs), targets).backward()
            stats.append(off.stats())
            assert stats[-1]["ssd_bytes_written"] > 0, f"rank {rank}: nothing offloaded"
            assert os.listdir(offload_dir) == [], f"rank {rank}: files left"
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    return grads, stats


def worker(rank, port, out_dir, plan):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        offload_dir = os.path.join(out_dir, f"rank{rank}")
        os.mkdir(offload_dir)
        plain, _ = train(rank, None)
        offloaded, _ = train(rank, offload_dir)
        planned, stats = train(rank, offload_dir, plan)
        torch.save(dict(plain=plain, offloaded=offloaded, planned=planned, stats=stats),
                   os.path.join(out_dir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def capture_and_plan(out_dir):
    """The plain zoo GPT's step captured (each rank's batch has the same shapes)
    and planned by `ssdtrain plan --trace --policy offload-ssd`: (plan, trace)."""
    torch.manual_seed(0)
    inputs, targets = zoo.batch("gpt", 0)
    trace = os.path.join(out_dir, "gpt.trace.json")
    ssdtrain.capture(zoo.GPT(), inputs, path=trace, min_bytes=MIN_BYTES,
                     loss_fn=lambda out: zoo.loss_of("gpt", out, targets), header=header("gpt"))
    return plan_for(trace, "offload-ssd", os.path.join(out_dir, "gpt.plan.json")), trace


def failing_worker(rank, port, out_dir):
    """One step of DDP with offload on each rank, an EIO injected into rank 1's
    third write; what each rank raised goes to <rank>.err."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    offload_dir = os.path.join(out_dir, f"rank{rank}")
    os.mkdir(offload_dir)
    faults = [("write", 2, "eio", 1)] if rank == 1 else []
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(zoo.GPT())
        inputs, targets = zoo.batch("gpt", rank)
        with ssdtrain.offload(model, dir=offload_dir, policy="offload-ssd", faults=faults):
            zoo.loss_of("gpt", model(*inputs), targets).backward()
        outcome = "no error"
    except Exception as e:  # noqa: BLE001 -- what each rank saw is the result
        outcome = f"{type(e).__name__}: {e}"
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.err"), "w") as f:
        f.write(outcome)


def bits(t):
    return t.contiguous().view(torch.int32)


class DataParallel(unittest.TestCase):
    def test_ddp_with_offload_on_each_rank_is_bitwise_ddp(self):
        out_dir = tempfile.mkdtemp(prefix="ssdtrain-ddp-")
        self.addCleanup(shutil.rmtree, out_dir, True)
        plan = capture_and_plan(out_dir)
        mp.spawn(worker, args=(free_port(), out_dir, plan), nprocs=WORLD, join=True)
        runs = [torch.load(os.path.join(out_dir, f"{r}.pt")) for r in range(WORLD)]
        peaks = StepPlan(*plan).peaks()
        for step in range(STEPS):
            for run in ("offloaded", "planned"):
                for r in range(WORLD):
                    for a, b in zip(runs[r][run][step], runs[r]["plain"][step]):
                        self.assertTrue(torch.equal(bits(a), bits(b)), f"{run}, rank {r}, {step}")
                for a, b in zip(runs[0][run][step], runs[1][run][step]):
                    self.assertTrue(torch.equal(bits(a), bits(b)), f"{run}, {step}: ranks differ")
            for r in range(WORLD):  # the plan's memory on each rank, to the byte
                stats = runs[r]["stats"][step]
                self.assertEqual(stats["peak_saved_bytes"], peaks.step, f"rank {r}, {step}")
                self.assertEqual(stats["peak_saved_bytes_at_reads"], peaks.at_reads)
        for r in range(WORLD):
            self.assertEqual(os.listdir(os.path.join(out_dir, f"rank{r}")), [])

    def test_an_eio_on_rank_1_ends_both_ranks_with_offload_error(self):
        out_dir = tempfile.mkdtemp(prefix="ssdtrain-ddp-fail-")
        self.addCleanup(shutil.rmtree, out_dir, True)
        mp.spawn(failing_worker, args=(free_port(), out_dir), nprocs=WORLD, join=True)
        errors = []
        for r in range(WORLD):
            with open(os.path.join(out_dir, f"{r}.err")) as f:
                errors.append(f.read())
        # Rank 1 names its tensor and file; rank 0, whose all-reduce lost its
        # peer, names rank 1 and the same.
        for msg in errors:
            self.assertTrue(msg.startswith("OffloadError: "), msg)
            self.assertRegex(msg, r"writing saved tensor \S+:saved\d+ \(float32 \[")
            self.assertRegex(msg, r"file \S+/ssdtrain-[^/ ]+/t\d+\.bin")
        self.assertIn("this rank's step failed because rank 1: ", errors[0])
        for r in range(WORLD):
            self.assertEqual(os.listdir(os.path.join(out_dir, f"rank{r}")), [])


if __name__ == "__main__":
    unittest.main()

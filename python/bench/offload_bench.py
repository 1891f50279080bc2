"""A CPU training step of the test GPT (4 blocks, hidden 256, sequence 128,
micro-batch 4) with ssdtrain.offload against without, interleaved round by
round so that both see the same machine load. Policy "plan" is the
plan-driven path: the step captured (ssdtrain.capture), planned by `ssdtrain
plan --trace --policy offload-ssd` on configs/hardware/cpu-local.json, and run
by offload(plan=..., trace=...). Prints the median step times, their ratio
and the offload statistics; --json writes them.

    PYTHONPATH=build/python /usr/bin/python3 python/bench/offload_bench.py --dir /var/tmp
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
import ssdtrain  # noqa: E402
from gpt import GPT, batch, loss_fn  # noqa: E402
from test_plan import HEADER  # noqa: E402


def planned(model, idx, targets, d, cli):
    """offload() arguments for policy "plan": the step captured and planned in d."""
    trace, plan = os.path.join(d, "captured.json"), os.path.join(d, "plan.json")
    ssdtrain.capture(model, (idx,), loss_fn=lambda out: loss_fn(out, targets), path=trace,
                     header=HEADER)
    model.zero_grad()
    subprocess.run([cli, "plan", "--trace", trace, "--policy", "offload-ssd", "--hardware",
                    os.path.join(ROOT, "configs", "hardware", "cpu-local.json"), "-o", plan],
                   check=True, capture_output=True)
    return dict(plan=plan, trace=trace)


def step(model, opt, idx, targets, dir=None, policy=None):
    t0 = time.perf_counter_ns()
    opt.zero_grad()
    stats = None
    if dir is None:
        loss_fn(model(idx), targets).backward()
    else:
        how = policy if isinstance(policy, dict) else dict(policy=policy)
        with ssdtrain.offload(model, dir, **how) as off:
            loss_fn(model(idx), targets).backward()
            stats = off.stats()
    opt.step()
    return time.perf_counter_ns() - t0, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp", help="offload directory (on the SSD)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--policies", default="keep,ssdtrain,offload-ssd,plan",
                    help="offload policies, comma-separated (keep: the hooks, nothing written; "
                         "plan: by a plan for the captured step)")
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "app", "ssdtrain"),
                    help="the ssdtrain binary (for policy plan)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    idx, targets = batch(0)
    policies = args.policies.split(",")
    with tempfile.TemporaryDirectory(prefix="ssdtrain-bench-plan-") as plan_dir, \
            tempfile.TemporaryDirectory(dir=args.dir, prefix="ssdtrain-bench-") as d:
        how = {p: p for p in policies}
        if "plan" in how:
            how["plan"] = planned(model, idx, targets, plan_dir, args.cli)
        for p in [None] + policies:  # warm-up: allocator, page cache, engine
            step(model, opt, idx, targets, d if p else None, how.get(p))
        times = {p: [] for p in ["baseline"] + policies}
        stats = {}
        for _ in range(args.rounds):
            times["baseline"].append(step(model, opt, idx, targets)[0])
            for p in policies:
                ns, stats[p] = step(model, opt, idx, targets, d, how[p])
                times[p].append(ns)
        assert os.listdir(d) == [], "offload files left behind"
    base = statistics.median(times["baseline"])
    out = dict(threads=torch.get_num_threads(), rounds=args.rounds, dir=args.dir,
               median_ms={p: statistics.median(v) / 1e6 for p, v in times.items()},
               ratio={p: statistics.median(times[p]) / base for p in policies},
               stats={p: {k: stats[p][k] for k in ("ssd_bytes_written", "ssd_bytes_read",
                                                   "peak_saved_bytes", "exposed_io_ns",
                                                   "forwarded_bytes", "backend", "direct_io")}
                      for p in policies})
    print(f"step without offload: {out['median_ms']['baseline']:.1f} ms (median of {args.rounds})")
    for p in policies:
        s = out["stats"][p]
        print(f"policy {p}: {out['median_ms'][p]:.1f} ms ({out['ratio'][p]:.3f}x), wrote "
              f"{s['ssd_bytes_written'] / 2**20:.1f} MiB, read {s['ssd_bytes_read'] / 2**20:.1f} "
              f"MiB, peak saved {s['peak_saved_bytes'] / 2**20:.1f} MiB, exposed I/O "
              f"{s['exposed_io_ns'] / 1e6:.2f} ms ({s['backend']}, O_DIRECT {s['direct_io']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

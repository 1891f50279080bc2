#!/usr/bin/python3
"""Plots from ssdtrain's JSON files (Debian's python3-matplotlib; run with /usr/bin/python3).

Inputs are the files the CLI writes:
  - timelines: Chrome traces from `ssdtrain simulate|plan|replay --timeline FILE`
    ("X" spans with one thread per stage and lane, "C" memory counters);
  - reports: prediction/run files (`"format": "ssdtrain-report"`) from
    `ssdtrain simulate -o` and `ssdtrain replay -o`.

Sub-commands (each writes one PNG):
  timelines  --predicted T --measured T -o out.png   predicted above measured, one row per lane
  memory     LABEL=TIMELINE ... -o out.png           device memory over the step, one line per policy
  rok        REPORT ... -o out.png                   activation peak against step time, one point per file
  bandwidth  --timeline T --write-GBps W --read-GBps R -o out.png
                                                     SSD bandwidth used over the step against what is available
"""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LANE_ORDER = ["compute", "d2h", "h2d", "ssd_write", "ssd_read", "network"]
LANE_COLORS = {
    "compute": "#4c72b0",
    "d2h": "#dd8452",
    "h2d": "#55a868",
    "ssd_write": "#c44e52",
    "ssd_read": "#8172b3",
    "network": "#937860",
}


def fail(msg):
    print(f"plots.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        fail(f"{path}: cannot open ({e.strerror})")
    except json.JSONDecodeError as e:
        fail(f"{path}: not valid JSON ({e})")


def load_chrome(path):
    """Returns (spans, counters): spans as (lane, stage, start_us, dur_us, bytes)."""
    doc = load_json(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        fail(f"{path}: traceEvents: expected a Chrome trace (from --timeline)")
    thread_names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            thread_names[e["tid"]] = e["args"]["name"]
    spans, counters = [], []
    for e in events:
        if e.get("ph") == "X":
            name = thread_names.get(e.get("tid"), "stage 0 compute")
            parts = name.split()
            stage = int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else 0
            lane = parts[-1]
            spans.append((lane, stage, float(e["ts"]), float(e["dur"]), int(e.get("args", {}).get("bytes", 0))))
        elif e.get("ph") == "C" and e.get("name") == "memory":
            args = e.get("args", {})
            counters.append((float(e["ts"]), float(args.get("device_MiB", 0)), float(args.get("activation_MiB", 0))))
    counters.sort()
    return spans, counters


def draw_lanes(ax, spans, title):
    lanes = sorted({(s[1], s[0]) for s in spans}, key=lambda k: (k[0], LANE_ORDER.index(k[1]) if k[1] in LANE_ORDER else 99))
    rows = {k: i for i, k in enumerate(lanes)}
    for lane, stage, ts, dur, _ in spans:
        ax.broken_barh([(ts / 1000.0, max(dur, 1e-3) / 1000.0)], (rows[(stage, lane)] - 0.4, 0.8),
                       facecolors=LANE_COLORS.get(lane, "gray"))
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"s{st} {ln}" for st, ln in lanes])
    ax.invert_yaxis()
    ax.set_title(title)
    ax.set_xlabel("time (ms)")


def cmd_timelines(a):
    ps, _ = load_chrome(a.predicted)
    ms, _ = load_chrome(a.measured)
    fig, axes = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    draw_lanes(axes[0], ps, f"predicted ({a.predicted})")
    draw_lanes(axes[1], ms, f"measured ({a.measured})")
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)


def cmd_memory(a):
    fig, ax = plt.subplots(figsize=(10, 5))
    for item in a.timelines:
        if "=" not in item:
            fail(f"{item}: expected LABEL=TIMELINE")
        label, path = item.split("=", 1)
        _, counters = load_chrome(path)
        if not counters:
            fail(f"{path}: no memory counter events")
        t0 = counters[0][0]
        ax.step([(c[0] - t0) / 1000.0 for c in counters], [c[1] for c in counters], where="post", label=label)
    ax.set_xlabel("time in step (ms)")
    ax.set_ylabel("device memory (MiB)")
    ax.set_title("Device memory over one step")
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)


def cmd_rok(a):
    fig, ax = plt.subplots(figsize=(8, 5))
    for path in a.reports:
        r = load_json(path)
        if not isinstance(r, dict) or r.get("format") != "ssdtrain-report":
            fail(f"{path}: format: expected \"ssdtrain-report\"")
        x = r["step_time_ns"] / 1e6
        y = r["peak_activation_bytes"] / 2**20
        marker = "o" if r.get("kind") == "run" else "x"
        ax.scatter([x], [y], marker=marker)
        ax.annotate(f"{r.get('policy', '?')} ({r.get('kind', '?')})", (x, y), textcoords="offset points", xytext=(4, 4))
    ax.set_xlabel("step time (ms)")
    ax.set_ylabel("activation peak (MiB)")
    ax.set_title("Recompute-offload-keep: memory against time (x predicted, o measured)")
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)


def cmd_bandwidth(a):
    spans, _ = load_chrome(a.timeline)
    io = [s for s in spans if s[0] in ("ssd_write", "ssd_read")]
    if not io:
        fail(f"{a.timeline}: no SSD spans (was anything offloaded?)")
    t_end = max(s[2] + s[3] for s in spans)
    t0 = min(s[2] for s in spans)
    bins = max(10, a.bins)
    width = (t_end - t0) / bins
    used = {"ssd_write": [0.0] * bins, "ssd_read": [0.0] * bins}
    for lane, _, ts, dur, nbytes in io:
        if dur <= 0 or nbytes <= 0:
            continue
        rate = nbytes / dur  # bytes per µs
        for b in range(bins):
            lo, hi = t0 + b * width, t0 + (b + 1) * width
            overlap = max(0.0, min(hi, ts + dur) - max(lo, ts))
            used[lane][b] += rate * overlap
    xs = [(b + 0.5) * width / 1000.0 for b in range(bins)]
    fig, ax = plt.subplots(figsize=(10, 5))
    for lane, avail in (("ssd_write", a.write_GBps), ("ssd_read", a.read_GBps)):
        gbps = [u / width / 1000.0 for u in used[lane]]  # bytes/µs -> GB/s
        ax.plot(xs, gbps, color=LANE_COLORS[lane], label=f"{lane} used")
        if avail:
            ax.axhline(avail, color=LANE_COLORS[lane], linestyle="--", label=f"{lane} available")
    ax.set_xlabel("time in step (ms)")
    ax.set_ylabel("GB/s")
    ax.set_title("SSD bandwidth used against available")
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("timelines")
    t.add_argument("--predicted", required=True)
    t.add_argument("--measured", required=True)
    t.add_argument("-o", "--output", required=True)
    t.set_defaults(fn=cmd_timelines)
    m = sub.add_parser("memory")
    m.add_argument("timelines", nargs="+")
    m.add_argument("-o", "--output", required=True)
    m.set_defaults(fn=cmd_memory)
    r = sub.add_parser("rok")
    r.add_argument("reports", nargs="+")
    r.add_argument("-o", "--output", required=True)
    r.set_defaults(fn=cmd_rok)
    b = sub.add_parser("bandwidth")
    b.add_argument("--timeline", required=True)
    b.add_argument("--write-GBps", type=float, default=0.0)
    b.add_argument("--read-GBps", type=float, default=0.0)
    b.add_argument("--bins", type=int, default=100)
    b.add_argument("-o", "--output", required=True)
    b.set_defaults(fn=cmd_bandwidth)
    a = p.parse_args(argv)
    a.fn(a)


if __name__ == "__main__":
    main(sys.argv[1:])

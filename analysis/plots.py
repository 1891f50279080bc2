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
  rok        FILE ... -o out.png                     activation peak against step time: one point per report,
                                                     the planner's curve from a plan file (`plan -o`) or
                                                     every policy from `plan --compare --json`, over-budget
                                                     points marked
  bandwidth  --timeline T --write-GBps W --read-GBps R -o out.png
                                                     SSD bandwidth used over the step against what is available
"""

import argparse
import json
import sys

import matplotlib
import matplotlib.text
import matplotlib.transforms

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


def rok_points(path):
    """A file's ROK points as dicts: policy, kind, x (step ms), y (activation MiB), over (bytes past the
    budget, or None where the file has no budget).

    A step report (`ssdtrain simulate|replay -o`, `plan --prediction`) is one point; a plan file
    (`ssdtrain plan -o`) holds the planner's curve at its best layout in extra.rok, one point per policy,
    each with over_budget_bytes (`plan --rok` writes them; a point with simulated false is left out); a policy comparison (`plan --compare --json`) is
    one point per policy at its own best layout and the comparison's global batch."""
    r = load_json(path)
    fmt = r.get("format") if isinstance(r, dict) else None
    if fmt == "ssdtrain-report":
        return [{"policy": r.get("policy", "?"), "kind": r.get("kind", "?"), "x": r["step_time_ns"] / 1e6,
                 "y": r["peak_activation_bytes"] / 2**20, "over": None}]
    if fmt == "ssdtrain-plan":
        rok = r.get("extra", {}).get("rok")
        if not isinstance(rok, list) or not rok:
            fail(f"{path}: extra.rok: expected the planner's curve (make the plan with ssdtrain plan)")
        return [{"policy": e["policy"], "kind": "plan", "x": e["step_time_ns"] / 1e6,
                 "y": e["peak_activation_bytes"] / 2**20, "over": e.get("over_budget_bytes")}
                for e in rok if e.get("simulated", True)]
    if fmt == "ssdtrain-policy-comparison":
        rows = [e for e in r.get("policies", []) if e.get("simulated")]
        if not rows:
            fail(f"{path}: policies: no policy was simulated (its weights alone are over the budget)")
        return [{"policy": e["policy"], "kind": "compare", "x": e["step_time_ns"] / 1e6,
                 "y": e["peak_activation_bytes"] / 2**20, "over": e.get("over_budget_bytes")} for e in rows]
    fail(f"{path}: format: expected \"ssdtrain-report\", \"ssdtrain-plan\" or \"ssdtrain-policy-comparison\"")


ROK_MARKERS = {"prediction": "x", "run": "o", "plan": "s", "compare": "D"}
OVER_BUDGET_COLOR = "#d62728"
# Matplotlib's default cycle without its red, which marks the points over the budget.
POLICY_COLORS = ["C0", "C1", "C2", "C4", "C5", "C6", "C7", "C8", "C9"]


def rok_label(p):
    label = f"{p['policy']} ({p['kind']})"
    if p["over"]:
        label += f"\n{p['over'] / 2**20:.1f} MiB over budget"
    return label


def label_offsets():
    """Where a label may go, in points from its marker: nearest first, then further out (with a leader line)."""
    directions = [(1, 1, "left", "bottom"), (1, -1, "left", "top"), (-1, 1, "right", "bottom"),
                  (-1, -1, "right", "top"), (0, 1, "center", "bottom"), (0, -1, "center", "top"),
                  (1, 0, "left", "center"), (-1, 0, "right", "center")]
    for ring, distance in enumerate((5, 14, 26, 40, 56, 74, 94, 118, 146)):
        for dx, dy, ha, va in directions:
            yield (dx * distance, dy * distance, ha, va, ring > 0)


def segment_crosses(p0, p1, box):
    """Whether the segment p0-p1 (display coordinates) meets the box (Liang-Barsky clipping)."""
    t0, t1 = 0.0, 1.0
    dx, dy = p1[0] - p0[0], p1[1] - p0[1]
    for p, q in ((-dx, p0[0] - box.x0), (dx, box.x1 - p0[0]), (-dy, p0[1] - box.y0), (dy, box.y1 - p0[1])):
        if p == 0:
            if q < 0:
                return False
        else:
            t = q / p
            if p < 0:
                t0 = max(t0, t)
            else:
                t1 = min(t1, t)
            if t0 > t1:
                return False
    return True


def label_conflicts(box, leader_from, inside, placed, markers, own):
    """How badly a label's box sits: 1000 if it leaves the axes, 100 per label it covers, 10 per marker it
    covers, 1 per marker its leader line (from leader_from, or None) passes over (a marker under its own, as
    points at one place are, is no conflict). 0: a free place."""
    score = 0 if (box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0
                  and box.y1 <= inside.y1) else 1000
    score += 100 * sum(box.overlaps(b) for b in placed) + 10 * sum(box.overlaps(b) for b in markers)
    if leader_from is not None:
        end = box.get_points().mean(axis=0)
        score += sum(segment_crosses(leader_from, end, b) for b in markers if not b.overlaps(markers[own]))
    return score


def text_box(ann, renderer):
    """An annotation's text alone in display coordinates (Annotation.get_window_extent adds its arrow)."""
    ann.update_positions(renderer)
    return matplotlib.text.Text.get_window_extent(ann, renderer)


def place_labels(fig, ax, points, texts):
    """Annotates each point with its text where it covers no other label or marker and stays inside the axes,
    trying label_offsets() in order (a label moved off its marker gets a leader line, which must not cross
    another marker either); where no offset is free, the one with the fewest conflicts. Returns the
    annotations."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    pad = 4  # pixels kept free around markers and labels
    centers = [ax.transData.transform((p["x"], p["y"])) for p in points]
    markers = [matplotlib.transforms.Bbox([[x - pad, y - pad], [x + pad, y + pad]]) for x, y in centers]
    placed, annotations = [], []
    for k, (p, text) in enumerate(zip(points, texts)):
        best = None
        for dx, dy, ha, va, leader in label_offsets():
            ann = ax.annotate(text, (p["x"], p["y"]), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                              fontsize=9, arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.6} if leader else None)
            box = text_box(ann, renderer).padded(pad / 2)
            score = label_conflicts(box, centers[k] if leader else None, inside, placed, markers, k)
            if best is None or score < best[0]:
                if best is not None:
                    best[1].remove()
                best = (score, ann, box)
            else:
                ann.remove()
            if score == 0:
                break
        placed.append(best[2])
        annotations.append(best[1])
    return annotations


def draw_rok(paths):
    """The ROK figure: one color per policy, the marker its kind (x predicted, o measured, s the planner's curve),
    points over the budget drawn hollow in red; labels placed apart (place_labels)."""
    points = [p for path in paths for p in rok_points(path)]
    policies = list(dict.fromkeys(p["policy"] for p in points))
    colors = {policy: POLICY_COLORS[i % len(POLICY_COLORS)] for i, policy in enumerate(policies)}
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for p in points:
        marker = ROK_MARKERS.get(p["kind"], "D")
        if p["over"]:  # a plan file's point (s): hollow, red-edged
            ax.scatter([p["x"]], [p["y"]], marker=marker, s=60, linewidths=1.5, facecolors="none",
                       edgecolors=OVER_BUDGET_COLOR)
        else:
            ax.scatter([p["x"]], [p["y"]], marker=marker, s=40, color=colors[p["policy"]])
    # Room inside the axes for the labels beside the outermost points.
    ax.margins(x=0.25, y=0.2)
    ax.set_xlabel("step time (ms)")
    ax.set_ylabel("activation peak (MiB)")
    ax.set_title("Recompute-offload-keep: memory against time\n"
                 "(x predicted, o measured, s planner's curve, D plan --compare; hollow red: over the memory "
                 "budget)", fontsize=10)
    fig.tight_layout()
    texts = [rok_label(p) for p in points]
    annotations = place_labels(fig, ax, points, texts)
    for p, ann in zip(points, annotations):
        ann.set_color(OVER_BUDGET_COLOR if p["over"] else colors[p["policy"]])
    return fig, ax, annotations


def cmd_rok(a):
    fig, _, _ = draw_rok(a.reports)
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

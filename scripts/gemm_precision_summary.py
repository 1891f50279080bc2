#!/usr/bin/env python3
"""bench/gemm_precision_bench's JSON (--benchmark_out) as one row per GEMM shape:
bf16, FP8 and FP8 with fast accumulation in TFLOP/s (FLOPs over the GPU's time),
each against its peak, and FP8's speed-up over bf16.

    python3 scripts/gemm_precision_summary.py gemm_precision.json
"""
import json
import sys

UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def main(path):
    with open(path) as f:
        report = json.load(f)
    rows = {}  # (m, n, k) -> {"tag": ..., mode: (tflops, efficiency)}
    errors = []
    for b in report.get("benchmarks", []):
        # BM_Gemm/<mode>/<m>x<n>x<k>/<model>/tp<t>/cp<c>/mb<b>/manual_time
        parts = b["name"].split("/")
        if len(parts) < 4 or parts[0] != "BM_Gemm":
            continue
        mode, dims, tag = parts[1], parts[2], "/".join(parts[3:-1])
        if b.get("error_occurred"):
            errors.append(f"{b['name']}: {b.get('error_message', '')}")
            continue
        seconds = b["real_time"] * UNIT_SECONDS[b.get("time_unit", "ns")]
        tflops = b["flops"] / seconds / 1e12
        row = rows.setdefault(tuple(int(x) for x in dims.split("x")), {"tag": tag})
        row[mode] = (tflops, tflops / b["peak_TFLOPs"])
    print(f"{'m':>6} {'n':>6} {'k':>6}  {'bf16':>13}  {'fp8':>13}  {'fp8 fast':>13}  "
          f"{'fp8/bf16':>8}  first run with this shape")
    for (m, n, k), row in sorted(rows.items()):
        cells = []
        for mode in ("bf16", "fp8", "fp8-fastacc"):
            t = row.get(mode)
            cells.append(f"{t[0]:6.0f} ({t[1]:4.0%})" if t else f"{'-':>13}")
        ratio = (row["fp8"][0] / row["bf16"][0]) if "fp8" in row and "bf16" in row else None
        print(f"{m:>6} {n:>6} {k:>6}  {cells[0]}  {cells[1]}  {cells[2]}  "
              f"{(f'{ratio:8.2f}' if ratio else '       -')}  {row['tag']}")
    print("TFLOP/s (share of the peak): each GEMM's FLOPs over its mean GPU time (CUDA events)")
    for e in errors:
        print("error: " + e)
    return 1 if errors or not rows else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))

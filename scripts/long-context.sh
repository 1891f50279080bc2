#!/usr/bin/env bash
# Long context, answered (issue 44, item 7): does SSD offload win where
# sequences are long, against context parallelism, recompute and host offload?
# `ssdtrain plan --compare` at each case, every policy at its best layout (cp,
# tp, pp, dp, ZeRO, micro-batch searched) and one global batch of one sequence
# per GPU, on the H100 preset (one Gen5 NVMe drive per GPU writing 6.6 GB/s):
#   Llama-3-8B at sequence 32768, 65536 and 131072 on 8 GPUs;
#   Llama-3-70B at 131072 on 64 GPUs.
# Prints each comparison's table and verdict, then one line per case: the best
# plan, its layout, and what SSD offload bought. README.md quotes the result.
#
#   scripts/long-context.sh                   builds ssdtrain in build/ (or $SSDTRAIN_BUILD_DIR)
#   scripts/long-context.sh --hardware X.json another preset
#   SSDTRAIN_BIN=/path/to/ssdtrain scripts/long-context.sh   an already built binary
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
hardware=$root/configs/hardware/h100-sxm-8x-gen5-nvme.json
while (($# > 0)); do
  case $1 in
    --hardware) hardware=$2; shift 2 ;;
    *) echo "long-context.sh: unknown argument $1 (expected --hardware FILE)" >&2; exit 2 ;;
  esac
done
if [[ -z ${SSDTRAIN_BIN:-} ]]; then
  build=${SSDTRAIN_BUILD_DIR:-$root/build}
  SSDTRAIN_BUILD_DIR=$build SSDTRAIN_TARGET=ssdtrain "$root/scripts/build.sh" >/dev/null
  SSDTRAIN_BIN=$build/app/ssdtrain
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cases=(
  "llama-3-8b 32768 8"
  "llama-3-8b 65536 8"
  "llama-3-8b 131072 8"
  "llama-3-70b 131072 64"
)
summary=()
for c in "${cases[@]}"; do
  read -r model seq gpus <<<"$c"
  echo "== $model, sequence $seq, $gpus GPUs"
  start=$(date +%s)
  "$SSDTRAIN_BIN" plan --model "$root/configs/models/$model.json" --hardware "$hardware" \
    --gpus "$gpus" --seq-len "$seq" --global-batch "$gpus" --compare \
    --json "$work/$model-$seq.json" -o "$work/$model-$seq.plan.json" 2>/dev/null |
    sed -n '1,/^  The best plan/p'
  seconds=$(($(date +%s) - start))
  summary+=("$(/usr/bin/python3 - "$work/$model-$seq.json" "$model" "$seq" "$gpus" "$seconds" <<'PY'
import json, sys
path, model, seq, gpus, seconds = sys.argv[1:6]
j = json.load(open(path))
rows = [r for r in j["policies"] if r.get("fits")]
best = max(rows, key=lambda r: r["tokens_per_s"])
no_ssd = [r for r in rows if r.get("ssd_bytes_written", 0) == 0]
ssd = [r for r in rows if r.get("ssd_bytes_written", 0) > 0]
def layout(r):
    return "tp {} cp {} pp {} dp {}{}".format(r["tp"], r.get("cp", 1), r["pp"], r["dp"],
                                          " ZeRO-{}".format(r["zero_stage"]) if r["zero_stage"] else "")
line = "{} s={} on {}: best {} at {}, {:.0f} tokens/s".format(model, seq, gpus, best["policy"],
                                                              layout(best), best["tokens_per_s"])
if ssd:
    s = max(ssd, key=lambda r: r["tokens_per_s"])
    n = max(no_ssd, key=lambda r: r["tokens_per_s"]) if no_ssd else None
    line += "; fastest writing to the SSD: {} at {}, {:.2f}x of the best without{}".format(
        s["policy"], layout(s), s["tokens_per_s"] / n["tokens_per_s"] if n else float("nan"),
        "" if n else " (none fits without)")
else:
    line += "; no plan that fits writes to the SSD"
print(line + " ({} s)".format(seconds))
PY
)")
done
echo "== summary"
printf '%s\n' "${summary[@]}"

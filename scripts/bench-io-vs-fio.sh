#!/usr/bin/env bash
# Compares `ssdtrain bench-io` with fio on the same directory, block size, queue
# depth and size, interleaved (A B, B A, A B, ...), and prints the medians and ratios.
#
#   scripts/bench-io-vs-fio.sh --dir D [--bs 4M] [--qd 32] [--size 1G] [--rounds 5]
#                              [--bin build/app/ssdtrain]
#
# fio runs as: fio --direct=1 --ioengine=io_uring --rw=write|read --bs=B
# --iodepth=Q --size=S on one file in D (written, then read back). Files are removed.
set -euo pipefail

dir="" bs="4M" qd=32 size="1G" rounds=5 bin="${SSDTRAIN_BIN:-build/app/ssdtrain}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --bs) bs="$2"; shift 2 ;;
    --qd) qd="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    *) echo "bench-io-vs-fio: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "$dir" ]] || { echo "bench-io-vs-fio: --dir is required" >&2; exit 2; }
[[ -d "$dir" ]] || { echo "bench-io-vs-fio: $dir is not a directory" >&2; exit 2; }
[[ -x "$bin" ]] || { echo "bench-io-vs-fio: $bin not built (cmake --build ... --target ssdtrain)" >&2; exit 2; }
command -v fio >/dev/null || { echo "bench-io-vs-fio: fio not installed" >&2; exit 2; }

fio_file="$dir/fio-bench-$$.bin"
results="$(mktemp)"
trap 'rm -f "$fio_file" "$results"' EXIT INT TERM

fio_gbps() {  # $1 = write|read; prints GB/s
  fio --name=bench --filename="$fio_file" --direct=1 --ioengine=io_uring --rw="$1" \
      --bs="$bs" --iodepth="$qd" --size="$size" --output-format=json 2>/dev/null |
    python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; d=sys.argv[1]; print("%.4f" % (j[d]["bw_bytes"]/1e9))' "$1"
}

echo "bench-io vs fio: dir=$dir bs=$bs qd=$qd size=$size rounds=$rounds"
echo "  A: $bin bench-io --dir $dir --block-size $bs --queue-depth $qd --size $size"
echo "  B: fio --direct=1 --ioengine=io_uring --rw=write|read --bs=$bs --iodepth=$qd --size=$size"
run_ssdtrain() {
  out="$("$bin" bench-io --dir "$dir" --block-size "$bs" --queue-depth "$qd" --size "$size")"
  sw="$(awk '/^write:/ {print $2}' <<<"$out")"
  sr="$(awk '/^read:/ {print $2}' <<<"$out")"
}
run_fio() {
  fw="$(fio_gbps write)"
  fr="$(fio_gbps read)"
  rm -f "$fio_file"
}
# Odd rounds run A then B, even rounds B then A, so neither always follows the other.
for ((i = 1; i <= rounds; i++)); do
  if ((i % 2)); then run_ssdtrain; run_fio; else run_fio; run_ssdtrain; fi
  printf "  round %d: ssdtrain write %s read %s | fio write %s read %s GB/s\n" "$i" "$sw" "$sr" "$fw" "$fr"
  echo "$sw $sr $fw $fr" >>"$results"
done

python3 - "$results" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
med = [statistics.median(r[i] for r in rows) for i in range(4)]
print("median GB/s: ssdtrain write %.3f read %.3f | fio write %.3f read %.3f" % tuple(med))
print("ratio ssdtrain/fio: write %.3f read %.3f (target >= 0.90)" % (med[0] / med[2], med[1] / med[3]))
PY

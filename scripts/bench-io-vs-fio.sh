#!/usr/bin/env bash
# Compares `ssdtrain bench-io` with fio on the same directories, block size, queue
# depth and size, interleaved (A B, B A, A B, ...), and prints the medians and ratios.
#
#   scripts/bench-io-vs-fio.sh --dir D [--dir D2 ...] [--bs 4M] [--qd 32] [--size 1G]
#                              [--rounds 6] [--bin build/app/ssdtrain]
#                              [--fio-extra "..."] [--fio-plain]
#
# fio runs as: fio --direct=1 --ioengine=io_uring BEST --rw=write|read --bs=B
# --iodepth=Q --size=S on one file in D (written, then read back); with n
# directories as n jobs (--numjobs=n --directory=D:D2:..., one file each of S/n,
# --group_reporting), each at --iodepth=Q, as bench-io keeps Q requests in
# flight per directory. Files are removed.
#
# BEST is fio's fastest io_uring options, each kept where this fio and kernel
# accept it (tried on a small file first): --fixedbufs (registered buffers),
# --registerfiles, --hipri (polled completions; the kernel falls back to
# interrupts on a device without poll queues). --fio-plain leaves them out;
# --fio-extra adds options after them.
#
# The rounds must be even: odd rounds run bench-io first, even rounds fio, and a
# virtual disk can favour whichever runs first. Printed: the medians of each
# figure, their ratios, and the median of each round's own ratio (the two runs of
# a round share the disk's state of that minute).
set -euo pipefail

fio_extra="" fio_plain=0 dirs=() bs="4M" qd=32 size="1G" rounds=6 bin="${SSDTRAIN_BIN:-build/app/ssdtrain}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dirs+=("$2"); shift 2 ;;
    --bs) bs="$2"; shift 2 ;;
    --qd) qd="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --fio-extra) fio_extra="$2"; shift 2 ;;
    --fio-plain) fio_plain=1; shift ;;
    *) echo "bench-io-vs-fio: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ ${#dirs[@]} -gt 0 ]] || { echo "bench-io-vs-fio: --dir is required" >&2; exit 2; }
[[ "$rounds" =~ ^[0-9]+$ && $rounds -ge 2 && $((rounds % 2)) -eq 0 ]] || {
  echo "bench-io-vs-fio: --rounds: expected an even count of at least 2 (each tool runs first in half of them), got '$rounds'" >&2
  exit 2
}
for d in "${dirs[@]}"; do
  [[ -d "$d" ]] || { echo "bench-io-vs-fio: $d is not a directory" >&2; exit 2; }
done
n=${#dirs[@]}
dir="${dirs[0]}"
dir_flags="" fio_dirs=""
for d in "${dirs[@]}"; do dir_flags+=" --dir $d"; fio_dirs+="${fio_dirs:+:}$d"; done
[[ -x "$bin" ]] || { echo "bench-io-vs-fio: $bin not built (cmake --build ... --target ssdtrain)" >&2; exit 2; }
command -v fio >/dev/null || { echo "bench-io-vs-fio: fio not installed" >&2; exit 2; }

fio_file="$dir/fio-bench-$$.bin"
results="$(mktemp)"
cleanup() {
  rm -f "$fio_file" "$results" "${probe:-}"
  for d in "${dirs[@]}"; do rm -f "$d"/fiobench.*; done
}
trap cleanup EXIT INT TERM
# Each fio job's share of --size with several directories.
job_size="$(python3 -c '
import re, sys
m = re.fullmatch(r"(\d+)([kKmMgG]?)(i?[bB])?", sys.argv[1])
if not m: sys.exit("bench-io-vs-fio: --size: expected bytes or a count with k, M or G")
b = int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
print(b // int(sys.argv[2]))' "$size" "$n")"

fio_where() {
  if ((n == 1)); then
    echo "--filename=$fio_file --size=$size"
  else
    echo "--directory=$fio_dirs --numjobs=$n --size=$job_size --group_reporting"
  fi
}
# fio's best io_uring options that this fio and kernel accept.
fio_best=""
if ((fio_plain == 0)); then
  probe="$dir/fio-probe-$$.bin"
  probe_ok() {  # $1 = write|read, $2.. = options; true when fio moved every byte without an error
    local rw="$1"
    shift
    fio --name=probe --filename="$probe" --size=8M --direct=1 --ioengine=io_uring "$@" \
        --rw="$rw" --bs=1M --iodepth=4 --output-format=json 2>/dev/null |
      python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; d=sys.argv[1]
sys.exit(0 if j["error"] == 0 and j[d]["io_bytes"] == 8 << 20 else 1)' "$rw" 2>/dev/null
  }
  for opt in --fixedbufs --registerfiles --hipri; do
    # Both ways: this disk takes polled writes (falling back to interrupts) but
    # refuses polled reads (EOPNOTSUPP).
    # shellcheck disable=SC2086
    if probe_ok write $fio_best "$opt" && probe_ok read $fio_best "$opt"; then
      fio_best+="${fio_best:+ }$opt"
    fi
    rm -f "$probe"
  done
fi
fio_extra="$fio_best${fio_best:+${fio_extra:+ }}$fio_extra"

fio_gbps() {  # $1 = write|read; prints GB/s
  # shellcheck disable=SC2046
  # shellcheck disable=SC2086
  fio --name=fiobench $(fio_where) --direct=1 --ioengine=io_uring $fio_extra --rw="$1" \
      --bs="$bs" --iodepth="$qd" --output-format=json 2>/dev/null |
    python3 -c 'import json,sys
try: j = json.load(sys.stdin)["jobs"][0]
except (ValueError, KeyError, IndexError): sys.exit("bench-io-vs-fio: fio printed no result for the " + sys.argv[1] + " run (run its command above by hand to see why)")
if j["error"] != 0: sys.exit("bench-io-vs-fio: fio failed the %s run with error %d" % (sys.argv[1], j["error"]))
print("%.4f" % (j[sys.argv[1]]["bw_bytes"] / 1e9))' "$1"
}

echo "bench-io vs fio: dirs=${dirs[*]} bs=$bs qd=$qd (per directory) size=$size rounds=$rounds"
echo "  A: $bin bench-io$dir_flags --block-size $bs --queue-depth $qd --size $size"
echo "  B: fio --direct=1 --ioengine=io_uring --rw=write|read --bs=$bs --iodepth=$qd $(fio_where) $fio_extra"
run_ssdtrain() {
  # shellcheck disable=SC2086
  out="$("$bin" bench-io $dir_flags --block-size "$bs" --queue-depth "$qd" --size "$size")"
  sw="$(awk '/^write:/ {print $2}' <<<"$out")"
  sr="$(awk '/^read:/ {print $2}' <<<"$out")"
}
run_fio() {
  fw="$(fio_gbps write)"
  fr="$(fio_gbps read)"
  rm -f "$fio_file"
  for d in "${dirs[@]}"; do rm -f "$d"/fiobench.*; done
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
print("ratio ssdtrain/fio: write %.3f read %.3f (target >= 1.0)" % (med[0] / med[2], med[1] / med[3]))
per_round = [statistics.median(r[k] / r[k + 2] for r in rows) for k in (0, 1)]
worst = [min(r[k] / r[k + 2] for r in rows) for k in (0, 1)]
print("each round's ratio, median: write %.3f read %.3f; lowest: write %.3f read %.3f" %
      (per_round[0], per_round[1], worst[0], worst[1]))
PY

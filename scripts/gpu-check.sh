#!/usr/bin/env bash
# GPU check (issue 4): builds ssdtrain with the CUDA backend in build-gpu/, runs
# the device conformance suite on the GPU, and replays the tiny GPT on the CUDA
# backend with --verify, keeping everything and offloading every saved
# activation to the SSD; prints a short table last. Finishes in a few minutes
# on a 16-core machine (budget: 8).
#
#   scripts/gpu-check.sh [offload dir]     (default: $SSDTRAIN_OFFLOAD_DIR or /var/tmp)
#
# Exit status: 0 all passed; 1 a build, test or replay failed; 77 built, but no
# usable GPU here (nothing on the GPU was checked).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SSDTRAIN_GPU_BUILD_DIR:-$root/build-gpu}
jobs=${SSDTRAIN_JOBS:-$(nproc)}
dir=${1:-${SSDTRAIN_OFFLOAD_DIR:-/var/tmp}}/ssdtrain-gpu-check.$$
out=$build/gpu-check
start=$SECONDS
cleanup() { rm -rf "$dir"; }
trap cleanup EXIT

echo "== configure (CUDA on) and build in $build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSDTRAIN_CUDA=ON \
  -DSSDTRAIN_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target ssdtrain exec_device_test exec_replay_test

echo "== is there a GPU?"
set +e
probe=$("$build/exec/exec_device_test" --gtest_filter='*/cuda' 2>&1)
probe_rc=$?
set -e
if grep -q "no usable GPU" <<<"$probe"; then
  reason=$(grep -m1 "no usable GPU" <<<"$probe")
  echo "gpu-check: the CUDA build compiled and links, but there is no usable GPU here:"
  echo "  $reason"
  echo "gpu-check: nothing ran on a GPU (exit 77). Run this on a machine with an NVIDIA GPU."
  exit 77
fi
echo "$probe" | tail -n 3
if ((probe_rc != 0)); then
  echo "gpu-check: FAILED: the device conformance suite failed on the GPU" >&2
  exit 1
fi

echo "== replay tests (CPU backend, same build)"
"$build/exec/exec_replay_test" --gtest_brief=1

echo "== replay the tiny GPT on the GPU, with --verify"
mkdir -p "$dir" "$out"
"$build/app/ssdtrain" trace --model "$root/configs/models/tiny-gpt.json" -o "$out/tiny-gpt.json"
for policy in keep offload-all; do
  "$build/app/ssdtrain" replay --trace "$out/tiny-gpt.json" --policy "$policy" --dir "$dir" \
    --backend cuda --verify --steps 5 -o "$out/run-$policy.json" \
    --timeline "$out/run-$policy-trace.json"
  # Unverified too: --verify synchronizes at every check, so step times come from here.
  "$build/app/ssdtrain" replay --trace "$out/tiny-gpt.json" --policy "$policy" --dir "$dir" \
    --backend cuda --steps 10 -o "$out/time-$policy.json" 2>/dev/null
done

echo
echo "== gpu-check: tiny GPT on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 || echo 'the GPU'), $(date -u +%Y-%m-%d), $((SECONDS - start)) s"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = []
for policy in ("keep", "offload-all"):
    v = json.load(open(f"{out}/run-{policy}.json"))
    t = json.load(open(f"{out}/time-{policy}.json"))
    rows.append((policy, t["step_time_ns"] / 1e6, t["exposed_io_ns"] / 1e6,
                 t["peak_device_bytes"] / 2**20, t["peak_activation_bytes"] / 2**20,
                 t["ssd_bytes_written"] / 2**20, t["ssd_bytes_read"] / 2**20,
                 v["verified"], v["tensors_checked"]))
print(f"{'policy':<12} {'step ms':>9} {'exposed ms':>10} {'peak MiB':>9} {'act MiB':>8} "
      f"{'wrote MiB':>9} {'read MiB':>9} {'verified':>9}")
for p, step, exp, peak, act, w, r, ok, n in rows:
    print(f"{p:<12} {step:9.3f} {exp:10.3f} {peak:9.1f} {act:8.1f} {w:9.1f} {r:9.1f} "
          f"{str(ok) + ' (' + str(n) + ')':>9}")
keep, off = rows
print(f"offload/keep step time: {off[1] / keep[1]:.3f}; activation peak: "
      f"{off[4] / keep[4]:.3f} of keep")
if not all(r[7] for r in rows):
    sys.exit("gpu-check: FAILED: a replay did not verify")
PY

#!/usr/bin/env bash
# GPU check (issue 4): installs what the build needs (scripts/install-deps.sh),
# builds ssdtrain with the CUDA backend in build-gpu/, runs the device
# conformance suite on the GPU, and replays the tiny GPT on the CUDA backend
# with --verify, keeping everything and offloading every saved activation to
# the SSD; times bf16 against FP8 GEMMs at the published FP8 runs' shapes
# (bench/gemm_precision_bench); prints a short table last (scripts/gpu_check_summary.py). Finishes
# in a few minutes on a 16-core machine (budget: 8).
#
#   scripts/gpu-check.sh [offload dir]     (default: $SSDTRAIN_OFFLOAD_DIR or /var/tmp)
#
# Exit status: 0 all passed; 1 a build, test or replay failed, or an NVIDIA
# GPU is present but CUDA cannot start on it (the message names the driver
# version); 77 built, but there is no NVIDIA GPU here (nothing ran on a GPU).
#
# Environment: SSDTRAIN_GPU_BUILD_DIR (build folder), SSDTRAIN_JOBS,
# SSDTRAIN_OFFLOAD_DIR. Where the GPU probe looks, overridable for tests:
# SSDTRAIN_PCI_DEVICES (/sys/bus/pci/devices), SSDTRAIN_NVIDIA_PROC
# (/proc/driver/nvidia), SSDTRAIN_NVIDIA_SMI (nvidia-smi).
# SSDTRAIN_GPU_CHECK_PROBE_ONLY=1 skips installing and building and only runs
# the "is there a GPU?" stage with the build already in the build folder.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SSDTRAIN_GPU_BUILD_DIR:-$root/build-gpu}
jobs=${SSDTRAIN_JOBS:-$(nproc)}
dir=${1:-${SSDTRAIN_OFFLOAD_DIR:-/var/tmp}}/ssdtrain-gpu-check.$$
out=$build/gpu-check
pci_devices=${SSDTRAIN_PCI_DEVICES:-/sys/bus/pci/devices}
nvidia_proc=${SSDTRAIN_NVIDIA_PROC:-/proc/driver/nvidia}
nvidia_smi=${SSDTRAIN_NVIDIA_SMI:-nvidia-smi}
probe_only=${SSDTRAIN_GPU_CHECK_PROBE_ONLY:-0}
start=$SECONDS
cleanup() { rm -rf "$dir"; }
trap cleanup EXIT

# The NVIDIA GPUs on the PCI bus, one "address (class)" per line: vendor
# 0x10de, class 0x03xxxx (display: VGA or 3D controller). The bus is read
# directly, so the answer does not depend on the driver that may be broken.
nvidia_gpus() {
  local d vendor class
  for d in "$pci_devices"/*; do
    [[ -r $d/vendor && -r $d/class ]] || continue
    vendor=$(<"$d/vendor")
    class=$(<"$d/class")
    if [[ $vendor == 0x10de && $class == 0x03* ]]; then
      echo "$(basename "$d") (class $class)"
    fi
  done
  if [[ -d $nvidia_proc/gpus ]]; then
    for d in "$nvidia_proc"/gpus/*; do
      [[ -e $d ]] && echo "$(basename "$d") (in $nvidia_proc/gpus)"
    done
  fi
  return 0
}

# The kernel driver's version: its /proc file first (present whenever the
# module is loaded, whatever state user space is in), else nvidia-smi.
driver_version() {
  local v
  if [[ -r $nvidia_proc/version ]]; then
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug ..." or
    # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release ...":
    # the first dotted number of the NVRM line.
    v=$(grep -m1 '^NVRM' "$nvidia_proc/version" | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' |
      head -n1 || true)
    if [[ -n $v ]]; then
      echo "$v (from $nvidia_proc/version)"
      return
    fi
  fi
  if v=$("$nvidia_smi" --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1) &&
    [[ -n $v ]]; then
    echo "$v (from $nvidia_smi)"
    return
  fi
  echo "unknown: no kernel module version in $nvidia_proc/version and no answer from $nvidia_smi" \
    "(is the NVIDIA kernel module loaded?)"
}

# The CUDA release this build compiled against, as CMake identified its nvcc.
cuda_release() {
  local v
  v=$(sed -n 's/^set(CMAKE_CUDA_COMPILER_VERSION "\([0-9.]*\)")/\1/p' \
    "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -n1 || true)
  if [[ -n $v ]]; then echo "CUDA $v"; else echo "a CUDA toolkit of unknown release"; fi
}

if [[ $probe_only != 1 ]]; then
  echo "== dependencies (scripts/install-deps.sh)"
  "$root/scripts/install-deps.sh"
  need=$(sed -n 's/^cmake_minimum_required(VERSION \([0-9.]*\)).*/\1/p' "$root/CMakeLists.txt")
  have=$(cmake --version | sed -n 's/^cmake version \([0-9.]*\).*/\1/p')
  if [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1) != "$need" ]]; then
    echo "gpu-check: FAILED: CMake $have is older than the $need that CMakeLists.txt needs" >&2
    exit 1
  fi
  if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
    echo "gpu-check: FAILED: no nvcc on PATH or in /usr/local/cuda/bin: install the CUDA toolkit" >&2
    exit 1
  fi

  echo "== configure (CUDA on, CMake $have) and build in $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSSDTRAIN_CUDA=ON \
    -DSSDTRAIN_BUILD_BENCHMARKS=ON \
    >/dev/null
  cmake --build "$build" -j "$jobs" --target ssdtrain exec_device_test exec_replay_test \
    gemm_precision_bench
fi

echo "== is there a GPU?"
if [[ ! -x $build/exec/exec_device_test ]]; then
  echo "gpu-check: FAILED: $build/exec/exec_device_test is not built" \
    "(SSDTRAIN_GPU_CHECK_PROBE_ONLY=1 needs an earlier build in $build)" >&2
  exit 1
fi
set +e
probe=$("$build/exec/exec_device_test" --gtest_filter='*/cuda' 2>&1)
probe_rc=$?
set -e
if grep -q "no usable GPU" <<<"$probe"; then
  reason=$(grep -m1 -o "no usable GPU.*" <<<"$probe")
  gpus=$(nvidia_gpus)
  if [[ -n $gpus ]]; then
    echo "gpu-check: FAILED: an NVIDIA GPU is present, but CUDA cannot start on it:" >&2
    echo "  GPU: $(head -n1 <<<"$gpus")" >&2
    echo "  CUDA: $reason" >&2
    echo "  NVIDIA driver version: $(driver_version)" >&2
    echo "  this build uses $(cuda_release): its release notes list the oldest driver it runs" \
      "on (CUDA 13.0: 580); update the driver, or build with an older CUDA" >&2
    exit 1
  fi
  echo "gpu-check: SKIPPED: no NVIDIA GPU on this machine (none on the PCI bus in $pci_devices," \
    "none in $nvidia_proc/gpus)."
  echo "  CUDA says: $reason"
  echo "gpu-check: the CUDA build compiled and links; nothing ran on a GPU (exit 77)." \
    "Run this on a machine with an NVIDIA GPU."
  exit 77
fi
echo "$probe" | tail -n 3
if ((probe_rc != 0)); then
  echo "gpu-check: FAILED: the device conformance suite failed on the GPU" >&2
  exit 1
fi
if [[ $probe_only == 1 ]]; then
  echo "gpu-check: a usable GPU (probe only: nothing else run)"
  exit 0
fi

echo "== replay tests (CPU backend, same build)"
"$build/exec/exec_replay_test" --gtest_brief=1

echo "== replay the tiny GPT on the GPU, with --verify"
mkdir -p "$dir" "$out"
"$build/app/ssdtrain" trace --model "$root/configs/models/tiny-gpt.json" -o "$out/tiny-gpt.json"
for policy in keep offload-ssd; do
  "$build/app/ssdtrain" replay --trace "$out/tiny-gpt.json" --policy "$policy" --dir "$dir" \
    --backend cuda --verify --steps 5 -o "$out/run-$policy.json" \
    --timeline "$out/run-$policy-trace.json"
  # Unverified too: --verify synchronizes at every check, so step times come
  # from here. Its output goes to a log, shown when it fails.
  if ! "$build/app/ssdtrain" replay --trace "$out/tiny-gpt.json" --policy "$policy" \
    --dir "$dir" --backend cuda --steps 10 -o "$out/time-$policy.json" \
    >"$out/time-$policy.log" 2>&1; then
    echo "gpu-check: FAILED: the timing replay ($policy) failed; its output:" >&2
    cat "$out/time-$policy.log" >&2
    exit 1
  fi
done

echo "== the SSD path both ways: bounce buffers (--gds off), GPUDirect Storage (--gds on)"
"$build/app/ssdtrain" replay --trace "$out/tiny-gpt.json" --policy offload-ssd --dir "$dir" \
  --backend cuda --gds off --verify --steps 3 -o "$out/run-bounce.json"
if "$build/app/ssdtrain" replay --trace "$out/tiny-gpt.json" --policy offload-ssd --dir "$dir" \
  --backend cuda --gds on --verify --steps 3 -o "$out/run-gds.json" >"$out/gds.log" 2>&1; then
  grep 'storage path' "$out/gds.log" || true
  echo "GPUDirect Storage replay verified"
elif grep -q -e 'was not found' -e 'cuFileDriverOpen failed' "$out/gds.log"; then
  # No cuFile (or no nvidia-fs) on this machine: said, not a failure.
  echo "no GPUDirect Storage here: $(grep -m1 -e 'was not found' -e 'cuFileDriverOpen' "$out/gds.log")"
else
  echo "gpu-check: FAILED: the GPUDirect Storage replay failed; its output:" >&2
  cat "$out/gds.log" >&2
  exit 1
fi

echo "== GEMMs by shape and precision: bf16, FP8, FP8 with fast accumulation (issue 40 item 4)"
# The published FP8 runs' GEMM shapes through cuBLASLt (bench/gemm_precision_bench.cc):
# the per-shape FP8 efficiency the presets still take from one figure.
if ! "$build/bench/gemm_precision_bench" --benchmark_min_time=0.1 \
  --benchmark_out="$out/gemm_precision.json" --benchmark_out_format=json \
  >"$out/gemm_precision.log" 2>&1; then
  echo "gpu-check: FAILED: gemm_precision_bench failed; its output:" >&2
  cat "$out/gemm_precision.log" >&2
  exit 1
fi
if ! python3 "$root/scripts/gemm_precision_summary.py" "$out/gemm_precision.json"; then
  echo "gpu-check: FAILED: a GEMM did not run (above)" >&2
  exit 1
fi

echo
gpu=$("$nvidia_smi" --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 || true)
echo "== gpu-check: tiny GPT on ${gpu:-the GPU}, $(date -u +%Y-%m-%d), $((SECONDS - start)) s"
python3 "$root/scripts/gpu_check_summary.py" "$out"

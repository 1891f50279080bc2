#!/usr/bin/env bash
# Runs every libFuzzer target (fuzz/README.md) for a bounded time each and fails
# on any crash, leak, timeout, out-of-memory or sanitizer report.
#   scripts/fuzz.sh [target...]      default: every target in fuzz/corpus/
# SSDTRAIN_FUZZ_SECONDS   seconds per target (default 60)
# SSDTRAIN_JOBS           targets fuzzed at once (default: nproc)
# Builds the fuzz programs in the ASan + UBSan build, build-asan/ (clang, CUDA
# off; scripts/sanitize.sh configures it with -DSSDTRAIN_FUZZ=ON). Each target
# starts from its committed seeds (fuzz/corpus/<target>/) and regression inputs
# (fuzz/regressions/<target>/); what it finds goes to build-asan/fuzz-corpus/,
# and a failing input to build-asan/fuzz-artifacts/<target>/ (fix the bug, then
# commit the input to fuzz/regressions/<target>/ so that fuzz_replay_test
# replays it in every build).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${SSDTRAIN_FUZZ_SECONDS:-60}
jobs=${SSDTRAIN_JOBS:-$(nproc)}
build=$root/build-asan
# A slow input is a bug too (a reader that takes 10 s on a few KB); the memory
# cap is libFuzzer's default.
per_input_timeout_s=10
rss_limit_mb=2048

if (($# > 0)); then
  targets=("$@")
else
  mapfile -t targets < <(find "$root/fuzz/corpus" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)
fi

SSDTRAIN_JOBS=$jobs "$root/scripts/sanitize.sh" asan --configure-only
cmake --build "$build" -j "$jobs" --target "${targets[@]/#/fuzz_}"

symbolizer=$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)
export ASAN_SYMBOLIZER_PATH=$symbolizer
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$root/scripts/sanitizers/lsan.supp

run_one() {
  local t=$1
  local work=$build/fuzz-corpus/$t artifacts=$build/fuzz-artifacts/$t/ log=$build/fuzz-logs/$t.log
  mkdir -p "$work" "$artifacts" "$(dirname "$log")"
  local seeds=("$root/fuzz/corpus/$t")
  [[ -d $root/fuzz/regressions/$t ]] && seeds+=("$root/fuzz/regressions/$t")
  if "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout="$per_input_timeout_s" \
    -rss_limit_mb="$rss_limit_mb" -artifact_prefix="$artifacts" -print_final_stats=1 \
    "$work" "${seeds[@]}" >"$log" 2>&1; then
    echo "fuzz $t: ok ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$') runs in ${seconds}s)"
  else
    echo "fuzz $t: FAILED; last lines of $log:" >&2
    tail -n 40 "$log" >&2
    echo "the input that failed is in $artifacts" >&2
    return 1
  fi
}

failed=0
pids=()
names=()
for t in "${targets[@]}"; do
  if [[ ! -d $root/fuzz/corpus/$t ]]; then
    echo "fuzz.sh: no target '$t' (no fuzz/corpus/$t)" >&2
    exit 2
  fi
  run_one "$t" &
  pids+=($!)
  names+=("$t")
  # At most $jobs at once: wait for the oldest before starting another.
  if ((${#pids[@]} >= jobs)); then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
exit "$failed"

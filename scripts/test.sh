#!/usr/bin/env bash
# The README's second command: install what is missing, build, run every test.
# Works from any directory; idempotent.
#   scripts/test.sh [ctest arguments...]   the normal suite (gcc Release, build/)
#   scripts/test.sh --quick [ctest args]   the unit tests of every module (ctest
#                                          -L unit: no MPI, no Python, no demo, no
#                                          notebook), building only their programs
#   scripts/test.sh --all                  the normal suite, then the hardening
#                                          runs (.ci/run does this): the ASan+UBSan
#                                          tests, the fuzzers, the TSan tests;
#                                          docs/HARDENING.md
# Each phase prints its wall time (`== ssdtrain test phase: NAME passed in N s`),
# each ctest run its 10 slowest tests, and --all a table of the phases at the end.
# Timings are reported, never gated: scripts/accuracy.sh judges the simulator's
# step-time accuracy; ctest's verdicts are deterministic (docs/PERFORMANCE.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=normal
case ${1:-} in
  --all) mode=all; shift ;;
  --quick) mode=quick; shift ;;
esac
build=${SSDTRAIN_BUILD_DIR:-$root/build}
jobs=${SSDTRAIN_JOBS:-$(nproc)}
started=$SECONDS
phase_names=()
phase_times=()

# Runs one phase and says how long it took.
phase() {
  local name=$1 start=$SECONDS rc=0
  shift
  echo "== ssdtrain test phase: $name" >&2
  "$@" || rc=$?
  phase_names+=("$name")
  phase_times+=($((SECONDS - start)))
  if ((rc != 0)); then
    echo "== ssdtrain test phase: $name FAILED (exit $rc) after $((SECONDS - start)) s" >&2
    summary
    exit "$rc"
  fi
  echo "== ssdtrain test phase: $name passed in $((SECONDS - start)) s" >&2
}

summary() {
  local i
  echo "== ssdtrain test phases:" >&2
  for i in "${!phase_names[@]}"; do
    printf '==   %-44s %6d s\n' "${phase_names[$i]}" "${phase_times[$i]}" >&2
  done
  printf '==   %-44s %6d s\n' "total" $((SECONDS - started)) >&2
}

# ctest with its output kept, then its 10 slowest tests (from that output).
# Used by scripts/sanitize.sh too.
run_ctest() {
  local log=$1 rc=0
  shift
  mkdir -p "$(dirname "$log")"
  ctest "$@" 2>&1 | tee "$log" || rc=$?
  "$root/scripts/slowest-tests.sh" "$log" >&2 || true
  return "$rc"
}

build_phase() {
  "$root/scripts/build.sh" "$@"
}

tests_phase() {
  run_ctest "$build/ctest-normal.log" --test-dir "$build" --output-on-failure -j "$jobs" "$@"
}

quick_tests_phase() {
  run_ctest "$build/ctest-quick.log" --test-dir "$build" --output-on-failure -j "$jobs" -L '^unit$' "$@"
}

phase "install dependencies" "$root/scripts/install-deps.sh"
case $mode in
  quick)
    phase "build (unit test programs)" env SSDTRAIN_TARGET=unit_tests "$root/scripts/build.sh"
    phase "unit tests (ctest -L unit)" quick_tests_phase "$@"
    ;;
  normal)
    phase "build (build/)" build_phase
    phase "tests (build/)" tests_phase "$@"
    ;;
  all)
    phase "build (build/)" build_phase
    phase "tests (build/)" tests_phase "$@"
    phase "ASan+UBSan build and tests (build-asan/)" "$root/scripts/sanitize.sh" asan
    phase "fuzzers (build-asan/, ${SSDTRAIN_FUZZ_SECONDS:-60} s each)" "$root/scripts/fuzz.sh"
    phase "TSan build and tests (build-tsan/)" "$root/scripts/sanitize.sh" tsan
    ;;
esac
summary

#!/usr/bin/env bash
# The README's second command: install what is missing, build, run every test.
# Works from any directory; idempotent.
#   scripts/test.sh [ctest arguments...]   the normal suite (gcc Release, build/)
#   scripts/test.sh --all                  the normal suite, then the hardening
#                                          runs (.ci/run does this): the ASan+UBSan
#                                          suite, the fuzzers, the TSan executor
#                                          tests; docs/HARDENING.md
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
all=0
if [[ ${1:-} == --all ]]; then
  all=1
  shift
fi

# Runs one phase and says how long it took (the times docs/HARDENING.md quotes).
phase() {
  local name=$1 start=$SECONDS
  shift
  echo "== ssdtrain test phase: $name" >&2
  "$@"
  echo "== ssdtrain test phase: $name passed in $((SECONDS - start)) s" >&2
}

normal_suite() {
  "$root/scripts/install-deps.sh"
  "$root/scripts/build.sh"
  local build=${SSDTRAIN_BUILD_DIR:-$root/build}
  ctest --test-dir "$build" --output-on-failure -j "${SSDTRAIN_JOBS:-$(nproc)}" "$@"
}

if ((all == 0)); then
  normal_suite "$@"
  exit
fi
phase "normal suite (build/)" normal_suite "$@"
phase "ASan+UBSan suite (build-asan/)" "$root/scripts/sanitize.sh" asan
phase "fuzzers (build-asan/, ${SSDTRAIN_FUZZ_SECONDS:-60} s each)" "$root/scripts/fuzz.sh"
phase "TSan executor tests (build-tsan/)" "$root/scripts/sanitize.sh" tsan

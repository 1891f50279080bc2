#!/usr/bin/env bash
# Sanitizer builds with clang, CUDA off, no benchmarks (docs/HARDENING.md):
#   scripts/sanitize.sh asan   ASan + UBSan (first report aborts) in build-asan/,
#                              builds and runs the tests of the code whose memory
#                              bugs it finds: the parsers and the trace builder
#                              (traces_test, models_test, fuzz_replay_test), the
#                              executor and its engine (exec_*), the planner's
#                              task pool (sim_task_pool_test)
#   scripts/sanitize.sh tsan   ThreadSanitizer in build-tsan/, runs the executor's
#                              tests (exec_*) and the planner's threads
#                              (sim_task_pool_test, stage_plans_test)
# The simulator's arithmetic (sim_test, sim_paper_test), the CLI and the
# end-to-end replays (demo, multi-rank, published runs, the notebook) run in the
# normal suite only: the replays drive the same executor and parsers that the
# tests here cover, and under a sanitizer they, and compiling the CLI and the
# simulator's tests with it, cost most of its time. The fuzzers (scripts/fuzz.sh,
# this build) run every parser of user input.
# The ASan build also holds the libFuzzer programs (-DSSDTRAIN_FUZZ=ON), so that
# scripts/fuzz.sh reuses it instead of compiling everything a third time.
# Extra arguments go to ctest (e.g. -R OffloadEngine); --configure-only stops
# after CMake (scripts/fuzz.sh uses it). Works from any directory; idempotent (an
# existing build directory is reused and only rebuilt).
# SSDTRAIN_JOBS sets the build and test parallelism (default: nproc).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kind=${1:-}
case $kind in
  asan | tsan) shift ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan [--configure-only | ctest arguments...]" >&2
    exit 2
    ;;
esac
"$root/scripts/install-deps.sh"
jobs=${SSDTRAIN_JOBS:-$(nproc)}
build=$root/build-$kind
suppressions=$root/scripts/sanitizers
fuzz=OFF
[[ $kind == asan ]] && fuzz=ON

# -O1 with line tables: readable stacks at a fraction of -O2's compile time;
# asserts stay on (no NDEBUG), since a sanitizer build is for finding bugs.
# No precompiled headers here: CMake passes clang its PCH as
# `-Xclang -include-pch -Xclang <absolute path>`, which ccache does not rewrite
# relative to the checkout, so every file that used one missed the cache in a
# second clone (90 of 335 compilations hit; docs/PERFORMANCE.md, CI).
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" \
  -DSSDTRAIN_SANITIZE="$kind" -DSSDTRAIN_FUZZ="$fuzz" -DSSDTRAIN_CUDA=OFF \
  -DSSDTRAIN_BUILD_BENCHMARKS=OFF -DSSDTRAIN_PYTHON=OFF -DSSDTRAIN_MPI=OFF -DSSDTRAIN_PCH=OFF \
  ${SSDTRAIN_CMAKE_ARGS:-} >/dev/null
if [[ ${1:-} == --configure-only ]]; then
  exit 0
fi

# Reports abort the test that raised them (a non-zero exit), with a symbolized stack.
symbolizer=$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)
export ASAN_SYMBOLIZER_PATH=$symbolizer TSAN_SYMBOLIZER_PATH=$symbolizer
export ASAN_OPTIONS=abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$suppressions/tsan.supp
export LSAN_OPTIONS=suppressions=$suppressions/lsan.supp

# Tests left out of a run, each with its reason. A sanitizer report is never a
# reason: a report in our code is fixed, not excluded.
exclude_asan=(
  # Timing, not memory or races: it compares the compute stream's idle time
  # with the time a 20 MB/s SSD path needs, and a sanitizer's slowdown moves
  # both sides (ASan: compute slows until the writes hide behind it, 45 ms idle
  # for 537 ms of writes; TSan: host-side bookkeeping adds idle time that is not
  # I/O). It runs in the normal suite.
  'Replay\.WaitsForStagingAreCountedAsExposedIo'
  # Time (59 s under ASan, 93 s under TSan on 2026-12-03, the phases' longest):
  # its 2,100 micro-batches check the pipeline tags past 15 bits, arithmetic the
  # normal suite checks; its sends, receives and threads are those of the other
  # ReplayStages tests (four micro-batches, failures, messages out of order),
  # which run here.
  'ReplayStages\.MoreMicroBatchesThanFifteenBitTagsHoldStillReplay'
)
exclude_tsan=("${exclude_asan[@]}")
join() {
  local IFS='|'
  echo "$*"
}

run_ctest() {  # the ctest run, its output kept, then its 10 slowest tests
  local log=$build/ctest-$kind.log rc=0
  ctest "$@" 2>&1 | tee "$log" || rc=$?
  "$root/scripts/slowest-tests.sh" "$log" >&2 || true
  return "$rc"
}
start=$SECONDS
if [[ $kind == asan ]]; then
  # Each test carries its program's name as a ctest label.
  targets="traces_test models_test fuzz_replay_test sim_task_pool_test"
  targets+=" $(ninja -C "$build" -t targets all | sed -n 's/^\(exec_[a-z_]*_test\): phony$/\1/p' | tr '\n' ' ')"
  # shellcheck disable=SC2086  # one target per word
  cmake --build "$build" -j "$jobs" --target $targets
  echo "sanitize.sh asan: build $((SECONDS - start)) s" >&2
  start=$SECONDS
  labels=$(echo $targets | tr ' ' '|')
  run_ctest --test-dir "$build" --output-on-failure -j "$jobs" -L "^($labels)\$" \
    -E "$(join "${exclude_asan[@]}")" "$@"
  echo "sanitize.sh asan: tests $((SECONDS - start)) s" >&2
else
  # Only the executor's test programs (and the library they need), and the
  # planner's threads: its pool and the search on several threads.
  targets=$(ninja -C "$build" -t targets all | sed -n 's/^\(exec_[a-z_]*\): phony$/\1/p')
  if [[ -z $targets ]]; then
    echo "sanitize.sh: no exec_* test programs in $build" >&2
    exit 1
  fi
  targets+=" sim_task_pool_test stage_plans_test"
  # shellcheck disable=SC2086  # one target per word
  cmake --build "$build" -j "$jobs" --target $targets
  echo "sanitize.sh tsan: build $((SECONDS - start)) s" >&2
  start=$SECONDS
  run_ctest --test-dir "$build" --output-on-failure -j "$jobs" -L '^(exec_|sim_task_pool_test$|stage_plans_test$)' \
    -E "$(join "${exclude_tsan[@]}")" "$@"
  echo "sanitize.sh tsan: tests $((SECONDS - start)) s" >&2
fi

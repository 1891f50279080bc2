#!/usr/bin/env bash
# Runs the normal suite (ctest in build/) N times while a second clone of this
# repository is built from scratch over and over beside it (scripts/build.sh at
# nice 0, no compiler cache: both cores busy), then checks that every test got
# the same verdict in every run. No ctest verdict may rest on the machine's speed
# (docs/PERFORMANCE.md, "CI time"); this is the check.
#   scripts/verdicts-under-load.sh [RUNS=3] [ctest arguments...]
# Needs build/ built (scripts/build.sh). Writes its logs to
# ${TMPDIR:-/tmp}/ssdtrain-verdicts-XXXXXX and prints each run's time, its
# verdicts' summary and any test whose verdict differs between runs; exits 1 then.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-3}
shift || true
build=${SSDTRAIN_BUILD_DIR:-$root/build}
[[ -f $build/CTestTestfile.cmake ]] || { echo "verdicts-under-load: $build is not built (scripts/build.sh)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/ssdtrain-verdicts-XXXXXX")
loader_pid=""
cleanup() {
  if [[ -n $loader_pid ]]; then kill -- -"$loader_pid" 2>/dev/null || kill "$loader_pid" 2>/dev/null || true; fi
  rm -rf "$work/clone"
}
trap cleanup EXIT
git clone -q "$root" "$work/clone"
# The load: clean builds of the clone, one after another, until the runs end.
set -m
(
  while true; do
    rm -rf "$work/clone/build"
    CCACHE_DISABLE=1 SSDTRAIN_JOBS=$(nproc) "$work/clone/scripts/build.sh" >>"$work/load.log" 2>&1 || true
  done
) &
loader_pid=$!
set +m
echo "verdicts-under-load: loading the machine with clean builds of $work/clone (pid $loader_pid)" >&2
sleep 20  # let the load start
for ((i = 1; i <= runs; i++)); do
  start=$SECONDS
  rc=0
  ctest --test-dir "$build" -j "${SSDTRAIN_JOBS:-$(nproc)}" --output-on-failure "$@" >"$work/run$i.log" 2>&1 || rc=$?
  # "  12/867 Test  #34: name [# GetParam() = ...] ....***Failed   12.34 sec" -> "name Failed"
  sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +([^ ]+) .*[ .*]([A-Z][A-Za-z]*( [A-Za-z]+)*) +[0-9.]+ sec *$/\1 \2/p' \
    "$work/run$i.log" | sort >"$work/verdicts$i.txt"
  echo "run $i of $runs: $((SECONDS - start)) s, ctest exit $rc, $(wc -l <"$work/verdicts$i.txt") tests," \
    "$(grep -vc ' Passed$' "$work/verdicts$i.txt" || true) not passed; load average $(cut -d' ' -f1-3 /proc/loadavg)"
done
differs=0
for ((i = 2; i <= runs; i++)); do
  if ! diff "$work/verdicts1.txt" "$work/verdicts$i.txt" >"$work/diff$i.txt"; then
    differs=1
    echo "verdicts of run $i differ from run 1:"
    cat "$work/diff$i.txt"
  fi
done
if ((differs == 0)); then
  echo "verdicts-under-load: every test's verdict was the same in all $runs runs (logs in $work)"
else
  echo "verdicts-under-load: verdicts differ between runs (logs in $work)" >&2
fi
exit "$differs"

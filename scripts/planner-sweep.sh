#!/usr/bin/env bash
# The planner's invariants over every model config x every GPU hardware preset x
# every policy (auto included) x 8, 64, 512 and 4096 GPUs
# (tests/planner_invariants.h): prints every violation, exits 1 if there is one.
# The suite runs a subset (planner_invariants_test). Extra arguments go to
# planner_sweep (--gpus 64 --policies keep,auto --fp8 delayed --verbose ...).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SSDTRAIN_BUILD_DIR:-$root/build}
SSDTRAIN_TARGET=planner_sweep "$root/scripts/build.sh"
exec "$build/tests/planner_sweep" "$@"

#!/usr/bin/env bash
# Configures and builds ssdtrain in build/ (or $SSDTRAIN_BUILD_DIR). Extra
# arguments go to CMake's configure step, e.g. -DSSDTRAIN_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SSDTRAIN_BUILD_DIR:-$root/build}
jobs=${SSDTRAIN_JOBS:-$(nproc)}
if [[ ! -f $build/build.ninja ]] || (($# > 0)); then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
# SSDTRAIN_TARGET builds one target (the demo builds only the ssdtrain binary).
cmake --build "$build" -j "$jobs" ${SSDTRAIN_TARGET:+--target "$SSDTRAIN_TARGET"}

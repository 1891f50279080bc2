#!/usr/bin/env bash
# The README's second command: install what is missing, build, run every test.
# Works from any directory; idempotent.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
build=${SSDTRAIN_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j "${SSDTRAIN_JOBS:-$(nproc)}" "$@"

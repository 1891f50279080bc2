#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main
# job on the embedded default model (configs/models/tiny-gpt.json).
# Works from any directory; idempotent.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-deps.sh"
echo "ssdtrain: building (the first build takes a few minutes)" >&2
SSDTRAIN_TARGET=ssdtrain "$root/scripts/build.sh"
build=${SSDTRAIN_BUILD_DIR:-$root/build}
exec "$build/app/ssdtrain" demo "$@"

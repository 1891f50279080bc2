#!/usr/bin/env bash
# The SSDTrain paper's evaluation (arXiv 2408.10013 v3, Fig. 6, Fig. 7, Table III,
# §III-D lifespan) reproduced by the simulator on the paper's own setup
# (configs/hardware/a100-pcie-40gb-ssdtrain-paper.json, the nine
# configs/models/ssdtrain-*.json), each result beside the paper's figure.
# Simulator only: about a second once built. docs/PERFORMANCE.md explains the
# results that fall outside the paper's range.
#   scripts/paper.sh            builds sim_paper_table in build/ (or $SSDTRAIN_BUILD_DIR) and runs it
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SSDTRAIN_BUILD_DIR:-$root/build}
SSDTRAIN_BUILD_DIR=$build SSDTRAIN_TARGET=sim_paper_table "$root/scripts/build.sh" >/dev/null
exec "$build/sim/sim_paper_table" "$root"

#!/usr/bin/env bash
# Executes notebooks/walkthrough.ipynb top to bottom (Debian's jupyter-nbconvert
# and python3-ipykernel) and checks that it wrote its plots as PNG files.
#   scripts/run-notebook.sh [BINARY] [OUTPUT_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$(realpath "${1:-$root/build/app/ssdtrain}")
out=${2:-$(mktemp -d "${TMPDIR:-/tmp}/ssdtrain-notebook-XXXXXX")}
mkdir -p "$out"
export SSDTRAIN_BIN=$bin SSDTRAIN_NOTEBOOK_OUT=$out SSDTRAIN_SOURCE_DIR=$root
/usr/bin/jupyter-nbconvert --to notebook --execute --ExecutePreprocessor.timeout=600 \
  --output "$out/walkthrough.executed.ipynb" "$root/notebooks/walkthrough.ipynb"
missing=0
for png in timelines-ssdtrain.png memory.png rok.png ssd-bandwidth.png; do
  if [[ ! -s $out/$png ]] || [[ $(head -c 4 "$out/$png" | od -An -c | tr -d ' ') != '211PNG' ]]; then
    echo "run-notebook: $out/$png missing or not a PNG" >&2
    missing=1
  fi
done
((missing == 0)) && echo "run-notebook: executed; plots in $out"
exit $missing

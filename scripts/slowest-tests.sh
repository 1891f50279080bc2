#!/usr/bin/env bash
# The N slowest tests of a ctest run, from its printed output:
#   scripts/slowest-tests.sh CTEST_OUTPUT_LOG [N=10]
# scripts/test.sh and scripts/sanitize.sh print this after each ctest run.
set -euo pipefail
log=${1:?usage: scripts/slowest-tests.sh CTEST_OUTPUT_LOG [N]}
n=${2:-10}
[[ -r $log ]] || { echo "slowest-tests: cannot read $log" >&2; exit 2; }
# ctest prints "  12/867 Test  #34: name ......   Passed   12.34 sec".
rows=$(sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: +([^ ]+) .*[^0-9.]([0-9]+\.[0-9]+) sec *$/\2 \1/p' "$log" |
  sort -rn | head -n "$n")
[[ -n $rows ]] || exit 0
total=$(sed -nE 's/^ *[0-9]+\/[0-9]+ +Test +#[0-9]+: .*[^0-9.]([0-9]+\.[0-9]+) sec *$/\1/p' "$log" |
  awk '{s += $1} END {printf "%.0f", s}')
echo "== the $n slowest tests (of $total s summed over every test) in $log:"
while read -r seconds name; do
  printf '==   %8.1f s  %s\n' "$seconds" "$name"
done <<<"$rows"

#!/usr/bin/env bash
# The planner's invariant sweep at one GPU count, resumable: every model config
# (configs/models and the Hugging Face configs named by --hf) x every GPU
# preset (configs/hardware), every policy, one model on one preset a chunk,
# run by W workers. Each finished chunk's lines are appended to
# OUT/<preset>.txt; chunks already there are skipped, so a sweep stopped
# anywhere (a killed worker, the machine gone) goes on where it stopped, in
# this session or a later one (docs/sweeps/ keeps the 16384-GPU sweep so).
#   scripts/planner-sweep-queue.sh OUT --gpus 16384 [--workers 2] [--nice 15]
#                                  [--max-seconds 600] [--hf a,b,...]
#                                  [--only-models a,b] [--only-presets a,b]
#                                  [--binary PATH --commit REV (a planner_sweep
#                                  built before, at commit REV)]
#   scripts/planner-sweep-queue.sh OUT --summary [--only-...]   what OUT holds
#                                  of the selection: chunks done, cases, violations
# Exits 1 when a chunk has a violation (planner_sweep's verdict), 2 on bad use.
# Each chunk's header names the commit its binary was built at: HEAD's (with
# -dirty for uncommitted changes) for the one this script builds, --commit's
# for a --binary.
# One queue at a time on one OUT: two would run the same chunks twice.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SSDTRAIN_BUILD_DIR:-$root/build}

usage() {
  echo "planner-sweep-queue: $1" >&2
  sed -n '9,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

(($# >= 1)) || usage "OUT is required"
out=$1
shift
gpus="" workers=2 niceness=15 max_seconds=600 summary=0 only_models="" only_presets="" binary=""
commit=""
hf=deepseek-v3,kimi-k2,qwen3-30b-a3b,gpt-oss-20b,gpt-oss-120b,mistral-7b-v0.1,qwen2.5-0.5b
while (($# > 0)); do
  case $1 in
    --gpus) gpus=${2:-}; shift 2 || usage "--gpus needs a count" ;;
    --workers) workers=${2:-}; shift 2 || usage "--workers needs a count" ;;
    --nice) niceness=${2:-}; shift 2 || usage "--nice needs a value" ;;
    --max-seconds) max_seconds=${2:-}; shift 2 || usage "--max-seconds needs a value" ;;
    --hf) hf=${2:-}; shift 2 || usage "--hf needs a list" ;;
    --only-models) only_models=${2:-}; shift 2 || usage "--only-models needs a list" ;;
    --only-presets) only_presets=${2:-}; shift 2 || usage "--only-presets needs a list" ;;
    --binary) binary=${2:-}; shift 2 || usage "--binary needs a path" ;;
    --commit) commit=${2:-}; shift 2 || usage "--commit needs a revision" ;;
    --summary) summary=1; shift ;;
    *) usage "unknown argument $1" ;;
  esac
done

# Every chunk as "preset model", preset-major.
models=()
for f in "$root"/configs/models/*.json; do models+=("$(basename "$f" .json)"); done
IFS=, read -r -a hf_models <<< "$hf"
for m in "${hf_models[@]}"; do
  [[ -f $root/models/tests/hf/$m/config.json ]] ||
    usage "--hf: no models/tests/hf/$m/config.json"
  models+=("$m")
done
presets=()
for f in "$root"/configs/hardware/*.json; do
  p=$(basename "$f" .json)
  [[ $p == cpu* ]] || presets+=("$p")  # the CPU backend's config is no GPU
done
# --only-models / --only-presets keep the named ones (each must exist):
# select ARRAY LIST OPTION WHAT.
select_only() {
  local -n all=$1
  local n wanted
  [[ -n $2 ]] || return 0
  IFS=, read -r -a wanted <<< "$2"
  for n in "${wanted[@]}"; do
    [[ " ${all[*]} " == *" $n "* ]] || usage "$3: no $4 named $n"
  done
  all=("${wanted[@]}")
}
select_only models "$only_models" --only-models "model config"
select_only presets "$only_presets" --only-presets "GPU preset"
total=$((${#models[@]} * ${#presets[@]}))

# A chunk is done when its preset's file holds its header line (at --gpus,
# or at any count for --summary).
chunk_done() {
  [[ -f $out/$1.txt ]] && grep -q "^## ${2//./\\.} on ${gpus:-[0-9]*} x ${1//./\\.}: " "$out/$1.txt"
}
# The selection's chunks done.
chunks_done() {
  local p m n=0
  for p in "${presets[@]}"; do
    for m in "${models[@]}"; do
      if chunk_done "$p" "$m"; then n=$((n + 1)); fi
    done
  done
  echo "$n"
}

if ((summary)); then
  [[ -d $out ]] || usage "no directory $out"
  shopt -s nullglob
  files=()
  for p in "${presets[@]}"; do [[ -f $out/$p.txt ]] && files+=("$out/$p.txt"); done
  # Only the selection's blocks: a header "## <model> on <gpus> x <preset>: ..."
  # opens a block, counted when its model and preset are selected.
  cat "${files[@]}" /dev/null | awk -v done_chunks="$(chunks_done)" -v total="$total" \
    -v models="${models[*]}" -v presets="${presets[*]}" '
    BEGIN { split(models, a, " "); for (i in a) M[a[i]] = 1
            split(presets, b, " "); for (i in b) P[b[i]] = 1 }
    /^## / { preset = $6; sub(/:$/, "", preset); in_sel = ($2 in M) && (preset in P); next }
    !in_sel { next }
    /^planner_sweep: [0-9]+ passed, [0-9]+ failed/ { passed += $2; failed += $4 }
    /^VIOLATION:/ { v[++nv] = $0; if (/peaks at|holds [0-9]+ bytes at its peak/) mem++;
                    if (/auto .* is slower than/) slow++; if (/took .* of CPU time/) time++ }
    / --policy [a-z-]+: (fits|does not fit)/ { searches++ }
    END {
      printf "chunks done: %d of %d\ncases: %d passed, %d failed\n", done_chunks, total, passed, failed
      printf "searches printed: %d\nviolations: %d (over memory %d, auto slower %d, over the time limit %d)\n",
             searches, nv, mem, slow, time
      for (i = 1; i <= nv; i++) print v[i]
      exit failed > 0 ? 1 : 0
    }'
  exit
fi

[[ $gpus =~ ^[0-9]+$ ]] || usage "--gpus needs one GPU count"
[[ $workers =~ ^[1-9][0-9]*$ ]] || usage "--workers needs a count of at least 1"
mkdir -p "$out"
if [[ -z $binary ]]; then
  [[ -z $commit ]] || usage "--commit goes with --binary (this script's build is HEAD's)"
  SSDTRAIN_TARGET=planner_sweep "$root/scripts/build.sh"
  binary=$build/tests/planner_sweep
  commit=$(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown)
  if [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2> /dev/null) ]]; then
    commit+="-dirty"
  fi
else
  # The headers say which code ran: the binary's commit, not the checkout's.
  [[ -n $commit ]] || usage "--binary needs --commit REV, the commit it was built at"
fi
[[ -x $binary ]] || usage "--binary: $binary is no program"
[[ $commit =~ ^[A-Za-z0-9._-]+$ ]] || usage "--commit: expected a revision, got '$commit'"

# planner_sweep takes directories: one per model and one per preset, of links.
stage=$(mktemp -d "${TMPDIR:-/tmp}/ssdtrain-sweep.XXXXXX")
# On exit (an interrupt, an error) each worker goes, and the search it runs.
stop_workers() {
  local pid kids
  for pid in $(jobs -p); do
    kids=$(pgrep -P "$pid" || true)
    kill "$pid" $kids 2> /dev/null || true
  done
  wait 2> /dev/null || true
  rm -rf "$stage"
}
trap stop_workers EXIT
trap 'exit 130' INT TERM
mkdir -p "$stage/locks"
for m in "${models[@]}"; do
  mkdir -p "$stage/models/$m"
  if [[ -f $root/configs/models/$m.json ]]; then
    ln -s "$root/configs/models/$m.json" "$stage/models/$m/$m.json"
  else
    ln -s "$root/models/tests/hf/$m/config.json" "$stage/models/$m/$m.json"
  fi
done
for p in "${presets[@]}"; do
  mkdir -p "$stage/hw/$p"
  ln -s "$root/configs/hardware/$p.json" "$stage/hw/$p/$p.json"
done

# One worker: takes each chunk not done and not held by another worker (a lock
# directory), runs it, appends its lines under a lock on the preset's file.
worker() {
  local id=$1 p m log err rc started
  for p in "${presets[@]}"; do
    for m in "${models[@]}"; do
      chunk_done "$p" "$m" && continue
      mkdir "$stage/locks/$p--$m" 2> /dev/null || continue
      log=$stage/$p--$m.out err=$stage/$p--$m.err started=$SECONDS rc=0
      nice -n "$niceness" "$binary" --models "$stage/models/$m" --hardware "$stage/hw/$p" \
        --gpus "$gpus" --max-seconds "$max_seconds" --verbose > "$log" 2> "$err" || rc=$?
      if ((rc > 1)); then
        # Not a verdict (a crash, a kill): nothing appended, the chunk runs again next time.
        echo "planner-sweep-queue: worker $id: $m on $p exited $rc; not recorded:" >&2
        tail -5 "$err" >&2
        continue
      fi
      {
        flock 9
        {
          echo "## $m on $gpus x $p: planner_sweep at $commit, $(date -u '+%Y-%m-%d %H:%M UTC'), $((SECONDS - started)) s wall, nice $niceness"
          cat "$log"
        } >> "$out/$p.txt"
      } 9>> "$stage/append.lock"
      echo "planner-sweep-queue: worker $id: $m on $p: $(tail -1 "$log") ($((SECONDS - started)) s;" \
        "$(chunks_done) of $total chunks done)" >&2
    done
  done
}

echo "planner-sweep-queue: $total chunks at $gpus GPUs ($workers workers, binary at $commit) into $out" >&2
for ((w = 1; w <= workers; w++)); do worker "$w" & done
wait
trap - EXIT
rm -rf "$stage"
exec "${BASH_SOURCE[0]}" "$out" --summary --hf "$hf" ${only_models:+--only-models "$only_models"} \
  ${only_presets:+--only-presets "$only_presets"}

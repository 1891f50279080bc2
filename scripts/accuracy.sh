#!/usr/bin/env bash
# Simulator accuracy on the CPU backend: for each model, runs `ssdtrain demo`
# (calibrate, plan, replay keep / recompute-full / ssdtrain / optimal, compare)
# without and with an SSD bandwidth cap low enough to make I/O the bottleneck,
# then prints every configuration's predicted and measured step time and checks
# the median and worst relative error. Each demo replays its four policies in
# --rounds interleaved rounds and reports the median round, so that a slow
# minute of this shared machine lands on one round of every policy rather than
# on every round of one. The calibration cache is private and emptied first, so
# each model's first demo calibrates this machine as it is now and the capped
# demo minutes later reuses that; a demo whose keep rounds agree with each other
# but miss keep's prediction by more than 10% calibrates again (the calibration
# caught the machine at another speed) and the table notes it.
#
# The noise of this machine: keep and recompute-full do not depend on the SSD
# cap, so each runs twice per model with the same plan, minutes apart. The spread
# between those twin measurements is the run-to-run noise that no prediction can
# beat: the median limit is --median-max plus the median twin spread, the worst
# limit --worst-max plus the largest, or, for a row whose own rounds are further
# apart than that, plus that row's round spread. The raw errors, the twin spreads and the
# limits are all printed; docs/PERFORMANCE.md says how the raw figures compare
# with the raw targets.
#
# Memory: every row's predicted device and activation peaks must be within
# --memory-max (2%) of the measured ones, with no noise allowance, capped rows
# included. The plans carry eviction points (sim::PlaceEvictions: each offloaded
# storage leaves the device at the op the prediction has its write landed by,
# and the replay waits there for a late write instead of holding more), so
# memory follows from the plan alone whatever this machine's timing does; a
# slow SSD costs time (exposed I/O), not memory. The budget's promise is gated
# too: a plan with one never measures above it. A third demo runs the first
# model under --slow-cap (0.05 GB/s), slow enough that writes lag.
#
# Whole steps: after the demos, the first model is planned with 4 micro-batches
# under 1F1B (`ssdtrain plan --num-micro-batches 4 --prediction`) and replayed
# whole (`ssdtrain replay --model --plan`) in one process and, where the build
# has MPI, with two pipeline stages and with two data-parallel replicas on two
# ranks (`mpirun -np 2 ssdtrain replay`). Each is planned on a calibration taken
# just before in the rank layout it runs in (`mpirun -np 2 ssdtrain calibrate`
# for the two-rank rows: the ranks share this machine's two cores and its disk),
# replayed in --rounds interleaved rounds, and gated like the demo's rows: time
# (its median round) and memory (each stage's largest; every round must
# measure the same peaks). Under --gate memory the rows are planned on the first
# model's uncapped demo calibration instead of two more: memory follows from the
# plan whatever calibration timed it, and the times, not gated there, are then
# those of a one-process calibration at the demo's micro-batch.
#
# Busy time per lane (compute, d2h, h2d, ssd_read, ssd_write), predicted and
# measured, from the step reports in each demo's report folder: printed per lane.
# The compute lane's median error must be within 10% plus the median twin spread
# (the step time's noise allowance: both are compute). The transfer lanes' (copies
# and SSD) median must be within 50%: their busy time follows the speed of this
# shared disk and memory in that minute, which drifts up to 2x from the calibration
# minutes before, and which the twin spread of a step time (I/O hidden behind
# compute) does not measure; the gate catches a lane mispredicted by a factor.
#
#   scripts/accuracy.sh [--bin B] [--out DIR] [--models "tiny-gpt small-gpt tiny-moe"] [--cap GBps]
#                       [--slow-cap GBps] [--median-max 0.05] [--worst-max 0.10]
#                       [--memory-max 0.02] [--steps 2] [--rounds 3] [--whole-steps 3] [--verify]
#                       [--capped-models "tiny-gpt small-gpt tiny-moe"]
#
# --capped-models: the models also run under --cap (default: every model).
#
# --whole-steps N: the whole-step rows' measured steps (0 leaves them out).
#
# --gate all|memory: what decides the exit status. `all` (the default): the
# step-time, lane-busy and memory limits above. `memory`: memory only (every row's
# predicted peaks within --memory-max of the measured ones, every budget held,
# every replay verified); the step times and lane busy times are still measured,
# printed and recorded, marked "reported, not gated": they are timings of a shared
# machine, and a test that decides a landing must not rest on one. ctest's
# accuracy_memory runs this way with --memory-max 0 (to the byte); this script
# with its default is where the timing accuracy is judged (docs/PERFORMANCE.md).
#
# Every run records its figures: accuracy.txt (the printed table) and
# accuracy.json (each row's predicted and measured step time, peaks and lane
# busy times, with the date, the commit and the machine) in the --out folder.
#
# --verify adds the demo's --verify replay before each timed one (slower; the
# bytes are checked by the replay tests and the walkthrough already).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$root/build/app/ssdtrain out="" models="tiny-gpt small-gpt tiny-moe" cap=0.15 slow_cap=0.05 median_max=0.05 worst_max=0.10 memory_max=0.02 steps=2 rounds=3 whole_steps=3
verify=--no-verify gate=all
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --capped-models) capped_models=$2; shift 2 ;;
    --cap) cap=$2; shift 2 ;;
    --slow-cap) slow_cap=$2; shift 2 ;;
    --memory-max) memory_max=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --whole-steps) whole_steps=$2; shift 2 ;;
    --median-max) median_max=$2; shift 2 ;;
    --worst-max) worst_max=$2; shift 2 ;;
    --verify) verify=""; shift ;;
    --gate) gate=$2; shift 2 ;;
    *) echo "accuracy: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case $gate in all | memory) ;; *) echo "accuracy: --gate is all or memory, not '$gate'" >&2; exit 2 ;; esac
[[ -x $bin ]] || { echo "accuracy: $bin is not built" >&2; exit 2; }
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/ssdtrain-accuracy-XXXXXX")}
mkdir -p "$out"
# A private calibration cache, emptied first, so that the run measures this
# machine now (the ctest registration reuses one --out folder).
rm -rf "$out/cache"
export XDG_CACHE_HOME=$out/cache
# Memory only: one calibration per machine state is enough (memory does not
# depend on it), so the demo does not calibrate again when keep drifts.
demo_flags=""
[[ $gate == memory ]] && demo_flags=--keep-calibration
summaries=()
first_model=${models%% *}
for m in $models; do
  caps=(0)
  if [[ " ${capped_models:-$models} " == *" $m "* ]]; then caps+=("$cap"); fi
  if [[ $m == "$first_model" && $slow_cap != 0 ]]; then caps+=("$slow_cap"); fi
  for c in "${caps[@]}"; do
    s=$out/summary-$m-cap$c.json
    echo "accuracy: $m, SSD cap ${c} GB/s (0: none)" >&2
    "$bin" demo --model "$root/configs/models/$m.json" --ssd-bandwidth "$c" --steps "$steps" --rounds "$rounds" \
      --report "$out/report-$m-cap$c" --summary "$s" --no-plots $verify $demo_flags >"$out/demo-$m-cap$c.txt" 2>"$out/demo-$m-cap$c.log" ||
      { cat "$out/demo-$m-cap$c.log" >&2; exit 1; }
    summaries+=("$s")
  done
done

# Whole steps: the first model planned at micro-batch 1 with 4 micro-batches
# under 1F1B and the ssdtrain policy (`ssdtrain plan --prediction`) on a
# calibration taken just before, the way its replay runs: one process
# (`ssdtrain calibrate`) for the one-rank row, two ranks at once (`mpirun -np 2
# ssdtrain calibrate`: they share this machine's cores and disk as the replay's
# two ranks do) for the pp = 2 and dp = 2 rows (under --gate memory, on the
# uncapped demo's calibration: see the header). Each row is replayed whole
# (`ssdtrain replay --model --plan`: every micro-batch in the schedule's order;
# the median of --whole-steps measured steps after a warm-up) in --rounds
# interleaved rounds, and its median round is compared like the demo's rows.
if ((whole_steps > 0)); then
  ws=$out/report-$first_model-wholestep
  rm -rf "$ws"
  mkdir -p "$ws"
  offload=$(mktemp -d "${TMPDIR:-/var/tmp}/ssdtrain-accuracy-offload-XXXXXX")
  trap 'rm -rf "$offload"' EXIT
  model_config=$root/configs/models/$first_model.json
  have_mpi=0
  # grep reads all of ldd's output: grep -q would stop at the first match and,
  # under pipefail, ldd's SIGPIPE could leave the MPI rows out at random.
  if command -v mpirun >/dev/null && ldd "$bin" | grep libmpi >/dev/null; then
    have_mpi=1
    # Open MPI refuses root unless told (CI containers run as root).
    if [[ $(id -u) == 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
  else
    echo "accuracy: no MPI in $bin: the pp = 2 and dp = 2 rows are left out" >&2
  fi
  launch() {  # ranks, command...: the command on that many ranks
    local n=$1; shift
    if ((n > 1)); then mpirun --oversubscribe -np "$n" "$@"; else "$@"; fi
  }
  plan_row() {  # name, pp, dp: planned on the calibration of pp × dp ranks
    local name=$1 pp=$2 dp=$3
    "$bin" plan --model "$model_config" --hardware "$ws/hardware-$((pp * dp)).json" --gpus $((pp * dp)) \
      --tp 1 --pp "$pp" --dp "$dp" --micro-batch 1 --num-micro-batches 4 --schedule 1f1b --policy ssdtrain \
      -o "$ws/plan-$name.json" --prediction "$ws/predicted-$name.json" >"$ws/plan-$name.log" 2>&1 ||
      { cat "$ws/plan-$name.log" >&2; exit 1; }
    names+=("$name") ranks+=($((pp * dp)))
  }
  # One attempt: calibrate, plan and replay every row, and write the summary.
  # Returns 3 when the first attempt's calibration looks stale (below).
  whole_step_attempt() {
    local attempt=$1 n round i name
    for n in 1 2; do
      ((n == 1 || have_mpi)) || continue
      if [[ $gate == memory ]]; then
        cp "$out/report-$first_model-cap0/hardware.json" "$ws/hardware-$n.json"
        continue
      fi
      echo "accuracy: $first_model whole steps: calibrating on $n rank(s) at once" >&2
      launch "$n" "$bin" calibrate --dir "$offload" --model "$model_config" --micro-batch 1 \
        -o "$ws/hardware-$n.json" >"$ws/calibrate-$n.log" 2>&1 || { cat "$ws/calibrate-$n.log" >&2; exit 1; }
    done
    names=() ranks=()
    plan_row ssdtrain-1f1b-m4 1 1
    if ((have_mpi)); then
      plan_row ssdtrain-1f1b-m4-pp2 2 1
      plan_row ssdtrain-1f1b-m4-dp2 1 2
    fi
    for ((round = 1; round <= rounds; round++)); do
      for i in "${!names[@]}"; do
        name=${names[$i]}
        echo "accuracy: $first_model whole step, $name, round $round of $rounds" >&2
        launch "${ranks[$i]}" "$bin" replay --model "$model_config" --plan "$ws/plan-$name.json" \
          --dir "$offload" --steps "$whole_steps" -o "$ws/measured-$name-round$round.json" \
          >"$ws/replay-$name-round$round.log" 2>&1 || { cat "$ws/replay-$name-round$round.log" >&2; exit 1; }
      done
    done
    /usr/bin/python3 - "$first_model" "$ws" "$out/summary-$first_model-wholestep.json" "$rounds" "$attempt" \
      "$gate" "${names[@]}" <<'PY'
import json, shutil, sys
model, folder, out, rounds, attempt, gate, names = (sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]),
                                                   int(sys.argv[5]), sys.argv[6], sys.argv[7:])
rows = []
for name in names:
    p = json.load(open(f"{folder}/predicted-{name}.json"))
    runs = [json.load(open(f"{folder}/measured-{name}-round{k}.json")) for k in range(1, rounds + 1)]
    # Memory follows from the plan: every round must measure the same peaks.
    peaks = {(m["peak_activation_bytes"], m["peak_device_bytes"]) for m in runs}
    if len(peaks) != 1:
        sys.exit(f"accuracy: {name}: the rounds measured different peaks {sorted(peaks)}")
    order = sorted(range(rounds), key=lambda k: runs[k]["step_time_ns"])
    median = order[(rounds - 1) // 2]
    m = runs[median]
    # The median round's report is the row's (its lanes are compared too).
    shutil.copy(f"{folder}/measured-{name}-round{median + 1}.json", f"{folder}/measured-{name}.json")
    rows.append({"policy": name, "ranks": len(m.get("extra", {}).get("ranks", [])) or 1,
                 "whole_step": True,
                 "predicted_step_ns": p["step_time_ns"], "measured_step_ns": m["step_time_ns"],
                 "error": (p["step_time_ns"] - m["step_time_ns"]) / m["step_time_ns"],
                 "predicted_peak_activation_bytes": p["peak_activation_bytes"],
                 "peak_activation_bytes": m["peak_activation_bytes"],
                 "predicted_peak_device_bytes": p["peak_device_bytes"], "peak_device_bytes": m["peak_device_bytes"],
                 "budget_bytes": 0, "verified": None,
                 "round_step_times_ns": [r["step_time_ns"] for r in runs]})
# Like the demo: a row whose rounds agree with each other (within 10%) but
# miss its prediction by more than 10% says the calibration caught this
# machine at another speed; the whole block calibrates and runs once more.
def spread(v):
    return (max(v) - min(v)) / min(v)
stale = [r["policy"] for r in rows
         if spread(r["round_step_times_ns"]) <= 0.10 and abs(r["error"]) > 0.10]
if stale and attempt == 1 and gate == "all":
    print(f"accuracy: {', '.join(stale)}: rounds agree but miss the prediction by more than 10%; "
          "calibrating again", file=sys.stderr)
    sys.exit(3)
summary = {"model": model, "ssd_bandwidth_GBps": 0, "rows": rows}
if attempt > 1:
    summary["recalibrated"] = "the whole-step rows calibrated twice (a row's rounds agreed but missed its prediction by more than 10%)"
json.dump(summary, open(out, "w"), indent=1)
PY
  }
  for attempt in 1 2; do
    rc=0
    whole_step_attempt "$attempt" || rc=$?
    if ((rc == 3 && attempt == 1)); then continue; fi
    ((rc == 0)) || exit 1
    break
  done
  summaries+=("$out/summary-$first_model-wholestep.json")
fi

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null) ]]; then commit+="+changes"; fi
machine="$(hostname), $(nproc) cores, $(uname -r)"
rc=0
/usr/bin/python3 - "$median_max" "$worst_max" "$memory_max" "$gate" "$out/accuracy.json" "$commit" "$machine" \
  "${summaries[@]}" <<'PY' | tee "$out/accuracy.txt" || rc=$?
import datetime, json, os, statistics, sys
median_max, worst_max, memory_max = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
gate, record, commit, machine = sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
sys.argv = sys.argv[:1] + sys.argv[8:]
rows = []
lane_rows = []  # (model, cap, policy, lane, predicted ns, measured ns)
for path in sys.argv[1:]:
    s = json.load(open(path))
    if s.get("recalibrated"):
        reason = s["recalibrated"] if isinstance(s["recalibrated"], str) else \
            "the demo calibrated twice (keep was more than 10% off the first calibration's prediction)"
        print(f"note: {s['model']} (SSD cap {s['ssd_bandwidth_GBps']:g}): {reason}")
    # The demo's report folder beside the summary holds each policy's predicted
    # and measured step reports, with their busy time per lane.
    report = os.path.join(os.path.dirname(path), os.path.basename(path).replace("summary-", "report-")[:-len(".json")])
    for r in s["rows"]:
        rows.append((s["model"], s["ssd_bandwidth_GBps"], r))
        pred = json.load(open(os.path.join(report, f"predicted-{r['policy']}.json")))["lane_busy_ns"]
        meas = json.load(open(os.path.join(report, f"measured-{r['policy']}.json")))["lane_busy_ns"]
        for lane in sorted(set(pred) | set(meas)):
            if pred.get(lane, 0) or meas.get(lane, 0):
                lane_rows.append((s["model"], s["ssd_bandwidth_GBps"], r["policy"], lane,
                                  pred.get(lane, 0), meas.get(lane, 0)))
def rel(pred, meas):
    return (pred - meas) / meas if meas else (0.0 if pred == meas else float("inf"))
print(f"{'model':<10} {'SSD cap':>9} {'policy':<16} {'predicted':>11} {'measured':>11} {'error':>8} "
      f"{'act. peak pred/meas (MiB)':>26} {'error':>7} {'dev. peak pred/meas (MiB)':>26} {'error':>7} {'verified':>8}  rounds (ms)")
errors, memory_errors, capped_memory_errors, budget_misses = [], [], [], []
timed = []  # (model, cap, policy, |error|, spread of the row's own rounds)
for model, cap, r in rows:
    e = r["error"]
    errors.append(abs(e))
    rounds = r.get("round_step_times_ns", [])
    own = (max(rounds) - min(rounds)) / min(rounds) if len(rounds) >= 2 and min(rounds) > 0 else 0.0
    timed.append((model, cap, r["policy"], abs(e), own))
    capname = f"{cap:g} GB/s" if cap else "none"
    ea = rel(r["predicted_peak_activation_bytes"], r["peak_activation_bytes"])
    ed = rel(r["predicted_peak_device_bytes"], r["peak_device_bytes"])
    memory_errors.extend([abs(ea), abs(ed)])
    if cap:
        capped_memory_errors.extend([abs(ea), abs(ed)])
    mib = 1048576
    budget = r.get("budget_bytes", 0)
    if budget and r["peak_device_bytes"] > budget:
        budget_misses.append(f"{model} {capname} {r['policy']}: measured device peak "
                             f"{r['peak_device_bytes']} B above its budget {budget} B")
    print(f"{model:<10} {capname:>9} {r['policy']:<16} {r['predicted_step_ns']/1e6:>8.1f} ms {r['measured_step_ns']/1e6:>8.1f} ms "
          f"{100*e:>+7.1f}% {r['predicted_peak_activation_bytes']/mib:>12.2f} {r['peak_activation_bytes']/mib:>12.2f} {100*ea:>+6.1f}% "
          f"{r['predicted_peak_device_bytes']/mib:>12.2f} {r['peak_device_bytes']/mib:>12.2f} {100*ed:>+6.1f}% "
          f"{str(r['verified']):>8}  {', '.join(f'{x/1e6:.1f}' for x in r.get('round_step_times_ns', []))}"
          + (f"  (whole step, {r['ranks']} rank{'s' if r['ranks'] > 1 else ''})" if r.get("whole_step") else ""))
med, worst = statistics.median(errors), max(errors)
# Twin measurements of identical configurations (the cap does not touch them).
twins = {}
for model, cap, r in rows:
    if r["policy"] in ("keep", "recompute-full"):
        twins.setdefault((model, r["policy"]), []).append(r["measured_step_ns"])
spreads = []
for (model, policy), v in sorted(twins.items()):
    if len(v) >= 2:
        spread = (max(v) - min(v)) / min(v)
        spreads.append(spread)
        print(f"noise: {model} {policy} measured {', '.join(f'{x/1e6:.1f}' for x in v)} ms: spread {100*spread:.1f}%")
typical = statistics.median(spreads) if spreads else 0.0
largest = max(spreads) if spreads else 0.0
median_limit = median_max + typical
worst_limit = worst_max + largest
# A row's own rounds are repeated measurements of one configuration too: a row
# whose rounds are further apart than any twin pair (a slow minute of this shared
# machine landing on two of its three rounds) gets that spread as its allowance.
over = [(m, c, p, e, worst_max + max(largest, own)) for m, c, p, e, own in timed
        if e > worst_max + max(largest, own)]
worst_row = max(timed, key=lambda t: t[3]) if timed else None
print(f"{len(errors)} configurations: median |error| {100*med:.1f}% "
      f"(limit {100*median_max:.0f}% + median twin spread {100*typical:.1f}% = {100*median_limit:.1f}%), "
      f"worst {100*worst:.1f}% (limit {100*worst_max:.0f}% + the larger of the largest twin spread "
      f"{100*largest:.1f}% and the row's own round spread"
      + (f", {100*max(largest, worst_row[4]):.1f}% for {worst_row[0]} {worst_row[2]}" if worst_row else "") + ")")
for m, c, p, e, limit in over:
    print(f"worst: {m} (SSD cap {c:g}) {p}: |error| {100*e:.1f}% above its limit {100*limit:.1f}%")
print(f"raw targets ({100*median_max:.0f}% / {100*worst_max:.0f}%): "
      + ("met" if med <= median_max and worst <= worst_max else "not met on this run"))
whole = [(r["policy"], r["error"]) for _, _, r in rows if r.get("whole_step")]
if whole:
    print("whole steps: " + ", ".join(f"{p} {100*e:+.1f}%" for p, e in whole)
          + f"; raw target 10%: {'met' if all(abs(e) <= 0.10 for _, e in whole) else 'not met on this run'}"
          + " (gated with the rows above)")
# Busy time per lane (compute, d2h, h2d, ssd_read, ssd_write; the same
# definition on both sides, traces/timeline.h). Compute carries the step time's
# noise allowance; the transfer lanes follow the disk's and memory's speed of the
# minute (see the header), gated against a factor-sized misprediction.
lane_errors = {}
for model, cap, policy, lane, p, m in lane_rows:
    lane_errors.setdefault(lane, []).append(abs(rel(p, m)))
for lane, v in sorted(lane_errors.items()):
    print(f"lane busy {lane:<10} {len(v):>2} rows: median |error| {100*statistics.median(v):.1f}%, worst {100*max(v):.1f}%")
compute_errors = lane_errors.get("compute", [])
transfer_errors = [e for lane, v in lane_errors.items() if lane != "compute" for e in v]
compute_lane_median = statistics.median(compute_errors) if compute_errors else 0.0
transfer_lane_median = statistics.median(transfer_errors) if transfer_errors else 0.0
compute_lane_limit = 0.10 + typical
transfer_lane_limit = 0.50
all_lane_errors = compute_errors + transfer_errors
print(f"lane busy, compute: median |error| {100*compute_lane_median:.1f}% (limit 10% + median twin spread "
      f"{100*typical:.1f}% = {100*compute_lane_limit:.1f}%); copies and SSD: median |error| "
      f"{100*transfer_lane_median:.1f}% (limit {100*transfer_lane_limit:.0f}%: this disk and memory drift); "
      f"every row and lane {100*(statistics.median(all_lane_errors) if all_lane_errors else 0):.1f}%")
worst_memory = max(memory_errors) if memory_errors else 0.0
print(f"memory, every row: worst |error| of the predicted activation and device peaks {100*worst_memory:.2f}% "
      f"(limit {100*memory_max:.0f}%, no noise allowance); "
      f"with an SSD cap {100*max(capped_memory_errors or [0.0]):.2f}%; budgets held: {'no' if budget_misses else 'yes'}")
for miss in budget_misses:
    print("budget: " + miss)
# verified is null when the demo ran with --no-verify (the default here).
memory_ok = (worst_memory <= memory_max and not budget_misses
             and all(r["verified"] is not False for _, _, r in rows))
time_ok = (med <= median_limit and not over and compute_lane_median <= compute_lane_limit
           and transfer_lane_median <= transfer_lane_limit)
ok = memory_ok and (time_ok or gate == "memory")
json.dump({
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "commit": commit, "machine": machine, "gate": gate,
    "step_time": {"median_abs_error": med, "worst_abs_error": worst, "median_limit": median_limit,
                  "worst_limit": worst_max + largest, "median_twin_spread": typical,
                  "largest_twin_spread": largest, "within_limits": time_ok},
    "lane_busy": {lane: {"median_abs_error": statistics.median(v), "worst_abs_error": max(v)}
                  for lane, v in sorted(lane_errors.items())},
    "memory": {"worst_abs_error": worst_memory, "limit": memory_max, "budgets_held": not budget_misses},
    "rows": [{"model": m, "ssd_cap_GBps": c, **r} for m, c, r in rows],
}, open(record, "w"), indent=1)
if gate == "memory":
    print("step time and lane busy: reported, not gated (--gate memory): "
          + ("within" if time_ok else "outside") + " the limits above on this run")
print(f"accuracy ({'memory' if gate == 'memory' else 'step time, lane busy and memory'}): "
      + ("PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
echo "accuracy: recorded in $out/accuracy.txt and $out/accuracy.json" >&2
exit "$rc"

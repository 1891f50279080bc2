#include "sim/stage_plans.h"

#include <algorithm>
#include <optional>

#include "sim/detail/task_pool.h"
#include "sim/optimal_policy.h"
#include "traces/drives.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::sim {
namespace {

// `plan` on this stage, holding its micro-batches in flight: whether it fits
// `budget`, and its step.
struct Judged {
  bool fits = false;
  int64_t step_ns = 0;
};
Result<Judged> Judge(const StageTrace& st, const HardwareOptions& hw, const traces::Plan& plan,
                     int64_t budget, const PolicyOptions& options) {
  const traces::Trace& trace = *st.trace;
  SimulateOptions so;
  so.gpu = options.gpu;
  so.record_timeline = false;
  SSDTRAIN_ASSIGN_OR_RETURN(Prediction p,
                            Simulate({StageInput{&trace, &plan, st.storages}}, hw, so));
  const auto stage = static_cast<size_t>(std::max<int64_t>(0, trace.header.stage));
  const int64_t peak =
      p.stage_peaks.empty()
          ? p.metrics.peak_gpu_bytes
          : p.stage_peaks[std::min(stage, p.stage_peaks.size() - 1)].peak_gpu_bytes;
  return Judged{peak <= budget, p.metrics.step_time_ns};
}

// Keeping every activation fits this stage, holding its micro-batches in flight.
Result<bool> KeepFits(const StageTrace& st, const HardwareOptions& hw, const traces::Plan& layout,
                      int64_t budget, const PolicyOptions& options) {
  SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan keep,
                            MakeFixedPlan("keep", *st.trace, hw, layout, options));
  SSDTRAIN_ASSIGN_OR_RETURN(Judged j, Judge(st, hw, keep, budget, options));
  return j.fits;
}

}  // namespace

std::vector<int64_t> RepresentativeStages(int64_t pp) {
  std::vector<int64_t> stages{0};
  if (pp > 2) stages.push_back(1);
  if (pp > 1) stages.push_back(pp - 1);
  return stages;
}

std::vector<StageInput> StagePlans::Inputs() const {
  std::vector<StageInput> in;
  for (const StagePlan& s : stages) in.push_back({s.trace, &s.plan, s.storages});
  return in;
}

namespace {

// One stage's plan under `policy`, eviction points placed; `simulations`
// counts the stage simulations it ran.
Result<traces::Plan> PlanStage(const StageTrace& st, const std::string& policy,
                               const HardwareOptions& hw, const traces::Plan& base, int64_t budget,
                               const PolicyOptions& options, int64_t* simulations) {
  const traces::Trace& trace = *st.trace;
  traces::Plan layout = base;
  layout.model = trace.header.model;
  layout.trace_fingerprint = st.fingerprint ? *st.fingerprint : traces::Fingerprint(trace);
  // The budget, each storage's first stripe on the next drive of the
  // (slowest) array, the eviction points.
  auto finish = [&](traces::Plan plan) -> Result<traces::Plan> {
    plan.memory_budget_bytes = budget;
    traces::SpreadOverDrives(trace, &plan, ArrayFor(hw, SlowestArray(hw)).drives);
    ++*simulations;
    return PlaceEvictions(trace, std::move(plan), hw, st.storages);
  };
  bool keep_fits = false;
  if (policy == "optimal") {
    SSDTRAIN_ASSIGN_OR_RETURN(keep_fits, KeepFits(st, hw, layout, budget, options));
    ++*simulations;
  }
  if (keep_fits) {
    // Nothing is faster than keeping everything: the search would end there.
    SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan plan, MakeFixedPlan("keep", trace, hw, layout, options));
    plan.policy = "optimal";
    return finish(std::move(plan));
  }
  if (policy != "optimal") {
    SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan plan, MakeFixedPlan(policy, trace, hw, layout, options));
    return finish(std::move(plan));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(OptimalResult opt,
                            MakeOptimalPlan(trace, hw, layout, budget, options, st.storages));
  *simulations += opt.simulations;
  SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan plan, finish(std::move(opt.plan)));
  // The search judges its candidates before their stripes and eviction
  // points are placed, and an offload it took for a lower peak at the same
  // step may cost time once they are: the fixed policy it started from,
  // judged the same way, where that is faster (and fits where the search's
  // plan does).
  if (opt.best_fixed_policy.empty()) return plan;
  SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan fixed,
                            MakeFixedPlan(opt.best_fixed_policy, trace, hw, layout, options));
  fixed.policy = "optimal";
  SSDTRAIN_ASSIGN_OR_RETURN(fixed, finish(std::move(fixed)));
  SSDTRAIN_ASSIGN_OR_RETURN(const Judged searched, Judge(st, hw, plan, budget, options));
  SSDTRAIN_ASSIGN_OR_RETURN(const Judged started, Judge(st, hw, fixed, budget, options));
  *simulations += 2;
  const bool better = started.fits && (!searched.fits || started.step_ns < searched.step_ns);
  return better ? fixed : plan;
}

}  // namespace

Result<StagePlans> PlanStages(const std::vector<const traces::Trace*>& traces,
                              const std::string& policy, const HardwareOptions& hw,
                              const traces::Plan& base, int64_t budget,
                              const PolicyOptions& options, detail::TaskPool* pool) {
  std::vector<StageTrace> stage_traces;
  for (const traces::Trace* t : traces)
    stage_traces.push_back(StageTrace{t, std::nullopt, nullptr});
  return PlanStages(stage_traces, policy, hw, base, budget, options, pool);
}

Result<StagePlans> PlanStages(const std::vector<StageTrace>& traces, const std::string& policy,
                              const HardwareOptions& hw, const traces::Plan& base, int64_t budget,
                              const PolicyOptions& options, detail::TaskPool* pool) {
  const std::vector<int64_t> stages = RepresentativeStages(base.pp);
  if (traces.size() != stages.size()) {
    return Status::Internal("PlanStages: " + std::to_string(traces.size()) + " traces for " +
                            std::to_string(stages.size()) + " stages");
  }
  const size_t n = stages.size();
  std::vector<std::optional<Result<traces::Plan>>> plans(n);
  std::vector<int64_t> simulations(n, 0);
  auto plan_stage = [&](size_t i) {
    plans[i].emplace(PlanStage(traces[i], policy, hw, base, budget, options, &simulations[i]));
  };
  // The optimizer's stages are independent searches of thousands of
  // simulations: a task each on `pool`. A fixed policy's stage is two
  // simulations, not worth a task. The plans are the same either way.
  if (pool != nullptr && policy == "optimal") {
    pool->ForEach(n, plan_stage);
  } else {
    for (size_t i = 0; i < n; ++i) plan_stage(i);
  }
  StagePlans out;
  for (size_t i = 0; i < n; ++i) {
    if (!plans[i]->ok()) return plans[i]->status();  // the first failing stage's
    out.simulations += simulations[i];
    out.stages.push_back(
        StagePlan{stages[i], traces[i].trace, std::move(**plans[i]), traces[i].storages});
  }
  return out;
}

Result<traces::Plan> RetargetPlan(traces::Plan plan, const traces::Trace& trace) {
  plan.model = trace.header.model;
  plan.trace_fingerprint = traces::Fingerprint(trace);
  SSDTRAIN_RETURN_IF_ERROR(
      traces::ResolvePlan(trace, plan, "the plan of a stage of the same shape").status());
  return plan;
}

}  // namespace ssdtrain::sim

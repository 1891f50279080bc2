#include "sim/detail/planner_search.h"

#include <algorithm>
#include <thread>

#include "sim/fit.h"

namespace ssdtrain::sim::detail {

Search::Search(const TraceProvider& provider, const HardwareOptions& hw,
               const PlannerOptions& options, int64_t budget)
    : cache_(provider),
      hw_(hw),
      budget_(budget),
      ddp_(options.ddp),
      threads_(options.threads > 0
                   ? options.threads
                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
      pool_(threads_) {
  policy_options_.allow_host_offload = options.allow_host_offload;
  policy_options_.recompute_modules = options.recompute_modules;
  policy_options_.recompute_every = options.recompute_every;
  policy_options_.offload_modules = options.offload_modules;
}

Result<std::vector<StageTrace>> Search::StageTraces(const Layout& l) {
  std::vector<StageTrace> out;
  for (int64_t s : RepresentativeStages(l.pp)) {
    SSDTRAIN_ASSIGN_OR_RETURN(StageTrace t, cache_.GetStage(l.Shape(s)));
    out.push_back(t);
  }
  return out;
}

Result<Candidate> Search::Evaluate(const Layout& l, const std::string& policy, bool timeline,
                                   bool unrolled_peaks) {
  SSDTRAIN_ASSIGN_OR_RETURN(Candidate c, EvaluateUncounted(l, policy, timeline, unrolled_peaks));
  Count(c);
  return c;
}

Result<Candidate> Search::EvaluateUncounted(const Layout& l, const std::string& policy,
                                            bool timeline, bool unrolled_peaks) {
  SSDTRAIN_ASSIGN_OR_RETURN(std::vector<StageTrace> traces, StageTraces(l));
  // The layout (each stage's plan takes its own trace's model and fingerprint).
  traces::Plan base = traces::PlanTemplate(*traces[0].trace, "", *traces[0].fingerprint);
  base.micro_batch = l.micro_batch;
  base.tp = l.tp;
  base.cp = l.cp;
  base.pp = l.pp;
  base.pp_first_layers = l.pp_first_layers;
  base.pp_last_layers = l.pp_last_layers;
  base.dp = l.dp;
  base.zero_stage = l.zero_stage;
  base.dp_shard = l.dp_shard;
  base.ddp = ddp_;
  base.ep = l.ep;
  base.num_micro_batches = l.m;
  base.schedule = std::string(traces::ToString(l.schedule));
  base.virtual_stages = l.virtual_stages;
  base.memory_budget_bytes = budget_;
  Candidate c;
  SSDTRAIN_ASSIGN_OR_RETURN(
      c.plans, PlanStages(traces, policy, hw_, base, budget_, policy_options_, &pool_));
  SimulateOptions so;
  so.record_timeline = timeline;
  so.unrolled_interleaved_peaks = unrolled_peaks;
  SSDTRAIN_ASSIGN_OR_RETURN(c.prediction, Simulate(c.plans.Inputs(), hw_, so));
  c.simulations = c.plans.simulations + 1;
  c.exact = unrolled_peaks || l.schedule != traces::Schedule::kInterleaved;
  Judge(c);
  return c;
}

Status Search::Exact(Candidate& c) {
  if (c.exact) return Status::Ok();
  SimulateOptions so;
  so.record_timeline = false;
  so.unrolled_interleaved_peaks = true;
  SSDTRAIN_ASSIGN_OR_RETURN(c.prediction, Simulate(c.plans.Inputs(), hw_, so));
  ++c.simulations;
  ++simulations_;
  c.exact = true;
  Judge(c);
  return Status::Ok();
}

Status Search::Reserved(Candidate& c, const Layout& l) {
  if (l.pp != 1 || l.m != 1) return Status::Ok();
  SimulateOptions so;
  so.record_timeline = false;
  so.caching_allocator = true;
  SSDTRAIN_ASSIGN_OR_RETURN(const Prediction p, Simulate(c.plans.Inputs(), hw_, so));
  c.prediction.peak_reserved_bytes = p.peak_reserved_bytes;
  c.prediction.reserved_fits = p.reserved_fits;
  ++c.simulations;
  ++simulations_;
  return Status::Ok();
}

void Search::Judge(Candidate& c) const {
  c.over_budget_bytes = OverBudgetBytes(c.prediction, budget_);
  c.shortfall = HostAndDiskShortfall(c.prediction, hw_);
  c.fits = FitsBudget(c.prediction, budget_) && c.shortfall.empty();
}

}  // namespace ssdtrain::sim::detail

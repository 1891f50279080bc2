// The planner's search state (sim/planner.h): the trace cache, the thread
// pool, and one policy at one layout evaluated into a Candidate (its per-stage
// plans and whole-step prediction, judged against the budget). Internal to sim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/detail/planner_layouts.h"
#include "sim/detail/task_pool.h"
#include "sim/hardware.h"
#include "sim/planner.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/stage_plans.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::sim::detail {

// One policy at one layout: its per-stage plans and their whole-step prediction.
struct Candidate {
  StagePlans plans;
  Prediction prediction;
  bool fits = false;
  int64_t over_budget_bytes = 0;
  std::string shortfall;    // HostAndDiskShortfall: why it cannot run beside GPU memory
  int64_t simulations = 0;  // stage and whole-step simulations it took
  // Whether `prediction`'s stage peaks are the printed ones: false for an
  // interleaved one by the closed form (traces::HeldByOtherChunks, no bound
  // either way on the unrolled step's) until Search::Exact.
  bool exact = true;
  // Not simulated: auto passes over megatron-offload where offload-host does
  // not fit (planner.cc, SkippedHere).
  bool skipped = false;
};

class Search {
 public:
  Search(const TraceProvider& provider, const HardwareOptions& hw, const PlannerOptions& options,
         int64_t budget);
  TraceCache& cache() { return cache_; }
  int threads() const { return threads_; }
  TaskPool& pool() { return pool_; }
  int64_t simulations() const { return simulations_; }
  // A candidate the search's answer depends on: its simulations are counted
  // (a window's candidates past the sequential search's stops are not).
  void Count(const Candidate& c) { simulations_ += c.simulations; }

  // The layout's representative stages' traces, with their fingerprints and
  // storages (built into the cache).
  Result<std::vector<StageTrace>> StageTraces(const Layout& l);

  Result<Candidate> Evaluate(const Layout& l, const std::string& policy, bool timeline,
                             bool unrolled_peaks = false);
  // Safe to call from several threads once StageTraces(l) has been called
  // for `l` (the trace cache is then only read).
  Result<Candidate> EvaluateUncounted(const Layout& l, const std::string& policy, bool timeline,
                                      bool unrolled_peaks = false);

  // An interleaved candidate's prediction again with its stages' peaks from
  // their unrolled steps (SimulateOptions::unrolled_interleaved_peaks, what
  // the planner prints), and its fit judged by them. Counted; nothing to do
  // when already exact. The step's times do not change, only the peaks.
  Status Exact(Candidate& c);
  // A candidate of one micro-batch on one stage: its prediction's
  // peak_reserved_bytes (SimulateOptions::caching_allocator), one simulation
  // more; nothing for a whole step.
  Status Reserved(Candidate& c, const Layout& l);

 private:
  TraceCache cache_;
  const HardwareOptions& hw_;
  const int64_t budget_;
  const std::string ddp_;
  PolicyOptions policy_options_;
  const int threads_;
  TaskPool pool_;  // after threads_
  int64_t simulations_ = 0;

  void Judge(Candidate& c) const;
};

}  // namespace ssdtrain::sim::detail

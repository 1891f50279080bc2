// The optimizing planner: per tensor keep / offload-ssd / offload-host /
// recompute, chosen jointly under a GPU memory budget to minimise the simulated
// step time, with time-aware prefetch.
//
// Search (each candidate judged by a full Simulate of the plan's layout):
//  1. every fixed policy; the fastest that fits the budget is the incumbent
//     (none fits: the one with the lowest peak), so the result is never worse
//     than the best fixed policy;
//  2. time-aware prefetch on the incumbent;
//  3. greedy moves over groups of tensors, accepting a move only when the plan
//     still fits and gets faster (or equally fast with less memory):
//     keep more (latest layers first, filling the budget's slack), recompute
//     cheap memory-bound tensors instead of moving them, send some SSD traffic
//     to pinned host memory, offload kept tensors when over budget. Each move
//     tries prefixes of its ordered list from longest to shortest.
//
// Time-aware prefetch: each offloaded tensor's read is issued at the latest op
// whose predicted start leaves time for the read — and for the reads queued
// behind it — to land before its first backward consumer, at the read bandwidth
// the hardware gives.
#pragma once

#include <cstdint>
#include <string>

#include "sim/hardware.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

struct OptimalResult {
  traces::Plan plan;
  Prediction prediction;
  std::string best_fixed_policy;  // the incumbent the search started from
  int64_t best_fixed_step_ns = 0;
  int simulations = 0;
  // The predicted device peak is within the budget. When no plan fits, `plan`
  // is the one with the lowest peak, still carrying the budget it misses (a
  // replay refuses it before it runs).
  bool fits = false;
};

// `budget_bytes` <= 0: the GPU's capacity (memory minus reserve).
// `storages`: the trace's traces::ResolveStorages where the caller has it
// (else resolved at the first simulation).
Result<OptimalResult> MakeOptimalPlan(const traces::Trace& trace, const HardwareOptions& hw,
                                      const traces::Plan& base, int64_t budget_bytes,
                                      const PolicyOptions& options = {},
                                      const traces::StoragePlan* storages = nullptr);

// Rewrites prefetch_before of every offloaded placement from the op start
// times in `timing` (a simulation of this plan or a close one).
void ApplyTimeAwarePrefetch(const traces::Trace& trace, const HardwareOptions& hw,
                            const Prediction& timing, const PolicyOptions& options,
                            traces::Plan* plan);

}  // namespace ssdtrain::sim

// Per-stage plans (DESIGN.md, "The planner's promise"): under 1F1B stage i of
// p holds min(p − i, m) micro-batches at once (GPipe: m; interleaved:
// traces::ChunksInFlight chunks of 1/v each), so each stage is planned for its
// own in-flight count. Stage 0 holds the most and offloads or
// recomputes the most; the last stage holds one.
//
// Three stages stand for all of them, as in the simulation (sim/simulate.h):
// stage 0, stage 1 for every stage between the first and the last (it holds
// the most of them, so its plan fits each), and the last. A fixed policy gives
// every stage its own plan of that policy; "optimal" searches each stage's
// placements under the budget for that stage's in-flight count (a stage that
// fits keeping everything keeps everything: no plan is faster). Every plan
// gets its eviction points (sim::PlaceEvictions), so the prediction of the
// plans is the one a replay holds to the byte.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/hardware.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::sim {
namespace detail {
class TaskPool;  // sim/detail/task_pool.h
}  // namespace detail

// The stages that stand for a pipeline of `pp`: 0, then 1 when pp > 2, then
// pp − 1 when pp > 1.
std::vector<int64_t> RepresentativeStages(int64_t pp);

// A stage's trace with what a search works out of it once (the planner's
// trace cache does, sim/detail/planner_layouts.h): its fingerprint and its
// storages (traces::ResolveStorages). Not owned; a null field is worked out
// again at each use.
struct StageTrace {
  const traces::Trace* trace = nullptr;
  std::optional<uint64_t> fingerprint;
  const traces::StoragePlan* storages = nullptr;
};

struct StagePlan {
  int64_t stage = 0;
  const traces::Trace* trace = nullptr;  // not owned
  traces::Plan plan;
  const traces::StoragePlan* storages = nullptr;  // the trace's (StageTrace), or null
};

struct StagePlans {
  std::vector<StagePlan> stages;  // RepresentativeStages order
  int64_t simulations = 0;        // stage simulations run to make them
  std::vector<StageInput> Inputs() const;
};

// Plans every representative stage (`traces[i]` is stage
// RepresentativeStages(base.pp)[i]'s trace) under `policy` with `base`'s
// layout and `budget` (bytes per GPU), eviction points placed. Under
// "optimal", with a `pool`, the stages are searched as its tasks, at once (the
// plans and the simulation count do not depend on it); the first failing
// stage's error, in stage order, is returned.
Result<StagePlans> PlanStages(const std::vector<StageTrace>& traces, const std::string& policy,
                              const HardwareOptions& hw, const traces::Plan& base, int64_t budget,
                              const PolicyOptions& options, detail::TaskPool* pool = nullptr);
Result<StagePlans> PlanStages(const std::vector<const traces::Trace*>& traces,
                              const std::string& policy, const HardwareOptions& hw,
                              const traces::Plan& base, int64_t budget,
                              const PolicyOptions& options, detail::TaskPool* pool = nullptr);

// `plan`, made for a stage's trace, on `trace`: another stage of the same
// shape (the middle stages of a pipeline). Its model and fingerprint become
// the trace's; the placements must resolve against it.
Result<traces::Plan> RetargetPlan(traces::Plan plan, const traces::Trace& trace);

}  // namespace ssdtrain::sim

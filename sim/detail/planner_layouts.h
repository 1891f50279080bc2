// The planner's first stages (sim/planner.h): the layouts a search covers and
// the analytic bound that orders and prunes them. Internal to sim.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/hardware.h"
#include "sim/planner.h"
#include "sim/stage_plans.h"
#include "traces/dp_buckets.h"
#include "traces/layout.h"
#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"
#include "traces/whole_step.h"

namespace ssdtrain::sim::detail {

struct Layout {
  int64_t micro_batch = 1, tp = 1, pp = 1, dp = 1, m = 1;
  int64_t cp = 1;          // context parallelism
  int64_t zero_stage = 0;  // traces/layout.h: 1 the optimizer state, 2 + gradients, 3 + weights
  int64_t ep = 1;          // expert parallelism (MoE models)
  int64_t dp_shard = 0;    // HSDP: the shard group's dp ranks; 0: dp
  // The pipeline split (traces/layout.h): 0 the even split's.
  int64_t pp_first_layers = 0, pp_last_layers = 0;
  traces::Schedule schedule = traces::Schedule::kOneFOneB;
  int64_t virtual_stages = 1;  // interleaved: model chunks per stage
  // Compute-only throughput from the cost model in the closed-form pipeline:
  // no plan of this layout is faster.
  double bound_tokens_per_s = 0;
  // The trace of pipeline stage `stage` at this layout.
  TraceShape Shape(int64_t stage) const {
    return {micro_batch,   tp, pp, stage, dp, zero_stage, ep, dp_shard, cp, pp_first_layers,
            pp_last_layers};
  }
  // Its ranks and groups (traces/layout.h).
  traces::Layout Ranks() const {
    traces::Layout r;
    r.tp = tp;
    r.cp = cp;
    r.pp = pp;
    r.vp = virtual_stages;
    r.dp = dp;
    r.ep = ep;
    r.zero_stage = zero_stage;
    r.dp_shard = dp_shard;
    r.pp_first_layers = pp_first_layers;
    r.pp_last_layers = pp_last_layers;
    return r;
  }
};

// The provider's traces, memoised per shape.
class TraceCache {
 public:
  explicit TraceCache(const TraceProvider& provider) : provider_(provider) {}
  Result<const traces::Trace*> Get(const TraceShape& shape);
  // The trace with its fingerprint and storages (traces::ResolveStorages),
  // worked out at the shape's first call here (the bound's traces, of layouts
  // never simulated, need neither). Like Get, not to be called from several
  // threads for a shape not seen yet.
  Result<StageTrace> GetStage(const TraceShape& shape);

 private:
  struct Entry {
    std::unique_ptr<traces::Trace> trace;
    uint64_t fingerprint = 0;  // set by GetStage, with storages
    std::unique_ptr<traces::StoragePlan> storages;
  };
  Result<Entry*> Find(const TraceShape& shape);
  const TraceProvider& provider_;
  std::map<TraceShape, Entry> cache_;
};

// Pins that no layout can satisfy, named by flag with the reason.
Status CheckPins(const PlannerOptions& o);
// " (pinned: --tp 2 --pp 4)" for the pins that are set, else "".
std::string PinsText(const PlannerOptions& o);

// The model chunks per stage the search tries interleaved: the divisors of
// layers / pp from 2 to kMaxVirtualStages (more chunks cut the bubble less
// each time and add sends).
inline constexpr int64_t kMaxVirtualStages = 8;

// The chunks per stage a layout of `pp` stages and `m` micro-batches may be
// interleaved with, ascending: the pinned v, else every v from 2 to
// kMaxVirtualStages that divides layers / pp; only those that can run at pp
// and m (traces::InterleavedError).
std::vector<int64_t> VirtualStagesToTry(const PlannerOptions& o, int64_t pp, int64_t m);
// The split a layout of `pp` stages gets (PlannerOptions::pp_first_layers):
// {first, last} blocks, {0, 0} for the even split; nullopt when `pp` cannot
// pipeline the model.
std::optional<std::pair<int64_t, int64_t>> SplitFor(const PlannerOptions& o, int64_t pp);

// Every layout the options allow: tp over powers of two up to one node (or
// pinned), cp as PlannerOptions::cp says, pp over the divisors of the
// layers, dp the rest of the GPUs, the
// micro-batch 1 .. 16 (or pinned), m from the global batch (or pinned, or 2·pp);
// each under 1F1B and, where pp >= 2 and m is a multiple of pp, interleaved
// with the largest v of VirtualStagesToTry (or the pinned schedule and v): the
// least bubble and memory; the search tries the others at its winner.
std::vector<Layout> EnumerateLayouts(const PlannerOptions& o, const HardwareOptions& hw);

// A stage trace's static bytes: its weights, optimizer state and weight
// gradients (traces::IsWeightGradient), which its micro-batch does not change
// (sim_planner tests hold that for every model config).
int64_t StaticBytes(const traces::Trace& trace);

struct BoundedLayouts {
  std::vector<Layout> feasible;  // static memory within the budget, fastest bound first
  int64_t min_static_bytes = 0;  // the least weights + gradients + optimizer state of any layout
};
// Sets each layout's bound and keeps those whose static memory (with ZeRO,
// the sharded state) fits `budget`. The bound: the compute of m + pp − 1
// micro-batches of stage 0 (the closed-form pipeline; interleaved
// m + (pp − 1)/v), or m micro-batches of its ZeRO-2/3 collectives (one at a
// time on the link), or of its cp ring's exchanges (one at a time on theirs),
// whichever is longest; the gradient exchange that
// outlasts one backward (all of it with `ddp` local); and ZeRO-1 and 2's
// parameter all-gather.
Result<BoundedLayouts> BoundLayouts(std::vector<Layout> layouts, TraceCache& cache,
                                    const HardwareOptions& hw, int64_t budget, traces::DdpImpl ddp);

}  // namespace ssdtrain::sim::detail

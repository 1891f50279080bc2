// PlaceEvictions (sim/policy.h): eviction points where the simulation has each
// offloaded storage's write landed.
#include <algorithm>
#include <vector>

#include "sim/policy.h"
#include "sim/stage_sim.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim {

Result<traces::Plan> PlaceEvictions(const traces::Trace& trace, traces::Plan plan,
                                    const HardwareOptions& hw) {
  bool offloads = false;
  for (traces::Placement& p : plan.placements) {
    p.evict_before = traces::kNoOp;
    offloads = offloads || p.action == traces::TensorAction::kOffloadSsd ||
               p.action == traces::TensorAction::kOffloadHost;
  }
  if (!offloads) return plan;
  StageSimOptions so;
  so.gpu = SlowestArray(hw);  // as Simulate places a stage
  so.record_timeline = false;
  SSDTRAIN_ASSIGN_OR_RETURN(const StageResult r, SimulateStage(trace, plan, hw, so));
  SSDTRAIN_ASSIGN_OR_RETURN(const traces::StoragePlan sp, traces::ResolvePlan(trace, plan, "plan"));
  const auto n = static_cast<traces::OpId>(trace.ops.size());
  std::vector<traces::Placement> placed;
  for (traces::Placement& p : plan.placements) {
    const traces::StorageInfo& s = sp.of(p.tensor);
    if (s.offloaded()) {
      const auto landed = r.write_landed_ns.find(s.root);
      traces::OpId end = s.first_backward_use == traces::kNoOp ? n : s.first_backward_use;
      if (s.prefetch_before != traces::kNoOp) end = std::min(end, s.prefetch_before);
      for (traces::OpId k = s.last_forward_use + 1; landed != r.write_landed_ns.end() && k < end;
           ++k) {
        if (trace.op(k).phase == traces::Phase::kOptimizer) break;
        if (r.ops[static_cast<size_t>(k)].start_ns >= landed->second) {
          p.evict_before = k;
          break;
        }
      }
      // Its write would land after backward needs it back (the simulation
      // forwards it): it is kept, and the write that would be wasted goes.
      if (p.evict_before == traces::kNoOp) continue;
    }
    placed.push_back(std::move(p));
  }
  plan.placements = std::move(placed);
  return plan;
}

}  // namespace ssdtrain::sim

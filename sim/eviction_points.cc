// PlaceEvictions (sim/policy.h): eviction points where the simulation has each
// offloaded storage's write landed.
#include <algorithm>
#include <map>
#include <vector>

#include "sim/pipeline.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/stage_sim.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim {

Result<traces::Plan> PlaceEvictions(const traces::Trace& trace, traces::Plan plan,
                                    const HardwareOptions& hw,
                                    const traces::StoragePlan* storages) {
  bool offloads = false;
  for (traces::Placement& p : plan.placements) {
    p.evict_before = traces::kNoOp;
    offloads = offloads || p.action == traces::TensorAction::kOffloadSsd ||
               p.action == traces::TensorAction::kOffloadHost;
  }
  if (!offloads) return plan;
  SSDTRAIN_ASSIGN_OR_RETURN(const PipelineSchedule schedule, ParseSchedule(plan.schedule));
  const int64_t v = schedule == PipelineSchedule::kInterleaved ? plan.virtual_stages : 1;
  StageSimOptions so;
  so.gpu = SlowestArray(hw);  // as Simulate places a stage
  so.record_timeline = false;
  so.in_flight = ChunksInFlight(trace.header.stage, std::max<int64_t>(1, plan.pp),
                                plan.num_micro_batches, schedule, v);
  so.virtual_stages = v;
  so.storages = storages;
  const bool several = so.in_flight > v;
  SSDTRAIN_ASSIGN_OR_RETURN(StageResult r, SimulateStage(trace, plan, hw, so));
  if (several && r.ssd_bytes_written + r.ssd_bytes_read > 0) {
    // Where the prediction has the writes land: with the SSD shared by the
    // micro-batches in flight, as Simulate runs such a stage.
    SSDTRAIN_ASSIGN_OR_RETURN(r, SimulateStage(trace, plan, hw, SharedSsdOptions(r, so)));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const traces::StoragePlan sp,
                            storages ? traces::ResolvePlan(trace, *storages, plan, "plan")
                                     : traces::ResolvePlan(trace, plan, "plan"));
  const auto n = static_cast<traces::OpId>(trace.ops.size());
  traces::OpId pass_end = traces::kNoOp;  // the first backward op
  for (const traces::Op& op : trace.ops) {
    if (op.phase == traces::Phase::kBackward) {
      pass_end = op.id;
      break;
    }
  }
  // Each micro-batch's first backward op: a point on a later backward op of
  // the storage's own micro-batch means that op (traces/storage_plan.h,
  // "Memory"), so it would hold the backward back until the write lands.
  std::map<int, traces::OpId> own_pass_end;
  for (const traces::Op& op : trace.ops) {
    if (op.phase == traces::Phase::kBackward) own_pass_end.emplace(op.micro_batch, op.id);
  }
  std::vector<traces::Placement> placed;
  for (traces::Placement& p : plan.placements) {
    const traces::StorageInfo& s = sp.of(p.tensor);
    if (s.offloaded()) {
      const auto landed = r.write_landed_ns.find(s.root);
      traces::OpId end = s.first_backward_use == traces::kNoOp ? n : s.first_backward_use;
      if (s.prefetch_before != traces::kNoOp) end = std::min(end, s.prefetch_before);
      const auto own = own_pass_end.find(trace.tensor(s.root).micro_batch);
      if (own != own_pass_end.end()) end = std::min(end, own->second + 1);
      for (traces::OpId k = s.last_forward_use + 1; landed != r.write_landed_ns.end() && k < end;
           ++k) {
        if (trace.op(k).phase == traces::Phase::kOptimizer) break;
        if (r.ops[static_cast<size_t>(k)].start_ns >= landed->second) {
          p.evict_before = k;
          break;
        }
      }
      if (p.evict_before == traces::kNoOp && several) {
        // Its write lands after backward needs it, but the stage holds other
        // micro-batches: it goes at the end of its forward pass, the next pass
        // waiting for the write (backpressure), not held while it waits.
        p.evict_before = pass_end;
      }
      // Alone, its write would land after backward needs it back (the
      // simulation forwards it), or after its forward pass ends (a point
      // would hold the backward back until it lands): it is kept, and the
      // write goes.
      if (p.evict_before == traces::kNoOp) continue;
    }
    placed.push_back(std::move(p));
  }
  plan.placements = std::move(placed);
  return plan;
}

}  // namespace ssdtrain::sim

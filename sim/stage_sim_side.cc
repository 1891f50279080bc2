// StageSimulator: the ops on side streams, ZeRO-2/3's gathers and
// reduce-scatters and context parallelism's ring steps
// (traces/collective_kind.h; sim/detail/stage_simulator.h, StartSideItem):
// issued in trace order, run one at a time on their link beside compute
// (ZeRO's on the shard group's, the ring's on the cp group's), their readers
// waiting for them.
#include <algorithm>

#include "sim/detail/stage_simulator.h"
#include "traces/collective_kind.h"

namespace ssdtrain::sim::detail {

void StageSimulator::StartSideItem(const WorkItem& item) {
  const traces::Op& op = trace_.op(item.op);
  const size_t index = static_cast<size_t>(item.op);
  for (size_t sid : resolved_.op_inputs[index]) storages_[sid].held = false;
  for (size_t sid : resolved_.rebuild_at[index]) storages_[sid].held = false;
  for (size_t sid : resolved_.op_outputs[index]) {
    Storage& s = storages_[sid];
    if (!s.persistent && !s.resident) Allocate(s);
    s.side_pending = true;
  }
  for (size_t sid : resolved_.op_inputs[index]) {
    Storage& s = storages_[sid];
    --s.pending;
    if (op.phase == Phase::kForward) --s.pending_forward;
  }
  ++next_op_;
  // ZeRO's collectives share the data-parallel link; the cp ring has its own.
  int64_t& free_ns = traces::GroupOfCollective(op) == traces::CollectiveGroup::kContext
                         ? cp_free_ns_
                         : side_free_ns_;
  const int64_t start = std::max(Now(), free_ns);
  free_ns = start + cost_.OpTimeNs(op);
  const Status status = engine_.Schedule(Time::Ns(free_ns - Now()),
                                         [this, item, start] { EndSideItem(item, start); });
  if (!status.ok()) error_ = status;
  for (size_t sid : resolved_.op_inputs[index]) MaybeRelease(storages_[sid]);
}

void StageSimulator::EndSideItem(const WorkItem& item, int64_t start) {
  const traces::Op& op = trace_.op(item.op);
  const size_t index = static_cast<size_t>(item.op);
  const int64_t end = Now();
  AddSpan(traces::Lane::kNetwork, start, end, item.op, -1, op.name);
  result_.side_collective_ns += end - start;
  if (op.phase == Phase::kOptimizer) result_.optimizer_collective_ns += end - start;
  result_.ops[index].start_ns = start;
  result_.ops[index].end_ns = end;
  for (size_t sid : resolved_.op_outputs[index]) {
    Storage& s = storages_[sid];
    s.side_pending = false;
    MaybeRelease(s);
  }
  TryIssue();
}

}  // namespace ssdtrain::sim::detail

// StageSimulator: the ops on side streams, ZeRO-2/3's gathers and
// reduce-scatters and context parallelism's ring steps
// (traces/collective_kind.h; sim/detail/stage_simulator.h, StartSideItem):
// issued in trace order, run one at a time on their link beside compute
// (ZeRO's on the shard group's, the ring's on the cp group's), their readers
// waiting for them; and the compute ops beside them, which run on the SMs the
// collectives leave (the tier's collective_sms, OpCostModel::CollectiveSms).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

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
  // A NCCL collective's kernel holds SMs while it runs (the ring's send/recv
  // steps none: OpCostModel::CollectiveSms).
  if (const int sms = cost_.CollectiveSms(op); free_ns > start && sms > 0) {
    side_running_.push_back(SideRun{start, free_ns, sms});
  }
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

int64_t StageSimulator::OpDurationNs(const traces::Op& op, int64_t start) {
  const int64_t full = cost_.OpTimeNs(op);
  std::erase_if(side_running_, [&](const SideRun& r) { return r.end <= start; });
  if (side_running_.empty()) return full;
  // The op's progress, a share of its work, at 1 / duration a ns, its
  // duration on the SMs the collectives running then leave: piecewise
  // between the collectives' starts and ends.
  std::vector<int64_t>& cuts = side_cuts_;
  cuts.clear();
  for (const SideRun& r : side_running_) {
    if (r.start > start) cuts.push_back(r.start);
    cuts.push_back(r.end);
  }
  std::sort(cuts.begin(), cuts.end());
  std::vector<std::pair<int, int64_t>>& beside = beside_ns_;  // (SMs held, duration)
  beside.assign(1, {0, full});
  const auto duration = [&](int held) {
    for (const auto& [sms, ns] : beside) {
      if (sms == held) return ns;
    }
    beside.emplace_back(held, cost_.OpTimeBesideNs(op, held));
    return beside.back().second;
  };
  double left = 1.0;  // the op's work still to do
  int64_t at = start;
  int64_t end = -1;
  for (const int64_t cut : cuts) {
    int held = 0;
    for (const SideRun& r : side_running_) held += r.start <= at && at < r.end ? r.sms : 0;
    const double rate = 1.0 / static_cast<double>(std::max<int64_t>(1, duration(held)));
    const auto span = static_cast<double>(cut - at);
    if (span * rate >= left) {
      end = at + static_cast<int64_t>(std::ceil(left / rate));
      break;
    }
    left -= span * rate;
    at = cut;
  }
  if (end < 0) end = at + static_cast<int64_t>(std::ceil(left * static_cast<double>(full)));
  result_.collective_sm_ns += std::max<int64_t>(0, end - start - full);
  return end - start;
}

}  // namespace ssdtrain::sim::detail

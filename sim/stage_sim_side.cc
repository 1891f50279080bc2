// StageSimulator: the ops on side streams, ZeRO-2/3's gathers and
// reduce-scatters and context parallelism's ring steps
// (traces/collective_kind.h; sim/detail/stage_simulator.h, StartSideItem):
// issued in trace order, run one at a time on their link beside compute
// (ZeRO's on the shard group's, the ring's on the cp group's), their readers
// waiting for them; and the compute ops beside them, which run on the SMs the
// collectives leave (gpu.collective_sms).
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
  // A NCCL collective's kernel holds SMs while it runs; the ring's send/recv
  // pair does not take compute's (its kernel a single block: NVIDIA/nccl
  // issue 1433, where NCCL's maintainer names memory bandwidth, not SMs, as
  // what it competes for).
  if (free_ns > start && traces::GroupOfCollective(op) != traces::CollectiveGroup::kContext) {
    side_running_.emplace_back(start, free_ns);
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
  std::erase_if(side_running_, [&](const auto& r) { return r.second <= start; });
  if (side_running_.empty() || hw_.gpu.collective_sms <= 0) return full;
  // The op's progress, a share of its work, at 1 / duration(k) a ns while k
  // collectives run: piecewise between the collectives' starts and ends.
  std::vector<int64_t> cuts;
  for (const auto& [from, to] : side_running_) {
    if (from > start) cuts.push_back(from);
    cuts.push_back(to);
  }
  std::sort(cuts.begin(), cuts.end());
  double left = 1.0;  // the op's work still to do
  int64_t at = start;
  std::vector<int64_t> beside(1, full);  // duration with k collectives beside it
  for (const int64_t cut : cuts) {
    int k = 0;
    for (const auto& [from, to] : side_running_) k += from <= at && at < to ? 1 : 0;
    while (static_cast<int>(beside.size()) <= k) {
      beside.push_back(cost_.OpTimeBesideNs(op, static_cast<int>(beside.size())));
    }
    const auto span = static_cast<double>(cut - at);
    const double rate = 1.0 / static_cast<double>(std::max<int64_t>(1, beside[k]));
    if (span * rate >= left) {
      const auto end = at + static_cast<int64_t>(std::ceil(left / rate));
      result_.collective_sm_ns += std::max<int64_t>(0, end - start - full);
      return end - start;
    }
    left -= span * rate;
    at = cut;
  }
  const auto end = at + static_cast<int64_t>(std::ceil(left * static_cast<double>(full)));
  result_.collective_sm_ns += std::max<int64_t>(0, end - start - full);
  return end - start;
}

}  // namespace ssdtrain::sim::detail

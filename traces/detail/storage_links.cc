#include "traces/detail/storage_links.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "traces/collective_kind.h"

namespace ssdtrain::traces::detail {
namespace {

// A ZeRO-3 weight all-gather: (shard, gathered) pairs, input i to output i.
bool ZeroGather(const Op& op) {
  return op.kind == OpKind::kCollective && op.inputs.size() == op.outputs.size() &&
         op.name.ends_with(kZeroAllGatherSuffix);
}

}  // namespace

void PairRegathers(const Trace& trace, StoragePlan& sp) {
  std::map<std::pair<TensorId, int64_t>, int> backward;  // (shard, micro-batch) -> gathered
  for (const Op& op : trace.ops) {
    if (op.phase != Phase::kBackward || !ZeroGather(op)) continue;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      backward.emplace(std::pair{op.inputs[i], op.micro_batch}, sp.IndexOf(op.outputs[i]));
    }
  }
  if (backward.empty()) return;
  for (const Op& op : trace.ops) {
    if (op.phase != Phase::kForward || !ZeroGather(op)) continue;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      auto it = backward.find({op.inputs[i], op.micro_batch});
      if (it != backward.end()) {
        sp.storages[static_cast<size_t>(sp.IndexOf(op.outputs[i]))].regathered = it->second;
      }
    }
  }
}

void ApplyHolds(const Trace& trace, StoragePlan& sp) {
  std::vector<std::pair<size_t, int>> holds;  // (op, storage)
  for (size_t i = 0; i < sp.storages.size(); ++i) {
    StorageInfo& s = sp.storages[i];
    if (s.hold_until == kNoOp) continue;
    holds.emplace_back(static_cast<size_t>(s.hold_until), static_cast<int>(i));
    s.last_use = std::max(s.last_use, s.hold_until);
    if (trace.op(s.hold_until).phase == Phase::kBackward &&
        (s.first_backward_use == kNoOp || s.hold_until < s.first_backward_use)) {
      s.first_backward_use = s.hold_until;
    }
  }
  if (holds.empty()) return;
  const OpLists held = OpLists::Grouped(trace.ops.size(), holds);
  OpLists inputs;
  for (size_t op = 0; op < trace.ops.size(); ++op) {
    for (int i : sp.op_inputs[op]) inputs.Add(i);
    for (int i : held[op]) inputs.AddUnique(i);
    inputs.EndOp();
  }
  sp.op_inputs = std::move(inputs);
}

}  // namespace ssdtrain::traces::detail

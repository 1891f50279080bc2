#include "traces/detail/storage_links.h"

#include <algorithm>
#include <map>
#include <tuple>
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

// A ZeRO-3 copy-out: (gathered buffer, weight copy) pairs, input i to output i.
bool ZeroCopyOut(const Op& op) {
  return op.kind != OpKind::kCollective && op.inputs.size() == op.outputs.size() &&
         op.name.ends_with(kZeroCopyOutSuffix);
}

// A ZeRO-3 gather's cast: (fp32 shard, what the gather sends) pairs.
bool ZeroGatherCast(const Op& op) {
  return op.kind != OpKind::kCollective && op.inputs.size() == op.outputs.size() &&
         op.name.ends_with(kZeroGatherCastSuffix);
}

}  // namespace

void PairRegathers(const Trace& trace, StoragePlan& sp) {
  // Each gathered tensor's shard: a gather's output i is its input i's (or,
  // where a cast made that input, the shard it was cast from); a copy-out's
  // output i is the shard its input i (a gather's output) holds.
  // (shard, micro-batch, copied) -> the backward's gathered storage.
  std::map<TensorId, TensorId> shard_of;
  std::map<std::tuple<TensorId, int64_t, bool>, int> backward;
  std::vector<std::tuple<TensorId, int64_t, bool, int>> forward;  // key, then storage
  for (const Op& op : trace.ops) {
    if (ZeroGatherCast(op)) {  // what a gather sends stands for the shard it is cast from
      for (size_t i = 0; i < op.inputs.size(); ++i) shard_of.emplace(op.outputs[i], op.inputs[i]);
      continue;
    }
    const bool gather = ZeroGather(op), copy = ZeroCopyOut(op);
    if (!gather && !copy) continue;
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      TensorId shard = op.inputs[i];
      auto it = shard_of.find(op.inputs[i]);
      if (it != shard_of.end()) {
        shard = it->second;
      } else if (copy) {
        continue;
      }
      shard_of.emplace(op.outputs[i], shard);
      const int index = sp.IndexOf(op.outputs[i]);
      if (op.phase == Phase::kBackward) {
        backward.emplace(std::tuple{shard, op.micro_batch, copy}, index);
      } else if (op.phase == Phase::kForward) {
        forward.emplace_back(shard, op.micro_batch, copy, index);
      }
    }
  }
  for (const auto& [shard, mb, copy, index] : forward) {
    auto it = backward.find({shard, mb, copy});
    if (it != backward.end()) sp.storages[static_cast<size_t>(index)].regathered = it->second;
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

#include "traces/detail/storage_points.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

namespace ssdtrain::traces::detail {
namespace {

// Each micro-batch's first backward op: where an eviction point in that
// micro-batch's backward takes effect (storage_plan.h, "Memory").
std::map<int, OpId> ForwardPassEnds(const Trace& trace) {
  std::map<int, OpId> out;
  for (const Op& op : trace.ops) {
    if (op.phase == Phase::kBackward) out.emplace(op.micro_batch, op.id);
  }
  return out;
}

}  // namespace

Status ResolveRebuildPoints(const Trace& trace, const std::vector<int64_t>& placed_at,
                            const std::string& source, StoragePlan& sp) {
  std::vector<std::tuple<OpId, OpId, int>> points;  // (op, producer, storage)
  for (size_t i = 0; i < sp.storages.size(); ++i) {
    const StorageInfo& s = sp.storages[i];
    if (s.action != TensorAction::kRecompute || s.rebuild_before == kNoOp) continue;
    if (s.rebuild_before <= s.last_forward_use ||
        (s.first_backward_use != kNoOp && s.rebuild_before > s.first_backward_use)) {
      return Status::InvalidArgument(
          source + ": placements[" + std::to_string(placed_at[static_cast<size_t>(s.placed_by)]) +
          "].prefetch_before: op " + std::to_string(s.rebuild_before) + " must come after tensor " +
          std::to_string(s.placed_by) + "'s last forward use (op " +
          std::to_string(s.last_forward_use) + ")" +
          (s.first_backward_use != kNoOp ? " and at or before its first backward use (op " +
                                               std::to_string(s.first_backward_use) + ")"
                                         : ""));
    }
    points.emplace_back(s.rebuild_before, s.producer, static_cast<int>(i));
  }
  std::sort(points.begin(), points.end());
  std::vector<std::pair<size_t, int>> pairs;
  pairs.reserve(points.size());
  for (const auto& [op, producer, index] : points)
    pairs.emplace_back(static_cast<size_t>(op), index);
  sp.rebuild_at = OpLists::Grouped(trace.ops.size(), pairs);
  ResolveReruns(trace, sp);
  return Status::Ok();
}

void ResolveReruns(const Trace& trace, StoragePlan& sp) {
  for (StorageInfo& s : sp.storages) s.rerun_until = kNoOp;
  // Without a recomputed storage nothing an op reads is gone when it runs
  // (a temporary's uses end before it goes; the rest stay, or are read back):
  // no re-run.
  if (std::none_of(sp.storages.begin(), sp.storages.end(),
                   [](const StorageInfo& s) { return s.action == TensorAction::kRecompute; })) {
    sp.rerun_keep = OpLists::Grouped(trace.ops.size(), {});
    return;
  }
  std::vector<OpId> rebuilt_at(sp.storages.size(), kNoOp);  // the op whose re-run rebuilt it
  std::vector<bool> ran(trace.ops.size(), false);
  // Gone when op `at` is issued, had no re-run rebuilt it: a recomputed
  // storage after its last forward use, any other after its last use; not
  // what stays all step, is read back, is held, or the backward's gather
  // serves.
  const auto gone = [&](int i, OpId at) {
    const StorageInfo& g = sp.storages[static_cast<size_t>(i)];
    if (g.persistent() || g.offloaded() || g.hold_until >= at || at <= g.producer) return false;
    if (RegatheredAt(sp, i, at) >= 0) return false;
    if (g.action == TensorAction::kRecompute) return at > g.last_forward_use;
    return g.last_use < at;
  };
  const auto needed = [&](int i, OpId at) {
    return rebuilt_at[static_cast<size_t>(i)] == kNoOp && gone(i, at);
  };
  std::vector<std::pair<size_t, int>> keeps;  // (the op whose re-run rebuilt it, storage)
  std::vector<int> stack;
  std::vector<OpId> ops;  // what the re-run at one op runs
  for (size_t a = 0; a < trace.ops.size(); ++a) {
    const auto at = static_cast<OpId>(a);
    stack.clear();
    for (int i : sp.rebuild_at[a]) {
      if (needed(i, at)) stack.push_back(i);
    }
    for (int i : sp.op_inputs[a]) {
      if (needed(i, at)) stack.push_back(i);
    }
    if (stack.empty()) continue;
    ops.clear();
    while (!stack.empty()) {
      const StorageInfo& s = sp.storages[static_cast<size_t>(stack.back())];
      stack.pop_back();
      if (s.producer == kNoOp) continue;
      // Its producer, then the ops that wrote it in place after it.
      const auto run = [&](OpId op) {
        if (ran[static_cast<size_t>(op)]) return;
        ran[static_cast<size_t>(op)] = true;
        ops.push_back(op);
        for (int j : sp.op_inputs[static_cast<size_t>(op)]) {
          if (needed(j, at)) stack.push_back(j);
        }
      };
      if (ran[static_cast<size_t>(s.producer)]) continue;
      for (OpId op : s.RerunOps()) run(op);
    }
    for (OpId p : ops) {
      for (int j : sp.op_outputs[static_cast<size_t>(p)]) {
        if (needed(j, at)) rebuilt_at[static_cast<size_t>(j)] = at;
      }
    }
    for (OpId p : ops) {
      for (int j : sp.op_inputs[static_cast<size_t>(p)]) {
        const OpId from = rebuilt_at[static_cast<size_t>(j)];
        if (from == kNoOp) continue;
        keeps.emplace_back(static_cast<size_t>(from), j);
        OpId& until = sp.storages[static_cast<size_t>(j)].rerun_until;
        until = std::max(until, at);
      }
    }
  }
  sp.rerun_keep = OpLists::Grouped(trace.ops.size(), keeps);
}

Status ResolveMovePoints(const Trace& trace, const std::vector<int64_t>& placed_at,
                         const std::string& source, StoragePlan& sp) {
  std::vector<std::pair<size_t, int>> prefetches, evictions;  // (op, storage)
  std::map<int, OpId> pass_end;  // built at the first eviction point (most plans have none)
  for (size_t i = 0; i < sp.storages.size(); ++i) {
    StorageInfo& s = sp.storages[i];
    if (s.offloaded() && s.prefetch_before != kNoOp) {
      prefetches.emplace_back(static_cast<size_t>(s.prefetch_before), static_cast<int>(i));
    }
    if (s.offloaded() && s.evict_before != kNoOp) {
      if (pass_end.empty()) pass_end = ForwardPassEnds(trace);
      // A point in its own micro-batch's backward is the end of that forward pass.
      const int mb = trace.tensor(s.root).micro_batch;
      const Op& at = trace.op(s.evict_before);
      if (at.phase == Phase::kBackward && at.micro_batch == mb) {
        s.evict_before = pass_end.at(mb);
      }
      // After the last forward use, before backward needs it back (or at the pass end).
      const OpId backward = s.prefetch_before != kNoOp && (s.first_backward_use == kNoOp ||
                                                           s.prefetch_before < s.first_backward_use)
                                ? s.prefetch_before
                                : s.first_backward_use;
      const bool at_pass_end = pass_end.count(mb) && s.evict_before == pass_end.at(mb);
      if (s.evict_before <= s.last_forward_use ||
          (backward != kNoOp && s.evict_before >= backward && !at_pass_end)) {
        return Status::InvalidArgument(
            source + ": placements[" + std::to_string(placed_at[static_cast<size_t>(s.placed_by)]) +
            "].evict_before: op " + std::to_string(s.evict_before) + " must come after tensor " +
            std::to_string(s.placed_by) + "'s last forward use (op " +
            std::to_string(s.last_forward_use) + ")" +
            (backward != kNoOp ? " and before op " + std::to_string(backward) +
                                     " (its prefetch point or first backward use)"
                               : ""));
      }
      evictions.emplace_back(static_cast<size_t>(s.evict_before), static_cast<int>(i));
    }
  }
  sp.prefetch_at = OpLists::Grouped(trace.ops.size(), prefetches);
  sp.evict_at = OpLists::Grouped(trace.ops.size(), evictions);
  return Status::Ok();
}

}  // namespace ssdtrain::traces::detail

#include "exec/detail/lifetimes.h"

#include <algorithm>
#include <map>
#include <set>

namespace ssdtrain::exec::detail {

std::vector<StorageLife> ComputeLifetimes(const traces::Trace& trace) {
  std::vector<StorageLife> lives(trace.tensors.size());
  for (const traces::Tensor& t : trace.tensors) {
    const traces::TensorId s = trace.StorageOf(t.id);
    StorageLife& life = lives[static_cast<size_t>(s)];
    if (s == t.id) {
      life.is_root = true;
      life.persistent = t.producer == traces::kNoOp;
      life.activation = t.kind == traces::TensorKind::kActivation;
      life.bytes = t.bytes;
      life.producer = t.producer;
    }
  }
  auto touch = [&](traces::TensorId t, const traces::Op& op) {
    StorageLife& life = lives[static_cast<size_t>(trace.StorageOf(t))];
    life.last_use = std::max(life.last_use, op.id);
    if (op.phase == traces::Phase::kForward) {
      life.last_forward_use = std::max(life.last_forward_use, op.id);
    } else if (life.first_backward_use == traces::kNoOp) {
      life.first_backward_use = op.id;
    }
  };
  for (const traces::Op& op : trace.ops) {
    for (traces::TensorId t : op.inputs) touch(t, op);
    for (traces::TensorId t : op.outputs) touch(t, op);
  }
  return lives;
}

PlannedPeaks ComputePlannedPeaks(const traces::Trace& trace, const traces::Plan& plan,
                                 const std::vector<StorageLife>& lives) {
  std::map<traces::TensorId, const traces::Placement*> placements;
  for (const traces::Placement& p : plan.placements) {
    placements.emplace(trace.StorageOf(p.tensor), &p);
  }
  auto action = [&](traces::TensorId s) {
    auto it = placements.find(s);
    return it == placements.end() ? traces::TensorAction::kKeep : it->second->action;
  };
  PlannedPeaks peaks;
  int64_t persistent = 0;
  for (size_t i = 0; i < lives.size(); ++i) {
    if (lives[i].is_root && lives[i].persistent) persistent += lives[i].bytes;
  }
  std::set<traces::TensorId> resident;
  int64_t activation = 0, total = persistent;
  auto add = [&](traces::TensorId s) {
    if (!resident.insert(s).second) return;
    total += lives[static_cast<size_t>(s)].bytes;
    if (lives[static_cast<size_t>(s)].activation) activation += lives[static_cast<size_t>(s)].bytes;
  };
  auto remove = [&](traces::TensorId s) {
    if (resident.erase(s) == 0) return;
    total -= lives[static_cast<size_t>(s)].bytes;
    if (lives[static_cast<size_t>(s)].activation) activation -= lives[static_cast<size_t>(s)].bytes;
  };
  auto offloaded = [](traces::TensorAction a) {
    return a == traces::TensorAction::kOffloadSsd || a == traces::TensorAction::kOffloadHost;
  };
  for (const auto& [s, p] : placements) {
    if (p->action == traces::TensorAction::kOffloadSsd) peaks.offloaded_bytes += lives[s].bytes;
    if (p->action == traces::TensorAction::kOffloadHost) peaks.host_bytes += lives[s].bytes;
  }
  for (const traces::Op& op : trace.ops) {
    // Reads at their prefetch point; everything the op touches is resident.
    for (const auto& [s, p] : placements) {
      if (offloaded(p->action) && p->prefetch_before == op.id) add(s);
    }
    std::set<traces::TensorId> touched;
    for (traces::TensorId t : op.inputs) touched.insert(trace.StorageOf(t));
    for (traces::TensorId t : op.outputs) touched.insert(trace.StorageOf(t));
    for (traces::TensorId s : touched) {
      if (!lives[static_cast<size_t>(s)].persistent) add(s);
    }
    if (activation > peaks.activation_bytes) {
      peaks.activation_bytes = activation;
      peaks.device_bytes = total;
    }
    peaks.device_bytes = std::max(peaks.device_bytes, total);
    for (traces::TensorId s : touched) {
      const StorageLife& life = lives[static_cast<size_t>(s)];
      if (life.persistent) continue;
      const traces::TensorAction a = action(s);
      if (life.last_use == op.id) {
        remove(s);
      } else if (life.last_forward_use == op.id && op.phase == traces::Phase::kForward &&
                 (offloaded(a) || a == traces::TensorAction::kRecompute)) {
        remove(s);  // copied out and evicted at once / dropped until recomputed
      }
    }
  }
  return peaks;
}

}  // namespace ssdtrain::exec::detail

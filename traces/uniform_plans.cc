#include "traces/uniform_plans.h"

#include <algorithm>
#include <map>
#include <utility>

#include "traces/prefetch.h"
#include "traces/storage_plan.h"

namespace ssdtrain::traces {

std::vector<TensorId> OffloadCandidates(const Trace& trace, int64_t min_bytes) {
  std::map<TensorId, TensorId> by_storage;  // root -> representative
  for (const Tensor& t : trace.tensors) {
    if (!t.saved_for_backward || !t.offloadable || t.kind != TensorKind::kActivation ||
        t.layer == kNoLayer) {
      continue;
    }
    const TensorId root = trace.StorageOf(t.id);
    const Tensor& storage = trace.tensor(root);
    if (IsPersistent(trace, storage) || storage.bytes < min_bytes) continue;
    auto it = by_storage.find(root);
    if (it == by_storage.end() || t.id == root) by_storage[root] = t.id;
  }
  std::vector<TensorId> out;
  out.reserve(by_storage.size());
  for (const auto& [root, rep] : by_storage) out.push_back(rep);
  std::sort(out.begin(), out.end());
  return out;
}

Placement SsdPlacement(const Trace& trace, TensorId t, OpId prefetch_before) {
  Placement p;
  p.tensor = t;
  p.action = TensorAction::kOffloadSsd;
  p.prefetch_before = prefetch_before;
  p.file = OffloadFileName(trace.StorageOf(t));
  return p;
}

Plan KeepAllPlan(const Trace& trace, Plan layout) {
  layout.policy = "keep";
  layout.model = trace.header.model;
  layout.trace_fingerprint = Fingerprint(trace);
  layout.placements.clear();
  layout.prediction.reset();
  return layout;
}

Plan KeepAllPlan(const Trace& trace) { return KeepAllPlan(trace, PlanTemplate(trace)); }

Plan OffloadAllPlan(const Trace& trace, Plan layout, const OffloadAllOptions& options) {
  Plan plan = KeepAllPlan(trace, std::move(layout));
  plan.policy = "offload-ssd";
  const std::vector<OpId> prefetch =
      LookaheadPrefetchOps(trace, options.prefetch_lookahead_modules);
  for (TensorId t : OffloadCandidates(trace, options.min_bytes)) {
    plan.placements.push_back(SsdPlacement(trace, t, prefetch[static_cast<size_t>(t)]));
  }
  return plan;
}

Plan OffloadAllPlan(const Trace& trace, const OffloadAllOptions& options) {
  return OffloadAllPlan(trace, PlanTemplate(trace), options);
}

}  // namespace ssdtrain::traces

#include "traces/summary.h"

#include <map>

namespace ssdtrain::traces {

TraceSummary Summarize(const Trace& trace) {
  std::map<int, LayerSummary> by_layer;  // ordered: kNoLayer (-1) first
  std::vector<bool> counted(trace.tensors.size(), false);
  TraceSummary s;
  s.tensors = static_cast<int64_t>(trace.tensors.size());
  for (const Tensor& t : trace.tensors) {
    if (t.kind == TensorKind::kWeight && !t.alias_of) s.weight_bytes += t.bytes;
    if (!t.saved_for_backward || t.kind != TensorKind::kActivation) continue;
    const TensorId root = trace.StorageOf(t.id);
    if (counted[static_cast<size_t>(root)]) continue;
    counted[static_cast<size_t>(root)] = true;
    const Tensor& storage = trace.tensor(root);
    LayerSummary& l = by_layer[storage.layer];
    l.layer = storage.layer;
    l.saved_bytes += storage.bytes;
    if (t.offloadable) l.offloadable_bytes += storage.bytes;
  }
  for (const Op& op : trace.ops) {
    LayerSummary& l = by_layer[op.layer];
    l.layer = op.layer;
    ++l.ops;
    if (op.phase == Phase::kForward) l.forward_flops += op.flops;
    if (op.phase == Phase::kBackward) l.backward_flops += op.flops;
  }
  for (const auto& [layer, l] : by_layer) {
    s.layers.push_back(l);
    s.total.ops += l.ops;
    s.total.saved_bytes += l.saved_bytes;
    s.total.offloadable_bytes += l.offloadable_bytes;
    s.total.forward_flops += l.forward_flops;
    s.total.backward_flops += l.backward_flops;
  }
  return s;
}

}  // namespace ssdtrain::traces

#include <algorithm>
#include <map>

#include "sim/op_cost.h"
#include "sim/policy.h"

namespace ssdtrain::sim {
namespace {

using traces::OpKind;
using traces::Phase;
using traces::Placement;
using traces::TensorAction;
using traces::TensorId;

bool Movable(const traces::Tensor& t) {
  return t.saved_for_backward && t.offloadable && t.kind == traces::TensorKind::kActivation &&
         t.producer != traces::kNoOp && t.layer != traces::kNoLayer;
}

// One representative per storage: the root when it qualifies, else the lowest
// qualifying alias.
std::vector<TensorId> Representatives(const traces::Trace& trace, int64_t min_bytes) {
  std::map<TensorId, TensorId> by_storage;
  for (const traces::Tensor& t : trace.tensors) {
    if (!Movable(t)) continue;
    const TensorId root = trace.StorageOf(t.id);
    if (trace.tensor(root).bytes < min_bytes) continue;
    auto it = by_storage.find(root);
    if (it == by_storage.end() || t.id == root) by_storage[root] = t.id;
  }
  std::vector<TensorId> out;
  for (const auto& [root, rep] : by_storage) out.push_back(rep);
  std::sort(out.begin(), out.end());
  return out;
}

bool ConsumedOutsideLayer(const traces::Trace& trace, const traces::Tensor& t) {
  for (traces::OpId c : t.consumers) {
    if (trace.op(c).layer != t.layer) return true;
  }
  return false;
}

bool ProducedBy(const traces::Trace& trace, TensorId t, OpKind kind) {
  const traces::OpId p = trace.tensor(trace.StorageOf(t)).producer;
  return p != traces::kNoOp && trace.op(p).kind == kind;
}

bool InAttentionCore(const traces::Trace& trace, const traces::Tensor& t) {
  const traces::Op& producer = trace.op(t.producer);
  if (producer.kind == OpKind::kSoftmax) return true;
  if (producer.kind == OpKind::kDropout) {
    for (TensorId in : producer.inputs) {
      if (ProducedBy(trace, in, OpKind::kSoftmax)) return true;
    }
  }
  if (producer.kind == OpKind::kGemm) {
    for (traces::OpId c : t.consumers) {
      if (trace.op(c).kind == OpKind::kSoftmax) return true;
    }
  }
  return false;
}

Placement Offload(const traces::Trace& trace, TensorId t, TensorAction action,
                  const PolicyOptions& options) {
  Placement p;
  p.tensor = t;
  p.action = action;
  p.prefetch_before =
      LookaheadPrefetchOp(trace, trace.tensor(t).layer, options.prefetch_lookahead_layers);
  if (action == TensorAction::kOffloadSsd) p.file = OffloadFileName(t);
  return p;
}

}  // namespace

std::string OffloadFileName(TensorId t) {
  // Appended piecewise: GCC 12 warns (-Wrestrict) on "lit" + std::string + "lit".
  std::string name = "t";
  name += std::to_string(t);
  name += ".bin";
  return name;
}

traces::Plan BasePlan(const traces::Trace& trace) {
  traces::Plan plan;
  plan.model = trace.header.model;
  plan.trace_fingerprint = traces::Fingerprint(trace);
  plan.micro_batch = std::max<int64_t>(1, trace.header.micro_batch);
  plan.seq_len = trace.header.seq_len;
  plan.tp = std::max<int64_t>(1, trace.header.tp);
  plan.pp = std::max<int64_t>(1, trace.header.pp);
  return plan;
}

std::vector<TensorId> OffloadCandidates(const traces::Trace& trace, const PolicyOptions& options) {
  return Representatives(trace, options.min_offload_bytes);
}

traces::OpId LookaheadPrefetchOp(const traces::Trace& trace, int layer, int lookahead) {
  std::map<int, traces::OpId> first_backward;
  traces::OpId first_any = traces::kNoOp;
  for (const traces::Op& op : trace.ops) {
    if (op.phase != Phase::kBackward) continue;
    if (first_any == traces::kNoOp) first_any = op.id;
    if (op.layer != traces::kNoLayer && !first_backward.count(op.layer)) {
      first_backward[op.layer] = op.id;
    }
  }
  // The highest layer <= layer + lookahead that has backward ops.
  auto it = first_backward.upper_bound(layer + lookahead);
  if (it == first_backward.begin()) return first_any;
  --it;
  if (it->first == layer + lookahead) return it->second;
  // Fewer than `lookahead` layers above: prefetch when backward begins.
  return first_any;
}

int AdaptiveFirstKeptLayer(const traces::Trace& trace, const HardwareOptions& hw,
                           const PolicyOptions& options) {
  const int gpu = options.gpu >= 0 ? options.gpu : SlowestArray(hw);
  const ArrayFigures array = ArrayFor(hw, gpu);
  double write_GBps = std::min(array.write_GBps, hw.host_link.d2h_GBps);
  if (!hw.storage.gds) write_GBps = std::min(write_GBps, hw.host_memory.bandwidth_GBps / 2);
  const double write_Bps = write_GBps * 1e9;
  OpCostModel cost(hw, std::max<int64_t>(1, trace.header.tp), trace.header.dtype);
  std::map<int, double> layer_seconds, layer_bytes;
  double forward_seconds = 0;
  for (const traces::Op& op : trace.ops) {
    if (op.phase != Phase::kForward) continue;
    const double s = static_cast<double>(cost.OpTimeNs(op)) * 1e-9;
    forward_seconds += s;
    if (op.layer != traces::kNoLayer) layer_seconds[op.layer] += s;
  }
  for (TensorId t : Representatives(trace, options.min_offload_bytes)) {
    layer_bytes[trace.tensor(t).layer] +=
        static_cast<double>(trace.tensor(trace.StorageOf(t)).bytes);
  }
  // SSDTrain (FlashTrain tensor_cache.py, solve_num_adaptive_keep_layers): keep
  // layer n and all later ones once (Σ_{p<n} bytes_p + 2·bytes_n) /
  // (3·T_fwd − 2·Σ_{p<n} T_p) > B_write (backward assumed 2× forward).
  double bytes_before = 0, seconds_before = 0;
  int last_layer = -1;
  for (const auto& [layer, seconds] : layer_seconds) {
    const double bytes = layer_bytes.count(layer) ? layer_bytes[layer] : 0;
    const double window = 3 * forward_seconds - 2 * seconds_before;
    if (window <= 0 || (bytes_before + 2 * bytes) / window > write_Bps) return layer;
    bytes_before += bytes;
    seconds_before += seconds;
    last_layer = layer;
  }
  return last_layer + 1;
}

Result<traces::Plan> MakeFixedPlan(std::string_view policy, const traces::Trace& trace,
                                   const HardwareOptions& hw, const traces::Plan& base,
                                   const PolicyOptions& options) {
  traces::Plan plan = base;
  plan.policy = std::string(policy);
  plan.model = trace.header.model;
  plan.trace_fingerprint = traces::Fingerprint(trace);
  plan.placements.clear();
  plan.prediction.reset();
  if (policy == "keep") return plan;
  if (policy == "recompute-full" || policy == "recompute-selective") {
    const bool full = policy == "recompute-full";
    for (TensorId t : Representatives(trace, 0)) {
      const traces::Tensor& tensor = trace.tensor(t);
      if (trace.op(tensor.producer).layer != tensor.layer) continue;
      if (ConsumedOutsideLayer(trace, tensor)) continue;  // the block's output: next input
      if (!full && !InAttentionCore(trace, tensor)) continue;
      plan.placements.push_back(Placement{t, TensorAction::kRecompute, traces::kNoOp, "", 0, 0});
    }
    return plan;
  }
  const std::vector<TensorId> candidates = Representatives(trace, options.min_offload_bytes);
  if (policy == "offload-ssd") {
    for (TensorId t : candidates) {
      plan.placements.push_back(Offload(trace, t, TensorAction::kOffloadSsd, options));
    }
    return plan;
  }
  if (policy == "offload-host") {
    int64_t budget = HostPinnedBytes(hw);
    for (TensorId t : candidates) {
      const int64_t bytes = trace.tensor(trace.StorageOf(t)).bytes;
      if (bytes > budget) break;  // in forward order: the earliest layers go to the host
      budget -= bytes;
      plan.placements.push_back(Offload(trace, t, TensorAction::kOffloadHost, options));
    }
    return plan;
  }
  if (policy == "ssdtrain") {
    const int first_kept = AdaptiveFirstKeptLayer(trace, hw, options);
    for (TensorId t : candidates) {
      if (trace.tensor(t).layer >= first_kept) continue;
      plan.placements.push_back(Offload(trace, t, TensorAction::kOffloadSsd, options));
    }
    return plan;
  }
  return Status::InvalidArgument(
      "policy: expected keep, recompute-full, recompute-selective, offload-host, offload-ssd, "
      "ssdtrain, optimal or auto, got \"" +
      std::string(policy) + "\"");
}

}  // namespace ssdtrain::sim

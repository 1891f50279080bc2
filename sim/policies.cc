#include <algorithm>
#include <climits>
#include <map>
#include <string>

#include "sim/op_cost.h"
#include "sim/policy.h"
#include "traces/storage_plan.h"

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

Placement Offload(const std::vector<traces::OpId>& prefetch, TensorId t, TensorAction action) {
  Placement p;
  p.tensor = t;
  p.action = action;
  p.prefetch_before = prefetch[static_cast<size_t>(t)];
  if (action == TensorAction::kOffloadSsd) p.file = traces::OffloadFileName(t);
  return p;
}

}  // namespace

traces::Plan BasePlan(const traces::Trace& trace) {
  return traces::PlanTemplate(trace, /*policy=*/"");  // the policy that fills it names it
}

std::vector<TensorId> OffloadCandidates(const traces::Trace& trace, const PolicyOptions& options) {
  return Representatives(trace, options.min_offload_bytes);
}

std::vector<traces::OpId> LookaheadPrefetchOps(const traces::Trace& trace, int lookahead) {
  // Modules, as FlashTrain hooks them: Megatron's leaf nn.Modules are the
  // linear layers, the attention core and the norms; elementwise functions
  // (GeLU, bias-dropout-add) are fused into them. A backward op belongs to the
  // forward op whose name prefixes its own ("L2.fc2" -> "L2.fc2.dgrad",
  // "L2.fc2.wgrad"); the module of a forward elementwise op is the previous
  // module-kind forward op. `modules` holds, in backward order, the first
  // backward op of each module that consumes saved activations.
  std::map<std::string, int> module_of_forward;  // forward op name -> module index
  int module = -1;
  for (const traces::Op& op : trace.ops) {
    if (op.phase != Phase::kForward) continue;
    if (op.kind == OpKind::kGemm || op.kind == OpKind::kAttention || op.kind == OpKind::kNorm ||
        module < 0) {
      ++module;
    }
    module_of_forward[op.name] = module;
  }
  auto module_of = [&](const traces::Op& op) {
    std::string name = op.name;
    while (true) {
      const size_t dot = name.rfind('.');
      if (dot == std::string::npos) return -1 - static_cast<int>(op.id);  // its own module
      name.resize(dot);
      auto it = module_of_forward.find(name);
      if (it != module_of_forward.end()) return it->second;
    }
  };
  std::vector<traces::OpId> modules;
  int last_module = INT32_MIN;
  for (const traces::Op& op : trace.ops) {
    if (op.phase != Phase::kBackward) continue;
    bool saved = false;
    for (TensorId in : op.inputs) {
      const traces::Tensor& x = trace.tensor(in);
      saved = saved || (x.saved_for_backward && x.kind == traces::TensorKind::kActivation);
    }
    if (!saved) continue;
    const int m = module_of(op);
    if (m != last_module) modules.push_back(op.id);
    last_module = m;
  }
  // First backward consumer per storage root.
  const size_t n = trace.tensors.size();
  std::vector<traces::OpId> first(n, traces::kNoOp);
  for (const traces::Tensor& x : trace.tensors) {
    const auto root = static_cast<size_t>(trace.StorageOf(x.id));
    for (traces::OpId c : x.consumers) {
      if (trace.op(c).phase == Phase::kBackward &&
          (first[root] == traces::kNoOp || c < first[root])) {
        first[root] = c;
      }
    }
  }
  std::vector<traces::OpId> out(n, traces::kNoOp);
  for (size_t t = 0; t < n; ++t) {
    const traces::OpId f = first[static_cast<size_t>(trace.StorageOf(static_cast<TensorId>(t)))];
    if (f == traces::kNoOp) continue;
    if (modules.empty()) {
      out[t] = f;
      continue;
    }
    // The module holding f: the last module start at or before it.
    const auto index = static_cast<int64_t>(std::upper_bound(modules.begin(), modules.end(), f) -
                                            modules.begin()) -
                       1;
    out[t] = modules[static_cast<size_t>(std::max<int64_t>(0, index - lookahead))];
  }
  return out;
}

traces::OpId LookaheadPrefetchOp(const traces::Trace& trace, TensorId t, int lookahead) {
  return LookaheadPrefetchOps(trace, lookahead)[static_cast<size_t>(t)];
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
  const std::vector<traces::OpId> prefetch =
      LookaheadPrefetchOps(trace, options.prefetch_lookahead_modules);
  if (policy == "offload-ssd") {
    for (TensorId t : candidates) {
      plan.placements.push_back(Offload(prefetch, t, TensorAction::kOffloadSsd));
    }
    return plan;
  }
  if (policy == "offload-host") {
    int64_t budget = options.allow_host_offload ? HostPinnedBytes(hw) : 0;
    for (TensorId t : candidates) {
      const int64_t bytes = trace.tensor(trace.StorageOf(t)).bytes;
      if (bytes > budget) break;  // in forward order: the earliest layers go to the host
      budget -= bytes;
      plan.placements.push_back(Offload(prefetch, t, TensorAction::kOffloadHost));
    }
    return plan;
  }
  if (policy == "ssdtrain-paper") return MakeSsdtrainPaperPlan(trace, hw, plan, options);
  if (policy == "ssdtrain") {
    const int first_kept = AdaptiveFirstKeptLayer(trace, hw, options);
    for (TensorId t : candidates) {
      if (trace.tensor(t).layer >= first_kept) continue;
      plan.placements.push_back(Offload(prefetch, t, TensorAction::kOffloadSsd));
    }
    return plan;
  }
  return Status::InvalidArgument(
      "policy: expected keep, recompute-full, recompute-selective, offload-host, offload-ssd, "
      "ssdtrain, ssdtrain-paper, optimal or auto, got \"" +
      std::string(policy) + "\"");
}

}  // namespace ssdtrain::sim

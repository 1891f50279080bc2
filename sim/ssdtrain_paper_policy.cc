// The `ssdtrain-paper` policy: which activations the SSDTrain paper (arXiv
// 2408.10013 v3 §III-B/C, Algorithm 1: the tensor cache's pack hook, the
// adaptive keep, order-based prefetch) offloads, as its own code decides it
// (K-Wu/FlashTrain, flashtrain/tensor_cache/tensor_cache.py and scope_tree.py),
// rule by rule, on our traces. policy.h lists the rules; each is cited where
// applied. Deduplication by storage and forwarding of tensors still being
// stored (§III-C) are the simulator's, as for every policy (stage_sim.h).
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sim/op_cost.h"
#include "sim/policy.h"
#include "traces/prefetch.h"
#include "traces/storage_plan.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::sim {
namespace {

using traces::OpId;
using traces::OpKind;
using traces::Phase;
using traces::TensorId;

// tensor_cache.py, pack_hook: "Skip small tensors": math.prod(tensor.size()) < 8 * 1024 * 1024.
constexpr int64_t kPaperMinOffloadElements = 8 * 1024 * 1024;
// solve_num_adaptive_keep_layers assumes backward takes twice the forward time:
// the writes and the first reload must fit in 3·T_fwd − 2·Σ T_previous.
constexpr double kForwardPlusBackward = 3.0;
constexpr double kBackwardOverForward = 2.0;

int64_t Elements(const traces::Tensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  return n;
}

// Name of an op inside its block, without the "L<n>." prefix.
std::string_view LocalName(const traces::Op& op) {
  std::string_view name = op.name;
  if (op.layer != traces::kNoLayer && !name.empty() && name[0] == 'L') {
    const size_t dot = name.find('.');
    if (dot != std::string_view::npos) name.remove_prefix(dot + 1);
  }
  return name;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The scopes FlashTrain tracks inside a block (adaptive_keep_layer_names_in_track:
// ParallelTransformerLayer, ParallelAttention, ParallelMLP). Megatron's layer
// runs its norms and bias-dropout-adds itself (scope kLayer); ParallelAttention
// holds QKV, the core attention and the output projection (the decoder's
// inter-attention is a second ParallelAttention); ParallelMLP fc1, the
// activation and fc2. Our block builder names its ops after these parts
// (models/detail/block.cc).
enum class Scope { kLayer = 0, kSelfAttention = 1, kCrossAttention = 2, kMlp = 3 };
constexpr int kScopes = 4;

Scope ScopeOf(const traces::Op& op) {
  const std::string_view n = LocalName(op);
  for (std::string_view p : {"qkv", "rotary", "attn.", "proj"}) {
    if (StartsWith(n, p)) return Scope::kSelfAttention;
  }
  for (std::string_view p : {"cross_q", "cross_kv", "cross_attn.", "cross_proj"}) {
    if (StartsWith(n, p)) return Scope::kCrossAttention;
  }
  for (std::string_view p : {"fc1", "fc2", "gelu", "relu", "swiglu"}) {
    if (StartsWith(n, p)) return Scope::kMlp;
  }
  return Scope::kLayer;
}

// FlashTrain's ignored scopes outside the blocks: "Loss", "Model" (the logits
// GPTModel computes itself) and everything under "LMHead" (BERT's MLM head).
bool InIgnoredHeadScope(const traces::Op& op) {
  if (op.layer != traces::kNoLayer) return false;
  const std::string_view n = op.name;
  return StartsWith(n, "lm_head") || StartsWith(n, "mlm.") || StartsWith(n, "loss") ||
         StartsWith(n, "logits");
}

bool IsModuleStart(const traces::Op& op) {
  return op.kind == OpKind::kGemm || op.kind == OpKind::kAttention || op.kind == OpKind::kNorm;
}

// The op at which the pack hook sees a storage: the first forward op that
// reads it (autograd saves an op's inputs when it runs), else its producer
// (an output the producer saves itself, e.g. flash attention's log-sum-exp).
std::vector<OpId> PackOps(const traces::Trace& trace) {
  std::vector<OpId> pack(trace.tensors.size(), traces::kNoOp);
  for (const traces::Op& op : trace.ops) {
    if (op.phase != Phase::kForward) continue;
    for (TensorId in : op.inputs) {
      const auto root = static_cast<size_t>(trace.StorageOf(in));
      if (pack[root] == traces::kNoOp) pack[root] = op.id;
    }
  }
  for (const traces::Tensor& t : trace.tensors) {
    const auto root = static_cast<size_t>(trace.StorageOf(t.id));
    if (pack[root] == traces::kNoOp && t.producer != traces::kNoOp) pack[root] = t.producer;
  }
  return pack;
}

// The last module of the forward pass outside the ignored scopes, as the op
// range [first, last]: FlashTrain keeps its tensors on the device when its
// backward follows its forward directly ("Skipping the offloading and
// reloading of the last module in the forward pass", tensor_cache.py
// __init__; saved_forward_done_modules_without_ignored[-1]). With one
// micro-batch per step and no pipeline it always does; in a pipeline only on
// the last stage (1F1B runs a micro-batch's backward right after its forward
// there); elsewhere (kNoOp, kNoOp): nothing is kept by this rule.
std::pair<OpId, OpId> LastForwardModule(const traces::Trace& trace) {
  OpId first = traces::kNoOp, last = traces::kNoOp;
  if (trace.header.stage != trace.header.pp - 1) return {first, last};
  bool open = false;
  for (const traces::Op& op : trace.ops) {
    if (op.phase != Phase::kForward) continue;
    if (IsModuleStart(op)) {
      open = !InIgnoredHeadScope(op);
      if (open) first = op.id;
    }
    if (open) last = op.id;
  }
  return {first, last};
}

}  // namespace

int64_t PaperStepActivationBytes(const traces::Trace& trace) {
  std::vector<bool> seen(trace.tensors.size(), false);
  int64_t bytes = 0;
  for (const traces::Tensor& t : trace.tensors) {
    if (!t.saved_for_backward || t.kind != traces::TensorKind::kActivation ||
        t.producer == traces::kNoOp) {
      continue;
    }
    const auto root = static_cast<size_t>(trace.StorageOf(t.id));
    if (seen[root]) continue;
    seen[root] = true;
    bytes += trace.tensors[root].bytes;
  }
  return bytes;
}

std::vector<TensorId> PaperOffloadCandidates(const traces::Trace& trace) {
  const std::vector<OpId> pack = PackOps(trace);
  const auto [last_first, last_last] = LastForwardModule(trace);
  std::map<TensorId, TensorId> by_storage;  // root -> representative
  for (const traces::Tensor& t : trace.tensors) {
    // Saved activations only: parameters and inputs are never packed
    // (pack_hook: "tensor_id in self.parameters_and_inputs"), nor are tensors
    // outside the blocks, which the trace does not let move (offloadable: the
    // embedding, final norm, LM head and loss; FlashTrain's "Model", "Loss",
    // "LMHead" scopes); CPU tensors do not exist in a GPU trace.
    if (!t.saved_for_backward || !t.offloadable || t.kind != traces::TensorKind::kActivation ||
        t.producer == traces::kNoOp || t.layer == traces::kNoLayer) {
      continue;
    }
    if (Elements(t) < kPaperMinOffloadElements) continue;
    const TensorId root = trace.StorageOf(t.id);
    const OpId at = pack[static_cast<size_t>(root)];
    if (at == traces::kNoOp) continue;
    if (last_first != traces::kNoOp && at >= last_first && at <= last_last) continue;
    if (InIgnoredHeadScope(trace.op(at))) continue;
    auto it = by_storage.find(root);
    if (it == by_storage.end() || t.id == root) by_storage[root] = t.id;  // dedup by storage
  }
  std::vector<TensorId> out;
  for (const auto& [root, rep] : by_storage) out.push_back(rep);
  std::sort(out.begin(), out.end());
  return out;
}

OpId PaperAdaptiveKeepFrom(const traces::Trace& trace, const HardwareOptions& hw,
                           const PolicyOptions& options) {
  const std::vector<TensorId> candidates = PaperOffloadCandidates(trace);
  const std::vector<OpId> pack = PackOps(trace);
  // Profiled times: the cost model's forward op times (FlashTrain profiles
  // iterations 2..3 with CUDA events; historical_time per tracked scope,
  // historical_compute_time for the whole forward).
  OpCostModel cost(hw, trace.header);
  struct Node {
    double bytes = 0, seconds = 0;
    OpId first_op = traces::kNoOp;
  };
  std::map<int, std::array<Node, kScopes>> layers;  // per block: kLayer is the whole block
  double forward_seconds = 0;
  for (const traces::Op& op : trace.ops) {
    if (op.phase != Phase::kForward) continue;
    const double s = static_cast<double>(cost.OpTimeNs(op)) * 1e-9;
    forward_seconds += s;
    if (op.layer == traces::kNoLayer) continue;
    auto& nodes = layers[op.layer];
    Node& block = nodes[static_cast<size_t>(Scope::kLayer)];
    Node& scope = nodes[static_cast<size_t>(ScopeOf(op))];
    if (block.first_op == traces::kNoOp) block.first_op = op.id;
    if (scope.first_op == traces::kNoOp) scope.first_op = op.id;
    block.seconds += s;  // the block's time covers its sub-modules
    if (&scope != &block) scope.seconds += s;
  }
  // packed_data_size: every tracked scope on the stack at pack time counts the tensor.
  double candidate_bytes = 0;
  for (TensorId t : candidates) {
    const TensorId root = trace.StorageOf(t);
    const double bytes = static_cast<double>(trace.tensor(root).bytes);
    candidate_bytes += bytes;
    const traces::Op& at = trace.op(pack[static_cast<size_t>(root)]);
    if (at.layer == traces::kNoLayer) continue;
    auto& nodes = layers[at.layer];
    nodes[0].bytes += bytes;
    if (ScopeOf(at) != Scope::kLayer) nodes[static_cast<size_t>(ScopeOf(at))].bytes += bytes;
  }
  // The bandwidth: measured_activation_gpu_deduplicated_memory_size /
  // forward_IO_time, i.e. every saved activation of the step (small ones and
  // those outside the blocks included) over the time the profiled forward's
  // writes took, modelled as the offloaded bytes at the array's sustained
  // write rate (capped by PCIe d2h) of the GPU the plan targets.
  const int gpu = options.gpu >= 0 ? options.gpu : SlowestArray(hw);
  double write_GBps = std::min(ArrayFor(hw, gpu).write_GBps, hw.host_link.d2h_GBps);
  if (!hw.storage.gds) write_GBps = std::min(write_GBps, hw.host_memory.bandwidth_GBps / 2);
  const double saved_bytes = static_cast<double>(PaperStepActivationBytes(trace));
  if (candidate_bytes <= 0) return traces::kNoOp;
  const double bandwidth = saved_bytes / (candidate_bytes / (write_GBps * 1e9));
  // solve_num_adaptive_keep_layers: walk the tracked scopes in post-order
  // (each block's attention(s) and MLP, then the block); a node's previous
  // nodes are the earlier blocks and its earlier siblings (ScopeTree
  // get_previous_nodes). The first node whose
  //   (Σ previous bytes + 2·bytes) / (3·T_fwd − 2·Σ previous T) > bandwidth
  // starts the kept region: from its forward pre-hook on, nothing is offloaded.
  double before_bytes = 0, before_seconds = 0;  // earlier blocks
  for (const auto& [layer, nodes] : layers) {
    double sibling_bytes = 0, sibling_seconds = 0;
    for (Scope scope :
         {Scope::kSelfAttention, Scope::kCrossAttention, Scope::kMlp, Scope::kLayer}) {
      const Node& n = nodes[static_cast<size_t>(scope)];
      if (n.first_op == traces::kNoOp) continue;
      const bool block = scope == Scope::kLayer;
      const double prev_bytes = before_bytes + (block ? 0 : sibling_bytes);
      const double prev_seconds = before_seconds + (block ? 0 : sibling_seconds);
      const double window =
          kForwardPlusBackward * forward_seconds - kBackwardOverForward * prev_seconds;
      if (window <= 0 || (prev_bytes + 2 * n.bytes) / window > bandwidth) return n.first_op;
      sibling_bytes += n.bytes;
      sibling_seconds += n.seconds;
    }
    before_bytes += nodes[0].bytes;
    before_seconds += nodes[0].seconds;
  }
  return traces::kNoOp;  // "None needs to be kept in the GPU memory"
}

Result<traces::Plan> MakeSsdtrainPaperPlan(const traces::Trace& trace, const HardwareOptions& hw,
                                           traces::Plan plan, const PolicyOptions& options) {
  const OpId keep_from = PaperAdaptiveKeepFrom(trace, hw, options);
  const std::vector<OpId> pack = PackOps(trace);
  // Prefetch: order-based, two leaf modules ahead in backward
  // (prefetch_num_leaves_per_chunk = 2), as the fixed policies do.
  const std::vector<OpId> prefetch =
      traces::LookaheadPrefetchOps(trace, options.prefetch_lookahead_modules);
  for (TensorId t : PaperOffloadCandidates(trace)) {
    const OpId at = pack[static_cast<size_t>(trace.StorageOf(t))];
    if (keep_from != traces::kNoOp && at >= keep_from) continue;
    plan.placements.push_back(traces::SsdPlacement(trace, t, prefetch[static_cast<size_t>(t)]));
  }
  return plan;
}

}  // namespace ssdtrain::sim

#include "traces/prefetch.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>

namespace ssdtrain::traces {

std::vector<OpId> LookaheadPrefetchOps(const Trace& trace, int lookahead) {
  // Modules, as FlashTrain hooks them: Megatron's leaf nn.Modules are the
  // linear layers, the attention core and the norms; elementwise functions
  // (GeLU, bias-dropout-add) are fused into them. A backward op belongs to the
  // forward op whose name prefixes its own ("L2.fc2" -> "L2.fc2.dgrad",
  // "L2.fc2.wgrad"); the module of a forward elementwise op is the previous
  // module-kind forward op. `modules` holds, in backward order, the first
  // backward op of each module that consumes saved activations.
  std::map<std::string, int> module_of_forward;  // forward op name -> module index
  int module = -1;
  for (const Op& op : trace.ops) {
    if (op.phase != Phase::kForward) continue;
    if (op.kind == OpKind::kGemm || op.kind == OpKind::kAttention || op.kind == OpKind::kNorm ||
        module < 0) {
      ++module;
    }
    module_of_forward[op.name] = module;
  }
  auto module_of = [&](const Op& op) {
    std::string name = op.name;
    while (true) {
      const size_t dot = name.rfind('.');
      if (dot == std::string::npos) return -1 - static_cast<int>(op.id);  // its own module
      name.resize(dot);
      auto it = module_of_forward.find(name);
      if (it != module_of_forward.end()) return it->second;
    }
  };
  std::vector<OpId> modules;
  int last_module = INT32_MIN;
  for (const Op& op : trace.ops) {
    if (op.phase != Phase::kBackward) continue;
    bool saved = false;
    for (TensorId in : op.inputs) {
      const Tensor& x = trace.tensor(in);
      saved = saved || (x.saved_for_backward && x.kind == TensorKind::kActivation);
    }
    if (!saved) continue;
    const int m = module_of(op);
    if (m != last_module) modules.push_back(op.id);
    last_module = m;
  }
  // First backward consumer per storage root.
  const size_t n = trace.tensors.size();
  std::vector<OpId> first(n, kNoOp);
  for (const Tensor& x : trace.tensors) {
    const auto root = static_cast<size_t>(trace.StorageOf(x.id));
    for (OpId c : x.consumers) {
      if (trace.op(c).phase == Phase::kBackward && (first[root] == kNoOp || c < first[root])) {
        first[root] = c;
      }
    }
  }
  std::vector<OpId> out(n, kNoOp);
  for (size_t t = 0; t < n; ++t) {
    const OpId f = first[static_cast<size_t>(trace.StorageOf(static_cast<TensorId>(t)))];
    if (f == kNoOp) continue;
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

OpId LookaheadPrefetchOp(const Trace& trace, TensorId t, int lookahead) {
  return LookaheadPrefetchOps(trace, lookahead)[static_cast<size_t>(t)];
}

}  // namespace ssdtrain::traces

// Per-layer sums over a trace, for the accounting tests.
#pragma once

#include <cstdint>

#include "traces/trace.h"

namespace ssdtrain::models::testing {

struct LayerStats {
  int64_t saved_bytes = 0;        // unique saved activation storage (views add nothing)
  int64_t forward_flops = 0;      // gemm and attention ops
  int64_t backward_flops = 0;     // gemm and attention ops
  int64_t forward_all_flops = 0;  // every forward op
  int64_t attention_forward_flops = 0;
  int64_t attention_backward_flops = 0;
};

inline LayerStats StatsOf(const traces::Trace& trace, int layer) {
  LayerStats s;
  for (const traces::Tensor& t : trace.tensors) {
    if (t.layer == layer && t.kind == traces::TensorKind::kActivation && t.saved_for_backward &&
        !t.alias_of) {
      s.saved_bytes += t.bytes;
    }
  }
  for (const traces::Op& op : trace.ops) {
    if (op.layer != layer) continue;
    const bool model_math =
        op.kind == traces::OpKind::kGemm || op.kind == traces::OpKind::kAttention;
    const bool attention_core = op.kind == traces::OpKind::kAttention ||
                                (op.kind == traces::OpKind::kGemm && op.gemm && op.gemm->batch > 1);
    if (op.phase == traces::Phase::kForward) {
      s.forward_all_flops += op.flops;
      if (model_math) s.forward_flops += op.flops;
      if (attention_core) s.attention_forward_flops += op.flops;
    } else if (op.phase == traces::Phase::kBackward) {
      if (model_math) s.backward_flops += op.flops;
      if (attention_core) s.attention_backward_flops += op.flops;
    }
  }
  return s;
}

}  // namespace ssdtrain::models::testing

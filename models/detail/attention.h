// The attention core between the QKV projections and the output projection:
// standard (QKᵀ gemm, fused scale-mask-softmax, dropout, attention·V gemm) or a
// fused FlashAttention kernel. Grouped-query attention runs as batched gemms over
// the key/value heads (each K/V head serves heads/kv_heads query heads), so K and V
// are never expanded.
#pragma once

#include <string>

#include "models/detail/dims.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

struct AttentionState {
  std::string name;
  TensorId q = kNoTensor, k = kNoTensor, v = kNoTensor;  // read by backward
  TensorId bias = kNoTensor;     // T5's relative position bias [heads, s, s], or none
  TensorId sinks = kNoTensor;    // gpt-oss: the sink logits [heads] (a weight), or none
  TensorId capped = kNoTensor;   // standard with soft-capping: cap·tanh(scores/cap)
  TensorId probs = kNoTensor;    // standard: softmax output
  TensorId mask = kNoTensor;     // standard with dropout: uint8 dropout mask
  TensorId dropped = kNoTensor;  // standard: what the attention·V gemm read
  TensorId ctx = kNoTensor;      // flash: the output, saved by the kernel's backward
  TensorId lse = kNoTensor;      // flash: fp32 log-sum-exp per query row
  bool causal = false;           // the forward's mask (Dims::causal), which backward's kernel keeps
};

// A fused attention kernel's call at sequence length `seq_len`: a causal mask
// where `causal`, else every pair (traces::AttentionCall).
void MarkAttentionCall(TraceBuilder& b, OpId op, int64_t seq_len, traces::AttentionMask mask);

struct AttentionGrads {
  TensorId q = kNoTensor, k = kNoTensor, v = kNoTensor;
};

// q: [s, b, heads·d]; k: [s, b, kv_heads·d]; v: [s, b, kv_heads·dv] (this
// rank's heads; dv = d but for MLA). Returns the context [s, b, heads·dv]. `softcap` (Gemma 2): the
// scores are soft-capped before the softmax; standard attention runs it as its own op and saves its
// output (tanh's backward reads it), FlashAttention inside the kernel (nothing more saved; its few
// FLOPs per score are not counted). `sinks` (gpt-oss): a weight [heads] of sink logits, one per
// head, that joins each softmax's denominator: the fused kernel's (or the standard softmax's)
// input, and its gradient their backward's output.
TensorId AttentionForward(TraceBuilder& b, const Dims& d, bool dropout, const std::string& name,
                          TensorId q, TensorId k, TensorId v, TensorId bias, AttentionState* st,
                          bool softcap = false, TensorId sinks = kNoTensor);
// `*g_bias` is the running gradient of the relative position bias: read and
// replaced when the attention has a bias.
AttentionGrads AttentionBackward(TraceBuilder& b, const Dims& d, const AttentionState& st,
                                 TensorId g_ctx, TensorId* g_bias);

}  // namespace ssdtrain::models::detail

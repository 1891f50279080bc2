#include "models/detail/attention.h"

#include "models/detail/costs.h"
#include "models/detail/ring_attention.h"

namespace ssdtrain::models::detail {
namespace {

// Query heads per key/value head.
int64_t Group(const Dims& d) { return d.heads / d.kv_heads; }

// The running bias gradient: this layer's reduction over the batch plus the
// previous layers' sum, in one op.
std::vector<TensorId> BiasGradInputs(TensorId source, const TensorId* g_bias) {
  std::vector<TensorId> inputs = {source};
  if (*g_bias != kNoTensor) inputs.push_back(*g_bias);
  return inputs;
}

// Flash attention within a window computes only the (query, key) pairs inside it.
// The trace counts a causal attention's FLOPs over all s² pairs (no causal
// halving), so a window's count is that figure times its pairs over the causal
// ones: (w·s − w(w−1)/2) / (s(s+1)/2), which is 1 at w = s.
int64_t WindowedFlops(const Dims& d, int64_t flops) {
  if (d.window == 0 || d.window >= d.s) return flops;
  const __int128 w = d.window, s = d.s;
  const __int128 window_pairs = w * s - w * (w - 1) / 2;
  const __int128 causal_pairs = s * (s + 1) / 2;
  return static_cast<int64_t>(static_cast<__int128>(flops) * window_pairs / causal_pairs);
}

// Flash attention's products per head, s×s each: QKᵀ over the query/key width
// d and P·V over the value width dv (equal but for MLA). Its backward
// recomputes QKᵀ and forms dQ and dK (width d) and dP and dV (width dv): at
// d = dv, kFlashBackwardNum / kFlashBackwardDen of the forward.
int64_t FlashForwardFlops(const Dims& d) { return 2 * d.b * d.heads * d.s * d.s * (d.d + d.dv); }
int64_t FlashBackwardFlops(const Dims& d) {
  return 2 * d.b * d.heads * d.s * d.s * (3 * d.d + 2 * d.dv);
}
static_assert(2 * (3 + 2) * kFlashBackwardDen == 2 * 2 * kFlashBackwardNum,
              "FlashBackwardFlops at d = dv is kFlashBackwardNum/Den of FlashForwardFlops");

}  // namespace

void MarkAttentionCall(TraceBuilder& b, OpId op, int64_t seq_len, traces::AttentionMask mask) {
  b.op(op).attention = traces::AttentionCall{seq_len, mask};
}

TensorId AttentionForward(TraceBuilder& b, const Dims& d, bool dropout, const std::string& name,
                          TensorId q, TensorId k, TensorId v, TensorId bias, AttentionState* st,
                          bool softcap, TensorId sinks) {
  if (d.cp > 1) return RingAttentionForward(b, d, name, q, k, v, st);  // flash, no bias
  st->name = name;
  st->q = q;
  st->k = k;
  st->v = v;
  st->bias = bias;
  st->sinks = sinks;
  st->causal = d.causal;
  const int64_t batch = d.b * d.kv_heads;
  const int64_t rows = Group(d) * d.s;
  std::vector<TensorId> qk_inputs = {q, k};
  if (bias != kNoTensor) qk_inputs.push_back(bias);
  if (d.flash) {
    const TensorId ctx = b.Activation(name + ".ctx", d.Full(d.heads * d.dv), d.act);
    st->lse = b.Activation(name + ".lse", {d.b, d.heads, d.s}, DType::kFp32);
    st->ctx = ctx;
    std::vector<TensorId> inputs = {q, k, v};
    if (bias != kNoTensor) inputs.push_back(bias);
    if (sinks != kNoTensor) inputs.push_back(sinks);
    const OpId op = b.Op(name + ".flash", OpKind::kAttention, inputs, {ctx, st->lse},
                         WindowedFlops(d, FlashForwardFlops(d)));
    MarkAttentionCall(b, op, d.s,
                      d.causal ? traces::AttentionMask::kCausal : traces::AttentionMask::kFull);
    return ctx;
  }
  const std::vector<int64_t> scores_shape = {d.b, d.heads, d.s, d.s};
  const TensorId scores = b.Activation(name + ".scores", scores_shape, d.act);
  b.Gemm(name + ".qk", qk_inputs, {scores}, {.m = rows, .n = d.s, .k = d.d, .batch = batch});
  TensorId logits = scores;
  if (softcap) {
    st->capped = b.Activation(name + ".scores_capped", scores_shape, d.act);
    b.Op(name + ".softcap", OpKind::kElementwise, {scores}, {st->capped},
         kSoftcapFlops * Elements(scores_shape));
    logits = st->capped;
  }
  st->probs = b.Activation(name + ".probs", scores_shape, d.act);
  int64_t softmax_flops = kSoftmaxFlops * Elements(scores_shape);
  std::vector<TensorId> softmax_inputs = {logits};
  if (sinks != kNoTensor) softmax_inputs.push_back(sinks);
  b.Op(name + ".softmax", OpKind::kSoftmax, softmax_inputs, {st->probs}, softmax_flops);
  st->dropped = st->probs;
  if (dropout) {
    st->dropped = b.Activation(name + ".probs_dropped", scores_shape, d.act);
    st->mask = b.Activation(name + ".dropout_mask", scores_shape, DType::kUint8);
    b.Op(name + ".dropout", OpKind::kDropout, {st->probs}, {st->dropped, st->mask},
         kDropoutFlops * Elements(scores_shape));
  }
  // The product is [b, heads, s, d]; Megatron's permute(2, 0, 1, 3).contiguous() copies it
  // to the [s, b, h] layout the projection reads. Its backward is a permute (a view).
  const TensorId heads = b.Activation(name + ".ctx_heads", {d.b, d.heads, d.s, d.dv}, d.act);
  b.Gemm(name + ".av", {st->dropped, v}, {heads}, {.m = rows, .n = d.dv, .k = d.s, .batch = batch});
  const TensorId ctx = b.Activation(name + ".ctx", d.Full(d.heads * d.dv), d.act);
  b.Op(name + ".ctx.contiguous", OpKind::kElementwise, {heads}, {ctx}, 0);
  return ctx;
}

AttentionGrads AttentionBackward(TraceBuilder& b, const Dims& d, const AttentionState& st,
                                 TensorId g_ctx, TensorId* g_bias) {
  if (d.cp > 1) return RingAttentionBackward(b, d, st, g_ctx);
  AttentionGrads g;
  const std::string& name = st.name;
  g.q = b.Gradient(name + ".q.grad", b.shape(st.q), d.act);
  g.k = b.Gradient(name + ".k.grad", b.shape(st.k), d.act);
  g.v = b.Gradient(name + ".v.grad", b.shape(st.v), d.act);
  const std::vector<int64_t> bias_shape = {d.heads, d.s, d.s};
  if (d.flash) {
    std::vector<TensorId> inputs = {st.q, st.k, st.v, st.ctx, st.lse, g_ctx};
    std::vector<TensorId> outputs = {g.q, g.k, g.v};
    if (st.bias != kNoTensor) {
      inputs.push_back(st.bias);
      if (*g_bias != kNoTensor) inputs.push_back(*g_bias);
      *g_bias = b.Gradient(name + ".bias.grad", bias_shape, d.act);
      outputs.push_back(*g_bias);
    }
    if (st.sinks != kNoTensor) {
      inputs.push_back(st.sinks);
      outputs.push_back(b.WeightGrad(st.sinks, inputs));
    }
    const OpId op = b.Op(name + ".flash.bwd", OpKind::kAttention, inputs, outputs,
                         WindowedFlops(d, FlashBackwardFlops(d)));
    MarkAttentionCall(b, op, d.s,
                      st.causal ? traces::AttentionMask::kCausal : traces::AttentionMask::kFull);
    return g;
  }
  const int64_t batch = d.b * d.kv_heads;
  const int64_t rows = Group(d) * d.s;
  const std::vector<int64_t> scores_shape = {d.b, d.heads, d.s, d.s};
  const int64_t n_scores = Elements(scores_shape);
  const TensorId g_dropped = b.Gradient(name + ".probs_dropped.grad", scores_shape, d.act);
  b.Gemm(name + ".av.dgrad_probs", {g_ctx, st.v}, {g_dropped},
         {.m = rows, .n = d.s, .k = d.dv, .batch = batch});
  b.Gemm(name + ".av.dgrad_v", {st.dropped, g_ctx}, {g.v},
         {.m = d.s, .n = d.dv, .k = rows, .batch = batch});
  TensorId g_probs = g_dropped;
  if (st.mask != kNoTensor) {
    g_probs = b.Gradient(name + ".probs.grad", scores_shape, d.act);
    b.Op(name + ".dropout.bwd", OpKind::kDropout, {st.mask, g_dropped}, {g_probs},
         kBackwardFactor * kDropoutFlops * n_scores);
  }
  TensorId g_scores = b.Gradient(name + ".scores.grad", scores_shape, d.act);
  std::vector<TensorId> softmax_inputs = {st.probs, g_probs};
  std::vector<TensorId> softmax_outputs = {g_scores};
  if (st.sinks != kNoTensor) {
    // A sink's gradient is −Σ over its head's rows of p_sink · (its row's
    // Σ p·g), read from the probabilities the softmax saved.
    softmax_inputs.push_back(st.sinks);
    softmax_outputs.push_back(b.WeightGrad(st.sinks, softmax_inputs));
  }
  b.Op(name + ".softmax.bwd", OpKind::kSoftmax, softmax_inputs, softmax_outputs,
       kBackwardFactor * kSoftmaxFlops * n_scores);
  if (st.capped != kNoTensor) {
    // d/dx cap·tanh(x/cap) = 1 − (y/cap)², from the capped scores y.
    const TensorId g_raw = b.Gradient(name + ".scores_raw.grad", scores_shape, d.act);
    b.Op(name + ".softcap.bwd", OpKind::kElementwise, {st.capped, g_scores}, {g_raw},
         kBackwardFactor * kSoftcapFlops * n_scores);
    g_scores = g_raw;
  }
  if (st.bias != kNoTensor) {
    const std::vector<TensorId> inputs = BiasGradInputs(g_scores, g_bias);
    *g_bias = b.Gradient(name + ".bias.grad", bias_shape, d.act);
    b.Op(name + ".bias.grad_sum", OpKind::kElementwise, inputs, {*g_bias}, kAddFlops * n_scores);
  }
  b.Gemm(name + ".qk.dgrad_q", {g_scores, st.k}, {g.q},
         {.m = rows, .n = d.d, .k = d.s, .batch = batch});
  b.Gemm(name + ".qk.dgrad_k", {g_scores, st.q}, {g.k},
         {.m = d.s, .n = d.d, .k = rows, .batch = batch});
  return g;
}

}  // namespace ssdtrain::models::detail

#include "models/detail/ring_attention.h"

#include "models/detail/costs.h"
#include "traces/collective_kind.h"

namespace ssdtrain::models::detail {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// The log-sum-exp's bytes per query row (fp32).
constexpr int64_t kLseBytes = 4;

// One step's FLOPs: the local queries against one rank's keys and values.
int64_t StepFlops(const Dims& d) { return 2 * 2 * d.b * d.heads * d.s * d.s * d.d; }

// A ring exchange on the cp stream: sends what `inputs` hold, receives `outputs`.
void Exchange(TraceBuilder& b, const std::string& name, const std::vector<TensorId>& inputs,
              const std::vector<TensorId>& outputs) {
  const traces::OpId id = b.Op(name + "." + std::string(traces::kCpRingSuffix), OpKind::kCollective,
                               inputs, outputs, 0);
  b.op(id).stream = traces::kCpRingStream;
}

// A buffer of `parts` K/V-shaped tensors: [parts, s/cp, b, kv_heads·d].
std::vector<int64_t> KvParts(const Dims& d, int64_t parts) {
  return {parts, d.s, d.b, d.kv_heads * d.d};
}

// Step i's kernel call: under a causal mask, step 0 (the rank's own chunks)
// is causal and every later one computes half its pairs (TE's load-balanced
// ring: the queries against the first half of the arriving keys, or the
// second half of the queries against all of them); without one, all.
void MarkStep(TraceBuilder& b, OpId op, const Dims& d, bool causal, int64_t i) {
  traces::AttentionMask mask = traces::AttentionMask::kFull;
  if (causal) mask = i == 0 ? traces::AttentionMask::kCausal : traces::AttentionMask::kHalf;
  MarkAttentionCall(b, op, d.s, mask);
}

}  // namespace

TensorId RingAttentionForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId q,
                              TensorId k, TensorId v, AttentionState* st) {
  st->name = name;
  st->q = q;
  st->k = k;
  st->v = v;
  st->causal = d.causal;
  const int64_t cp = d.cp;
  std::vector<TensorId> kv(static_cast<size_t>(cp), kNoTensor);  // received K/V, step >= 1
  TensorId running = kNoTensor;
  for (int64_t i = 0; i < cp; ++i) {
    if (i + 1 < cp) {  // the next step's K/V arrives while this step runs
      kv[static_cast<size_t>(i + 1)] = b.Workspace(name + ".kv" + Str(i + 1), KvParts(d, 2), d.act);
      Exchange(b, name + ".kv" + Str(i + 1), {k, v}, {kv[static_cast<size_t>(i + 1)]});
    }
    std::vector<TensorId> inputs = {q};
    if (i == 0) {
      inputs.push_back(k);
      inputs.push_back(v);
    } else {
      inputs.push_back(kv[static_cast<size_t>(i)]);
      inputs.push_back(running);
    }
    if (i + 1 < cp) {
      // The running output and log-sum-exp, one tensor: the next step's only
      // other input, so a recompute rebuilds the chain once.
      running =
          b.Activation(name + ".ctx_lse.partial" + Str(i),
                       {d.b, d.heads, d.s, d.d + kLseBytes / traces::DTypeSize(d.act)}, d.act);
      MarkStep(
          b,
          b.Op(name + ".flash.step" + Str(i), OpKind::kAttention, inputs, {running}, StepFlops(d)),
          d, st->causal, i);
      continue;
    }
    st->ctx = b.Activation(name + ".ctx", d.Full(d.heads * d.d), d.act);
    st->lse = b.Activation(name + ".lse", {d.b, d.heads, d.s}, DType::kFp32);
    MarkStep(b,
             b.Op(name + ".flash.step" + Str(i), OpKind::kAttention, inputs, {st->ctx, st->lse},
                  StepFlops(d)),
             d, st->causal, i);
  }
  return st->ctx;
}

AttentionGrads RingAttentionBackward(TraceBuilder& b, const Dims& d, const AttentionState& st,
                                     TensorId g_ctx) {
  const std::string& name = st.name;
  const int64_t cp = d.cp;
  const int64_t flops = StepFlops(d) * kFlashBackwardNum / kFlashBackwardDen;
  std::vector<TensorId> kv(static_cast<size_t>(cp), kNoTensor);  // received, step >= 1
  TensorId dq = kNoTensor, dkv = kNoTensor;
  AttentionGrads g;
  for (int64_t i = 0; i < cp; ++i) {
    if (i + 1 < cp) {
      // The first exchange carries K/V; the later ones K/V and dK/dV.
      const size_t at = static_cast<size_t>(i + 1);
      kv[at] = b.Workspace(name + ".bwd_kv" + Str(i + 1), KvParts(d, i == 0 ? 2 : 4), d.act);
      Exchange(b, name + ".bwd_kv" + Str(i + 1), {st.k, st.v}, {kv[at]});
    }
    std::vector<TensorId> inputs = {st.q};
    if (i == 0) {
      inputs.push_back(st.k);
      inputs.push_back(st.v);
    } else {
      inputs.push_back(kv[static_cast<size_t>(i)]);
    }
    inputs.push_back(st.ctx);
    inputs.push_back(st.lse);
    inputs.push_back(g_ctx);
    if (i > 0) {
      inputs.push_back(dq);
      inputs.push_back(dkv);
    }
    const bool last = i + 1 == cp;
    dq = b.Gradient(name + (last ? ".q.grad" : ".q.grad_partial" + Str(i)), b.shape(st.q), d.act);
    dkv = b.Gradient(name + ".kv.grad_partial" + Str(i), KvParts(d, 2), d.act);
    MarkStep(b,
             b.Op(name + ".flash.bwd.step" + Str(i), OpKind::kAttention, inputs, {dq, dkv}, flops),
             d, st.causal, i);
  }
  g.q = dq;
  // The accumulated dK/dV of the rank's own chunk comes home.
  g.k = b.Gradient(name + ".k.grad", b.shape(st.k), d.act);
  g.v = b.Gradient(name + ".v.grad", b.shape(st.v), d.act);
  Exchange(b, name + ".dkv", {dkv}, {g.k, g.v});
  return g;
}

}  // namespace ssdtrain::models::detail

#include "models/detail/block.h"

#include "models/detail/costs.h"
#include "models/detail/rotary.h"

namespace ssdtrain::models::detail {
namespace {

// `bias`: the row-parallel layer's bias is added here.
TensorId ResidualForward(TraceBuilder& b, const Dims& d, const BlockStyle& style, bool bias,
                         const std::string& name, TensorId y, TensorId x, ResidualState* st) {
  st->name = name;
  const TensorId out = b.Activation(name + ".out", d.Stream(), d.act);
  const int64_t n = Elements(d.Stream());
  std::vector<TensorId> inputs = {y};
  if (bias) {
    st->bias = b.Weight(name + ".bias", {d.h}, d.act);
    inputs.push_back(st->bias);
  }
  inputs.push_back(x);
  if (!style.dropout) {
    // GPT-J's fc_out bias has no dropout after it: a fused bias-residual add.
    b.Op(name + (bias ? ".bias_residual_add" : ".residual_add"), OpKind::kElementwise, inputs,
         {out}, (bias ? 2 : 1) * kAddFlops * n);
    return out;
  }
  st->mask = b.Activation(name + ".dropout_mask", d.Stream(), DType::kUint8);
  // Megatron's fused bias-dropout-add: bias add, dropout, residual add.
  b.Op(name + ".dropout_add", OpKind::kDropout, inputs, {out, st->mask},
       (kDropoutFlops + 2 * kAddFlops) * n);
  return out;
}

// Returns the gradient of the branch output y; the residual's gradient is g_out itself.
TensorId ResidualBackward(TraceBuilder& b, const Dims& d, const ResidualState& st, TensorId g_out) {
  if (st.mask == kNoTensor) {
    if (st.bias != kNoTensor) {
      // The bias gradient: g_out summed over the tokens.
      std::vector<TensorId> inputs = {g_out};
      const TensorId g_bias = b.WeightGrad(st.bias, inputs);
      b.Op(st.name + ".bias.bwd", OpKind::kElementwise, inputs, {g_bias},
           kAddFlops * Elements(d.Stream()));
    }
    return g_out;
  }
  std::vector<TensorId> inputs = {st.mask, g_out};
  const TensorId g_y = b.Gradient(st.name + ".branch.grad", d.Stream(), d.act);
  std::vector<TensorId> outputs = {g_y};
  if (st.bias != kNoTensor) outputs.push_back(b.WeightGrad(st.bias, inputs));
  b.Op(st.name + ".dropout_add.bwd", OpKind::kDropout, inputs, outputs,
       kBackwardFactor * kDropoutFlops * Elements(d.Stream()));
  return g_y;
}

// The dims attention runs with: as many key/value heads as query heads where
// k and v were repeated to every query head (torchtitan's repeat_kv).
Dims AttentionDims(const Dims& d, const AttentionSublayer& st) {
  Dims da = d;
  if (st.kv_repeated) da.kv_heads = d.heads;
  return da;
}

// QKV through the projection, on the norm output `ln`; returns the projection output.
TensorId SelfAttentionBranch(TraceBuilder& b, const Dims& d, const BlockStyle& style, TensorId ln,
                             TensorId rel_bias, AttentionSublayer* st) {
  st->mla = style.mla.kv_lora > 0;
  if (st->mla) return MlaAttentionForward(b, d, style.mla, ln, &st->latent);
  const int64_t q_width = d.heads * d.d;
  const int64_t kv_width = d.kv_heads * d.d;
  const bool qkv_bias = style.attn_bias || style.qkv_bias;
  TensorId q = kNoTensor, k = kNoTensor, v = kNoTensor;
  st->separate = style.separate_projections;
  if (st->separate) {  // torchtitan: wq, wk, wv, each its own linear layer
    q = b.Activation("wq.out", d.Full(q_width), d.act);
    st->q = ColumnForward(b, d, "wq", ln, d.h, q_width, {q}, qkv_bias);
    k = b.Activation("wk.out", d.Full(kv_width), d.act);
    st->k = ColumnForward(b, d, "wk", ln, d.h, kv_width, {k}, qkv_bias);
    v = b.Activation("wv.out", d.Full(kv_width), d.act);
    st->v = ColumnForward(b, d, "wv", ln, d.h, kv_width, {v}, qkv_bias);
  } else {
    const TensorId qkv = b.Activation("qkv.out", d.Full(q_width + 2 * kv_width), d.act);
    q = b.View("q", qkv, d.Full(q_width));
    k = b.View("k", qkv, d.Full(kv_width));
    v = b.View("v", qkv, d.Full(kv_width));
    st->q = ColumnForward(b, d, "qkv", ln, d.h, q_width + 2 * kv_width, {qkv, q, k, v}, qkv_bias);
  }
  st->qk_norm = style.qk_norm;
  if (style.qk_norm) {
    q = HeadNormForward(b, d, "q_norm", q, &st->q_norm);
    k = HeadNormForward(b, d, "k_norm", k, &st->k_norm);
  }
  st->rotary = style.rotary;
  if (style.rotary) {
    st->q_pre = q;
    st->k_pre = k;
    q = b.Activation("q_rot", d.Full(q_width), d.act);
    k = b.Activation("k_rot", d.Full(kv_width), d.act);
    st->complex_rotary = style.complex_rotary;
    RotaryForward(b, d, style.complex_rotary, st->q_pre, st->k_pre, q, k);
  }
  // repeat_kv: unsqueeze, expand and reshape, whose reshape of the expanded
  // view copies k and v to every query head (none to copy at kv_heads = heads).
  st->kv_repeated = style.repeat_kv && d.kv_heads < d.heads;
  if (st->kv_repeated) {
    st->k_kv = k;
    st->v_kv = v;
    k = b.Activation("k_rep", d.Full(d.heads * d.d), d.act);
    v = b.Activation("v_rep", d.Full(d.heads * d.dv), d.act);
    b.Op("attn.repeat_kv", OpKind::kElementwise, {st->k_kv, st->v_kv}, {k, v}, 0);
  }
  const TensorId sinks = style.sinks ? b.Weight("attn.sinks", {d.heads}, d.act) : kNoTensor;
  const TensorId ctx =
      AttentionForward(b, AttentionDims(d, *st), style.dropout && style.attention_dropout, "attn",
                       q, k, v, rel_bias, &st->core, style.attn_softcap, sinks);
  TensorId y = kNoTensor;
  st->proj = RowForward(b, d, "proj", ctx, q_width, d.h, &y, /*input_saved_elsewhere=*/true);
  return y;
}

TensorId SelfAttentionForward(TraceBuilder& b, const Dims& d, const BlockStyle& style, TensorId x,
                              TensorId rel_bias, AttentionSublayer* st) {
  const TensorId ln = NormForward(b, d, style.norm, "ln1", x, &st->norm);
  TensorId y = SelfAttentionBranch(b, d, style, ln, rel_bias, st);
  st->post_norm = style.post_norms;
  if (st->post_norm) y = NormForward(b, d, style.norm, "post_attn_norm", y, &st->post);
  return ResidualForward(b, d, style, style.attn_bias, "attn_out", y, x, &st->residual);
}

TensorId CrossAttentionForward(TraceBuilder& b, const Dims& d, const BlockStyle& style, TensorId x,
                               TensorId encoder_out, AttentionSublayer* st) {
  const TensorId ln = NormForward(b, d, style.norm, "ln_cross", x, &st->norm);
  const int64_t q_width = d.heads * d.d;
  const int64_t kv_width = d.kv_heads * d.d;
  const TensorId q = b.Activation("cross_q.out", d.Full(q_width), d.act);
  st->q = ColumnForward(b, d, "cross_q", ln, d.h, q_width, {q}, style.attn_bias);
  const TensorId kv = b.Activation("cross_kv.out", d.Full(2 * kv_width), d.act);
  const TensorId k = b.View("cross_k", kv, d.Full(kv_width));
  const TensorId v = b.View("cross_v", kv, d.Full(kv_width));
  st->kv =
      ColumnForward(b, d, "cross_kv", encoder_out, d.h, 2 * kv_width, {kv, k, v}, style.attn_bias);
  Dims cross = d;  // the decoder's queries against every encoder output
  cross.causal = false;
  const TensorId ctx = AttentionForward(b, cross, style.dropout && style.attention_dropout,
                                        "cross_attn", q, k, v, kNoTensor, &st->core);
  TensorId y = kNoTensor;
  st->proj = RowForward(b, d, "cross_proj", ctx, q_width, d.h, &y, /*input_saved_elsewhere=*/true);
  return ResidualForward(b, d, style, style.attn_bias, "cross_out", y, x, &st->residual);
}

// torchtitan's FeedForward, w2(silu(w1(x)) * w3(x)): the gate and up
// projections their own linear layers, silu (or gelu) and the product their
// own ops, as eager PyTorch runs them; returns w2's output.
TensorId SeparateGatedMlp(TraceBuilder& b, const Dims& d, const BlockStyle& style, TensorId ln,
                          MlpSublayer* st) {
  const int64_t n = d.s * d.b * d.ffn;
  const bool silu = style.mlp == MlpKind::kSwiglu;
  const TensorId gate = b.Activation("w1.out", d.Full(d.ffn), d.act);
  st->fc1 = ColumnForward(b, d, "w1", ln, d.h, d.ffn, {gate}, style.mlp_bias);
  st->act_saved = gate;
  st->gate_act = b.Activation(silu ? "silu.out" : "gelu.out", d.Full(d.ffn), d.act);
  b.Op(silu ? "silu" : "gelu", OpKind::kElementwise, {gate}, {st->gate_act},
       (silu ? kSiluFlops : kGeluFlops) * n);
  st->up_out = b.Activation("w3.out", d.Full(d.ffn), d.act);
  st->up = ColumnForward(b, d, "w3", ln, d.h, d.ffn, {st->up_out}, style.mlp_bias);
  const TensorId a = b.Activation("act.out", d.Full(d.ffn), d.act);
  b.Op("gate_mul", OpKind::kElementwise, {st->gate_act, st->up_out}, {a}, kMulFlops * n);
  TensorId y = kNoTensor;
  st->fc2 = RowForward(b, d, "w2", a, d.ffn, d.h, &y);
  return y;
}

// SeparateGatedMlp's backward, from w2's output gradient to the norm output's.
TensorId SeparateGatedMlpBackward(TraceBuilder& b, const Dims& d, const MlpSublayer& st,
                                  TensorId g_y) {
  const int64_t n = d.s * d.b * d.ffn;
  const bool silu = st.kind == MlpKind::kSwiglu;
  const TensorId g_a = RowBackward(b, d, st.fc2, g_y);
  const TensorId g_act = b.Gradient(silu ? "silu.out.grad" : "gelu.out.grad", d.Full(d.ffn), d.act);
  const TensorId g_up = b.Gradient("w3.out.grad", d.Full(d.ffn), d.act);
  b.Op("gate_mul.bwd", OpKind::kElementwise, {st.gate_act, st.up_out, g_a}, {g_act, g_up},
       kBackwardFactor * kMulFlops * n);
  const TensorId g_gate = b.Gradient("w1.out.grad", d.Full(d.ffn), d.act);
  b.Op(silu ? "silu.bwd" : "gelu.bwd", OpKind::kElementwise, {st.act_saved, g_act}, {g_gate},
       kBackwardFactor * (silu ? kSiluFlops : kGeluFlops) * n);
  const TensorId g_ln_up = ColumnBackward(b, d, st.up, {g_up});
  return AccumulateGrad(b, "ln2.out.grad_sum", g_ln_up, ColumnBackward(b, d, st.fc1, {g_gate}));
}

// fc1 through fc2, on the norm output `ln`; returns fc2's output.
TensorId MlpBranch(TraceBuilder& b, const Dims& d, const BlockStyle& style, TensorId ln,
                   MlpSublayer* st) {
  st->kind = style.mlp;
  const bool gated = style.mlp == MlpKind::kSwiglu || style.mlp == MlpKind::kGeglu;
  st->separate = gated && style.separate_projections;
  if (st->separate) return SeparateGatedMlp(b, d, style, ln, st);
  const int64_t fc1_width = gated ? 2 * d.ffn : d.ffn;
  const TensorId f1 = b.Activation("fc1.out", d.Full(fc1_width), d.act);
  st->fc1 = ColumnForward(b, d, "fc1", ln, d.h, fc1_width, {f1}, style.mlp_bias);
  const TensorId a = b.Activation("act.out", d.Full(d.ffn), d.act);
  const int64_t n = d.s * d.b * d.ffn;
  switch (style.mlp) {
    case MlpKind::kGelu:
      b.Op("gelu", OpKind::kElementwise, {f1}, {a}, kGeluFlops * n);
      st->act_saved = f1;
      break;
    case MlpKind::kRelu:
      b.Op("relu", OpKind::kElementwise, {f1}, {a}, kReluFlops * n);
      st->act_saved = a;  // ReLU's backward needs only where its output is positive
      break;
    case MlpKind::kSwiglu:
      b.Op("swiglu", OpKind::kElementwise, {f1}, {a}, kSwigluFlops * n);
      st->act_saved = f1;
      break;
    case MlpKind::kGeglu:
      b.Op("geglu", OpKind::kElementwise, {f1}, {a}, kGegluFlops * n);
      st->act_saved = f1;
      break;
  }
  TensorId y = kNoTensor;
  st->fc2 = RowForward(b, d, "fc2", a, d.ffn, d.h, &y);
  return y;
}

TensorId MlpForward(TraceBuilder& b, const Dims& d, const BlockStyle& style, TensorId x,
                    const MoeSpec* moe, MlpSublayer* st) {
  const TensorId ln = NormForward(b, d, style.norm, "ln2", x, &st->norm);
  st->moe = moe != nullptr;
  TensorId y =
      st->moe ? MoeBranchForward(b, d, *moe, ln, &st->routed) : MlpBranch(b, d, style, ln, st);
  st->post_norm = style.post_norms;
  if (st->post_norm) y = NormForward(b, d, style.norm, "post_mlp_norm", y, &st->post);
  return ResidualForward(b, d, style, style.mlp_bias, "mlp_out", y, x, &st->residual);
}

// Both branches on one norm of x (or each on its own, two_norms); out = x + attention
// + MLP (each through its dropout).
TensorId ParallelBlockForward(TraceBuilder& b, const Dims& d, const BlockStyle& style, TensorId x,
                              TensorId rel_bias, BlockState* st) {
  const TensorId ln = NormForward(b, d, style.norm, "ln1", x, &st->self.norm);
  const TensorId attn = SelfAttentionBranch(b, d, style, ln, rel_bias, &st->self);
  st->two_norms = style.parallel_two_norms;
  const TensorId ln_mlp =
      st->two_norms ? NormForward(b, d, style.norm, "ln2", x, &st->mlp.norm) : ln;
  const TensorId mlp = MlpBranch(b, d, style, ln_mlp, &st->mlp);
  const TensorId h =
      ResidualForward(b, d, style, style.attn_bias, "attn_out", attn, x, &st->self.residual);
  return ResidualForward(b, d, style, style.mlp_bias, "mlp_out", mlp, h, &st->mlp.residual);
}

// The backward of the split of a fused projection's output into q, k and v (Megatron's
// split_tensor_along_last_dim, torch.split: its backward concatenates the parts'
// gradients into one buffer, which the projection's dgrad and wgrad read).
TensorId SplitBackward(TraceBuilder& b, const Dims& d, const std::string& name,
                       const std::vector<TensorId>& parts) {
  if (parts.size() == 1) return parts.front();
  int64_t width = 0;
  for (TensorId p : parts) width += b.shape(p).back();
  const TensorId g = b.Gradient(name, d.Full(width), d.act);
  b.Op(name + "_cat", OpKind::kElementwise, parts, {g}, 0);
  return g;
}

// From the projection output's gradient to the gradient of the norm output.
TensorId AttentionBranchBackward(TraceBuilder& b, const Dims& d, const AttentionSublayer& st,
                                 bool cross, TensorId g_y, TensorId* g_rel_bias,
                                 TensorId* g_encoder_out) {
  if (st.mla) return MlaAttentionBackward(b, d, st.latent, g_y);
  const TensorId g_ctx = RowBackward(b, d, st.proj, g_y);
  AttentionGrads g = AttentionBackward(b, AttentionDims(d, st), st.core, g_ctx, g_rel_bias);
  if (st.kv_repeated) {  // expand's backward: each kv head's copies summed
    const TensorId g_k = b.Gradient("attn.k_kv.grad", b.shape(st.k_kv), d.act);
    const TensorId g_v = b.Gradient("attn.v_kv.grad", b.shape(st.v_kv), d.act);
    b.Op("attn.repeat_kv.bwd", OpKind::kElementwise, {g.k, g.v}, {g_k, g_v},
         kAddFlops * (Elements(b.shape(g.k)) + Elements(b.shape(g.v))));
    g.k = g_k;
    g.v = g_v;
  }
  if (st.rotary) {
    const TensorId g_q = b.Gradient("q.grad", b.shape(st.q_pre), d.act);
    const TensorId g_k = b.Gradient("k.grad", b.shape(st.k_pre), d.act);
    RotaryBackward(b, d, st.complex_rotary, g.q, g.k, g_q, g_k);
    g.q = g_q;
    g.k = g_k;
  }
  if (st.qk_norm) {
    g.q = NormBackward(b, d, st.q_norm, g.q, kNoTensor);
    g.k = NormBackward(b, d, st.k_norm, g.k, kNoTensor);
  }
  if (cross) {
    const TensorId g_enc =
        ColumnBackward(b, d, st.kv, {SplitBackward(b, d, "cross_kv.out.grad", {g.k, g.v})});
    *g_encoder_out = AccumulateGrad(b, "encoder_out.grad_sum", *g_encoder_out, g_enc);
    return ColumnBackward(b, d, st.q, {g.q});
  }
  if (st.separate) {  // autograd sums the three layers' input gradients
    const TensorId g_ln = ColumnBackward(b, d, st.v, {g.v});
    const TensorId g_kv =
        AccumulateGrad(b, "ln1.out.grad_sum_k", g_ln, ColumnBackward(b, d, st.k, {g.k}));
    return AccumulateGrad(b, "ln1.out.grad_sum_q", g_kv, ColumnBackward(b, d, st.q, {g.q}));
  }
  return ColumnBackward(b, d, st.q, {SplitBackward(b, d, "qkv.out.grad", {g.q, g.k, g.v})});
}

TensorId AttentionSublayerBackward(TraceBuilder& b, const Dims& d, const AttentionSublayer& st,
                                   bool cross, TensorId g_out, TensorId* g_rel_bias,
                                   TensorId* g_encoder_out) {
  TensorId g_y = ResidualBackward(b, d, st.residual, g_out);
  if (st.post_norm) g_y = NormBackward(b, d, st.post, g_y, kNoTensor);
  const TensorId g_ln = AttentionBranchBackward(b, d, st, cross, g_y, g_rel_bias, g_encoder_out);
  return NormBackward(b, d, st.norm, g_ln, g_out);
}

// From fc2's output gradient to the gradient of the norm output.
TensorId MlpBranchBackward(TraceBuilder& b, const Dims& d, const MlpSublayer& st, TensorId g_y) {
  if (st.separate) return SeparateGatedMlpBackward(b, d, st, g_y);
  const TensorId g_a = RowBackward(b, d, st.fc2, g_y);
  const TensorId g_f1 = b.Gradient("fc1.out.grad", d.Full(st.fc1.out), d.act);
  const int64_t n = d.s * d.b * d.ffn;
  switch (st.kind) {
    case MlpKind::kGelu:
      b.Op("gelu.bwd", OpKind::kElementwise, {st.act_saved, g_a}, {g_f1},
           kBackwardFactor * kGeluFlops * n);
      break;
    case MlpKind::kRelu:
      b.Op("relu.bwd", OpKind::kElementwise, {st.act_saved, g_a}, {g_f1},
           kBackwardFactor * kReluFlops * n);
      break;
    case MlpKind::kSwiglu:
      b.Op("swiglu.bwd", OpKind::kElementwise, {st.act_saved, g_a}, {g_f1},
           kBackwardFactor * kSwigluFlops * n);
      break;
    case MlpKind::kGeglu:
      b.Op("geglu.bwd", OpKind::kElementwise, {st.act_saved, g_a}, {g_f1},
           kBackwardFactor * kGegluFlops * n);
      break;
  }
  return ColumnBackward(b, d, st.fc1, {g_f1});
}

TensorId MlpBackward(TraceBuilder& b, const Dims& d, const MlpSublayer& st, TensorId g_out) {
  TensorId g_y = ResidualBackward(b, d, st.residual, g_out);
  if (st.post_norm) g_y = NormBackward(b, d, st.post, g_y, kNoTensor);
  const TensorId g_ln =
      st.moe ? MoeBranchBackward(b, d, st.routed, g_y) : MlpBranchBackward(b, d, st, g_y);
  return NormBackward(b, d, st.norm, g_ln, g_out);
}

// The residual passes g_out to x and to both branches; the branches' gradients
// of the shared norm output are summed before its backward (with two norms, each
// norm's backward adds its input gradient to the other's).
TensorId ParallelBlockBackward(TraceBuilder& b, const Dims& d, const BlockState& st, TensorId g_out,
                               TensorId* g_rel_bias) {
  const TensorId g_mlp = ResidualBackward(b, d, st.mlp.residual, g_out);
  const TensorId g_ln_mlp = MlpBranchBackward(b, d, st.mlp, g_mlp);
  const TensorId g_attn = ResidualBackward(b, d, st.self.residual, g_out);
  TensorId no_encoder = kNoTensor;
  const TensorId g_ln_attn =
      AttentionBranchBackward(b, d, st.self, /*cross=*/false, g_attn, g_rel_bias, &no_encoder);
  if (st.two_norms) {
    const TensorId g_x = NormBackward(b, d, st.mlp.norm, g_ln_mlp, g_out);
    return NormBackward(b, d, st.self.norm, g_ln_attn, g_x);
  }
  const TensorId g_ln = AccumulateGrad(b, "ln1.out.grad_sum", g_ln_mlp, g_ln_attn);
  return NormBackward(b, d, st.self.norm, g_ln, g_out);
}

}  // namespace

TensorId AccumulateGrad(TraceBuilder& b, const std::string& name, TensorId sum, TensorId part) {
  if (sum == kNoTensor) return part;
  const TensorId out = b.Gradient(name, b.shape(part), b.tensor(part).dtype);
  b.Op(name, OpKind::kElementwise, {sum, part}, {out}, kAddFlops * Elements(b.shape(part)));
  return out;
}

TensorId BlockForward(TraceBuilder& b, const Dims& d, const BlockStyle& style, TensorId x,
                      TensorId rel_bias, TensorId encoder_out, BlockState* st, const MoeSpec* moe) {
  st->parallel = style.parallel;
  if (style.parallel) return ParallelBlockForward(b, d, style, x, rel_bias, st);
  TensorId h = SelfAttentionForward(b, d, style, x, rel_bias, &st->self);
  st->has_cross = encoder_out != kNoTensor;
  if (st->has_cross) h = CrossAttentionForward(b, d, style, h, encoder_out, &st->cross);
  return MlpForward(b, d, style, h, moe, &st->mlp);
}

TensorId BlockBackward(TraceBuilder& b, const Dims& d, const BlockState& st, TensorId g_out,
                       TensorId* g_rel_bias, TensorId* g_encoder_out) {
  if (st.parallel) return ParallelBlockBackward(b, d, st, g_out, g_rel_bias);
  TensorId g = MlpBackward(b, d, st.mlp, g_out);
  if (st.has_cross) {
    g = AttentionSublayerBackward(b, d, st.cross, /*cross=*/true, g, g_rel_bias, g_encoder_out);
  }
  return AttentionSublayerBackward(b, d, st.self, /*cross=*/false, g, g_rel_bias, g_encoder_out);
}

}  // namespace ssdtrain::models::detail

#include "models/detail/mla.h"

#include <string>

#include "models/detail/block.h"
#include "models/detail/costs.h"
#include "traces/op_scope.h"

namespace ssdtrain::models::detail {
namespace {

// An op or tensor of the up-projection scope that `mla_up_proj` recomputes.
std::string Up(const std::string& name) { return std::string(traces::kMlaUpScope) + "." + name; }

// A projection replicated over tp (Megatron's 'duplicated' TELinear): every
// rank holds the whole [out, in] weight and runs it on its own rows of x.
// Under FP8 each quantizes x itself and saves its own column-wise copy, as
// two Transformer Engine Linear modules do.
TensorId DuplicatedForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                           int64_t out, const std::vector<TensorId>& outputs,
                           DuplicatedLinear* st) {
  st->weight = b.Weight(name + ".weight", {out, d.h}, d.act);
  st->saved_input = x;
  TensorId gemm_in = x, gemm_weight = st->weight;
  if (Fp8On(d)) {
    st->fp8 = Fp8Weights(b, st->weight);
    gemm_weight = st->fp8.row;
    gemm_in = QuantizeInput(b, d, name + ".in", x, &st->saved_input);
  }
  b.Gemm(name, {gemm_in, gemm_weight}, outputs,
         {.m = d.s_local * d.b, .n = out, .k = d.h, .batch = 1});
  return outputs.front();
}

// Returns the gradient of x from the output gradient g_out [s_local, b, out].
// The weight gradient covers this rank's rows: with sequence parallelism the
// ranks' parts are summed after the backward as Megatron sums its norm
// weights' (not in the trace, as for the norms).
TensorId DuplicatedBackward(TraceBuilder& b, const Dims& d, const std::string& name,
                            const DuplicatedLinear& st, TensorId g_out) {
  const int64_t out = b.shape(st.weight)[0];
  const int64_t rows = d.s_local * d.b;
  const bool fp8 = st.fp8.row != kNoTensor;
  Fp8Grad g8;
  if (fp8) g8 = QuantizeGrad(b, d, name + ".out.grad", {g_out}, out);
  const TensorId g_x = b.Gradient(name + ".in.grad", d.Stream(), d.act);
  b.Gemm(name + ".dgrad", {fp8 ? g8.row : g_out, fp8 ? st.fp8.col : st.weight}, {g_x},
         {.m = rows, .n = d.h, .k = out, .batch = 1});
  std::vector<TensorId> inputs = {st.saved_input, fp8 ? g8.col : g_out};
  const TensorId g_w = b.WeightGrad(st.weight, inputs);
  b.Gemm(name + ".wgrad", inputs, {g_w}, {.m = out, .n = d.h, .k = rows, .batch = 1});
  return g_x;
}

// One gradient buffer from the gradients of its column parts (torch.split's backward).
TensorId Concat(TraceBuilder& b, const std::string& name, std::vector<int64_t> shape,
                const std::vector<TensorId>& parts, DType dtype) {
  const TensorId g = b.Gradient(name, std::move(shape), dtype);
  b.Op(name + "_cat", OpKind::kElementwise, parts, {g}, 0);
  return g;
}

}  // namespace

TensorId MlaAttentionForward(TraceBuilder& b, const Dims& d, const MlaSpec& spec, TensorId ln,
                             MlaState* st) {
  st->spec = spec;
  st->x = ln;
  const int64_t n = d.heads, dn = spec.nope, dr = spec.rope, dv = d.dv;
  auto local_shape = [&](int64_t width) { return std::vector<int64_t>{d.s_local, d.b, width}; };
  // Queries: [s, b, n·(dn + dr)].
  const TensorId q =
      b.Activation(spec.q_lora > 0 ? "q_up.out" : "q_proj.out", d.Full(n * (dn + dr)), d.act);
  if (spec.q_lora > 0) {
    const TensorId q_latent = b.Activation("q_down.out", local_shape(spec.q_lora), d.act);
    DuplicatedForward(b, d, "q_down", ln, spec.q_lora, {q_latent}, &st->q_down);
    const TensorId q_normed =
        NormForward(b, d, NormKind::kRmsNorm, "q_norm", q_latent, &st->q_norm);
    st->q_up = ColumnForward(b, d, "q_up", q_normed, spec.q_lora, n * (dn + dr), {q}, false);
  } else {
    st->q_up = ColumnForward(b, d, "q_proj", ln, d.h, n * (dn + dr), {q}, false);
  }
  // The key/value latent and the shared rotary key: [s_local, b, kv_lora + dr].
  const TensorId kv_down = b.Activation("kv_down.out", local_shape(spec.kv_lora + dr), d.act);
  const TensorId kv_latent = b.View("kv_latent", kv_down, local_shape(spec.kv_lora));
  st->k_pe = b.View("k_pe", kv_down, local_shape(dr));
  DuplicatedForward(b, d, "kv_down", ln, spec.kv_lora + dr, {kv_down, kv_latent, st->k_pe},
                    &st->kv_down);
  const TensorId kv_normed =
      NormForward(b, d, NormKind::kRmsNorm, "kv_norm", kv_latent, &st->kv_norm);
  const TensorId kv = b.Activation("kv_up.out", d.Full(n * (dn + dv)), d.act);
  const TensorId k_nope = b.View("k_nope", kv, d.Full(n * dn));
  const TensorId v_part = b.View("v_part", kv, d.Full(n * dv));
  st->kv_up = ColumnForward(b, d, "kv_up", kv_normed, spec.kv_lora, n * (dn + dv),
                            {kv, k_nope, v_part}, false);
  const TensorId k_pe =
      d.sp ? AllGatherSeq(b, d, "k_pe.gathered", st->k_pe, TensorKind::kActivation) : st->k_pe;
  // The contiguous query, key and value the attention reads: mla_up_proj's scope.
  const TensorId query = b.Activation(Up("query"), d.Full(n * (dn + dr)), d.act);
  b.Op(Up("q_rope"), OpKind::kElementwise, {q}, {query}, kRotaryFlops * d.s * d.b * n * dr);
  const TensorId key = b.Activation(Up("key"), d.Full(n * (dn + dr)), d.act);
  b.Op(Up("k_rope"), OpKind::kElementwise, {k_nope, k_pe}, {key}, kRotaryFlops * d.s * d.b * dr);
  const TensorId value = b.Activation(Up("value"), d.Full(n * dv), d.act);
  b.Op(Up("v_contiguous"), OpKind::kElementwise, {v_part}, {value}, 0);
  const TensorId ctx =
      AttentionForward(b, d, /*dropout=*/false, "attn", query, key, value, kNoTensor, &st->core);
  TensorId y = kNoTensor;
  st->proj = RowForward(b, d, "proj", ctx, n * dv, d.h, &y, /*input_saved_elsewhere=*/true);
  return y;
}

TensorId MlaAttentionBackward(TraceBuilder& b, const Dims& d, const MlaState& st, TensorId g_y) {
  const MlaSpec& spec = st.spec;
  const int64_t n = d.heads, dn = spec.nope, dr = spec.rope, dv = d.dv;
  const TensorId g_ctx = RowBackward(b, d, st.proj, g_y);
  TensorId no_bias = kNoTensor;
  const AttentionGrads g = AttentionBackward(b, d, st.core, g_ctx, &no_bias);
  // Keys and values: the rotary key's gradient is summed over the heads.
  const TensorId g_k_nope = b.Gradient("k_nope.grad", d.Full(n * dn), d.act);
  const TensorId g_k_pe_full = b.Gradient("k_pe.grad", d.Full(dr), d.act);
  b.Op(Up("k_rope.bwd"), OpKind::kElementwise, {g.k}, {g_k_nope, g_k_pe_full},
       kRotaryFlops * d.s * d.b * dr + kAddFlops * d.s * d.b * n * dr);
  // value is a copy of kv_up's value columns: its gradient is theirs.
  const TensorId g_kv = Concat(b, "kv_up.out.grad", d.Full(n * (dn + dv)), {g_k_nope, g.v}, d.act);
  const TensorId g_kv_normed = ColumnBackward(b, d, st.kv_up, {g_kv});
  const TensorId g_kv_latent = NormBackward(b, d, st.kv_norm, g_kv_normed, kNoTensor);
  // Each rank's k_pe gradient holds its own heads' part: reduce-scattered
  // with sequence parallelism (the gather's backward), else all-reduced.
  TensorId g_k_pe = g_k_pe_full;
  if (d.sp) {
    g_k_pe = ReduceScatterSeq(b, d, "k_pe.grad_shard", g_k_pe_full, TensorKind::kGradient);
  } else if (d.t > 1) {
    g_k_pe = AllReduce(b, d, "k_pe.grad_reduced", g_k_pe_full);
  }
  const TensorId g_kv_down = Concat(b, "kv_down.out.grad", {d.s_local, d.b, spec.kv_lora + dr},
                                    {g_kv_latent, g_k_pe}, d.act);
  const TensorId g_x_kv = DuplicatedBackward(b, d, "kv_down", st.kv_down, g_kv_down);
  // Queries.
  const TensorId g_q = b.Gradient(spec.q_lora > 0 ? "q_up.out.grad" : "q_proj.out.grad",
                                  d.Full(n * (dn + dr)), d.act);
  b.Op(Up("q_rope.bwd"), OpKind::kElementwise, {g.q}, {g_q}, kRotaryFlops * d.s * d.b * n * dr);
  TensorId g_x_q = kNoTensor;
  if (spec.q_lora > 0) {
    const TensorId g_q_normed = ColumnBackward(b, d, st.q_up, {g_q});
    const TensorId g_q_latent = NormBackward(b, d, st.q_norm, g_q_normed, kNoTensor);
    g_x_q = DuplicatedBackward(b, d, "q_down", st.q_down, g_q_latent);
  } else {
    g_x_q = ColumnBackward(b, d, st.q_up, {g_q});
  }
  return AccumulateGrad(b, "mla.in.grad_sum", g_x_kv, g_x_q);
}

}  // namespace ssdtrain::models::detail

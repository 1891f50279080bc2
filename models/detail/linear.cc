#include "models/detail/linear.h"

#include "models/detail/costs.h"

namespace ssdtrain::models::detail {
namespace {

TensorId Make(TraceBuilder& b, const std::string& name, std::vector<int64_t> shape, DType dtype,
              TensorKind kind) {
  switch (kind) {
    case TensorKind::kGradient:
      return b.Gradient(name, std::move(shape), dtype);
    case TensorKind::kWorkspace:
      return b.Workspace(name, std::move(shape), dtype);
    default:
      return b.Activation(name, std::move(shape), dtype);
  }
}

// Sums from t ranks: (t - 1) / t of the elements are added on each rank.
int64_t ReduceFlops(const Dims& d, int64_t elements) { return elements * (d.t - 1) / d.t; }

// With Transformer Engine's userbuffers overlap (`st.tp_overlap`), marks the
// sequence-parallel collective that wrote `collective_out` as hidden behind
// `gemm` by `method` (TE's defaults per GEMM: pytorch/module/base.py,
// initialize_ub; the simulator prices it, sim/op_cost.h). Without it, a
// column-parallel layer's backward collectives (the `bulk` ones of TE's
// userbuffers) still run beside their GEMMs where `st.tp_async`: launched
// with async_op=True through NCCL before the GEMM and waited for after it
// (Megatron-LM's ColumnParallelLinear backward since cf7efd4f, 2021-08-30;
// Megatron-Core's LinearWithGradAccumulationAndAsyncCommunication; Transformer
// Engine's Linear and LayerNormLinear backward, "Overlap input AG with dgrad",
// "Overlap dgrad-RS/AR with wgrad").
void Overlap(TraceBuilder& b, const LinearState& st, TensorId collective_out, OpId gemm,
             traces::TpOverlapMethod method) {
  if (!st.tp_overlap) {
    if (!st.tp_async || method != traces::TpOverlapMethod::kBulk) return;
    method = traces::TpOverlapMethod::kAsync;
  }
  const OpId collective = b.tensor(collective_out).producer;
  b.op(collective).tp_overlap = traces::TpOverlap{method, *b.op(gemm).gemm};
}

}  // namespace

TensorId AllGatherSeq(TraceBuilder& b, const Dims& d, const std::string& name, TensorId shard,
                      TensorKind kind) {
  std::vector<int64_t> shape = b.shape(shard);
  shape[0] *= d.t;
  const TensorId full = Make(b, name, std::move(shape), b.tensor(shard).dtype, kind);
  // An FP8 shard's scales come along: the t shards' data and scales, each.
  if (b.tensor(full).dtype == DType::kFp8) b.SetGatheredFp8Bytes(full, d.t * b.tensor(shard).bytes);
  b.Op(name + ".all_gather", OpKind::kCollective, {shard}, {full}, 0);
  return full;
}

TensorId ReduceScatterSeq(TraceBuilder& b, const Dims& d, const std::string& name, TensorId full,
                          TensorKind kind) {
  std::vector<int64_t> shape = b.shape(full);
  shape[0] /= d.t;
  const TensorId shard = Make(b, name, std::move(shape), b.tensor(full).dtype, kind);
  b.Op(name + ".reduce_scatter", OpKind::kCollective, {full}, {shard},
       ReduceFlops(d, Elements(b.shape(full))));
  return shard;
}

TensorId AllReduce(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x) {
  const TensorId out = b.View(name, x, b.shape(x));
  b.Op(name + ".all_reduce", OpKind::kCollective, {x}, {out}, ReduceFlops(d, Elements(b.shape(x))));
  return out;
}

LinearState ColumnForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                          int64_t in, int64_t out, const std::vector<TensorId>& outputs,
                          bool with_bias, TensorId weight, bool replicated_input) {
  LinearState st;
  st.name = name;
  st.saved_input = x;
  st.in = in;
  st.out = out;
  st.weight = weight != kNoTensor ? weight : b.Weight(name + ".weight", {out, in}, d.act);
  if (with_bias) st.bias = b.Weight(name + ".bias", {out}, d.act);
  st.gathered = d.sp && !replicated_input;
  st.tp_overlap = d.tp_overlap;
  st.tp_async = d.tp_async;
  TensorId gemm_in = x;
  TensorId gemm_weight = st.weight;
  TensorId gathered = kNoTensor;  // the all-gather's output
  if (Fp8On(d)) {
    st.fp8 = Fp8Weights(b, st.weight);
    gemm_weight = st.fp8.row;
  }
  if (st.gathered && Fp8Gathers(d)) {
    // Delayed and current scaling: the shard is quantized row-wise and
    // all-gathered in FP8; the FP8 shard is saved and gathered again in
    // backward.
    st.saved_input = QuantizeInput(b, d, name + ".in", x, nullptr);
    gemm_in = gathered =
        AllGatherSeq(b, d, name + ".in_gathered", st.saved_input, TensorKind::kActivation);
  } else {
    if (st.gathered)
      gemm_in = gathered = AllGatherSeq(b, d, name + ".in_gathered", x, TensorKind::kActivation);
    // Blockwise and MXFP8 with sequence parallelism: the 16-bit shard stays
    // saved and backward quantizes its gathered copy column-wise.
    if (Fp8On(d)) {
      gemm_in = QuantizeInput(b, d, name + ".in", gemm_in, st.gathered ? nullptr : &st.saved_input);
    }
  }
  std::vector<TensorId> inputs = {gemm_in, gemm_weight};
  if (with_bias) inputs.push_back(st.bias);
  const OpId gemm = b.Gemm(name, inputs, outputs, {.m = d.s * d.b, .n = out, .k = in, .batch = 1});
  // TE's qkv_fprop and fc1_fprop: the GEMM runs chunk by chunk as the shards arrive.
  if (gathered != kNoTensor) Overlap(b, st, gathered, gemm, traces::TpOverlapMethod::kRingExchange);
  return st;
}

TensorId ColumnBackward(TraceBuilder& b, const Dims& d, const LinearState& st,
                        const std::vector<TensorId>& g_outputs) {
  // Megatron issues the input all-gather for the weight gradient first, then the
  // data gradient, its collective, and the weight gradient.
  TensorId wgrad_in = st.saved_input;
  if (st.gathered) {
    wgrad_in =
        AllGatherSeq(b, d, st.name + ".in_regathered", st.saved_input, TensorKind::kWorkspace);
  }
  const bool fp8 = st.fp8.row != kNoTensor;  // as the forward ran
  Fp8Grad g8;
  if (fp8) g8 = QuantizeGrad(b, d, st.name + ".out.grad", g_outputs, st.out);
  const TensorId g_in = b.Gradient(st.name + ".in.grad", d.Full(st.in), d.act);
  std::vector<TensorId> dgrad_inputs = fp8 ? std::vector<TensorId>{g8.row} : g_outputs;
  dgrad_inputs.push_back(fp8 ? st.fp8.col : st.weight);
  const OpId dgrad = b.Gemm(st.name + ".dgrad", dgrad_inputs, {g_in},
                            {.m = d.s * d.b, .n = st.in, .k = st.out, .batch = 1});
  // TE's qkv_dgrad and fc1_dgrad: the input's all-gather beside the data gradient.
  if (st.gathered) Overlap(b, st, wgrad_in, dgrad, traces::TpOverlapMethod::kBulk);
  TensorId g_x = g_in;
  if (st.gathered) {
    g_x = ReduceScatterSeq(b, d, st.name + ".in.grad_shard", g_in, TensorKind::kGradient);
  } else if (d.t > 1) {
    g_x = AllReduce(b, d, st.name + ".in.grad_reduced", g_in);
  }
  const bool collective = g_x != g_in;  // the data gradient's, beside the weight gradient
  if (fp8 && st.gathered) wgrad_in = ColumnwiseOf(b, d, st.name + ".in_regathered", wgrad_in);
  std::vector<TensorId> wgrad_inputs = {wgrad_in};
  if (fp8) {
    wgrad_inputs.push_back(g8.col);
  } else {
    wgrad_inputs.insert(wgrad_inputs.end(), g_outputs.begin(), g_outputs.end());
  }
  std::vector<TensorId> wgrad_outputs = {b.WeightGrad(st.weight, wgrad_inputs)};
  if (st.bias != kNoTensor) wgrad_outputs.push_back(b.WeightGrad(st.bias, wgrad_inputs));
  const OpId wgrad = b.Gemm(st.name + ".wgrad", wgrad_inputs, wgrad_outputs,
                            {.m = st.out, .n = st.in, .k = d.s * d.b, .batch = 1});
  // TE's qkv_wgrad and fc1_wgrad: the data gradient's reduce-scatter beside the weight gradient.
  if (collective) Overlap(b, st, g_x, wgrad, traces::TpOverlapMethod::kBulk);
  return g_x;
}

LinearState RowForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                       int64_t in, int64_t out, TensorId* output, bool input_saved_elsewhere) {
  LinearState st;
  st.name = name;
  st.saved_input = x;
  st.in = in;
  st.out = out;
  st.weight = b.Weight(name + ".weight", {out, in}, d.act);
  st.tp_overlap = d.tp_overlap;
  st.tp_async = d.tp_async;
  TensorId gemm_in = x, gemm_weight = st.weight;
  if (Fp8On(d)) {
    st.fp8 = Fp8Weights(b, st.weight);
    gemm_weight = st.fp8.row;
    // Delayed scaling cannot quantize again in backward (its scale is the
    // forward's): it saves an FP8 copy beside the original.
    st.requantize = input_saved_elsewhere && d.fp8 != traces::Fp8Recipe::kDelayed;
    gemm_in = QuantizeInput(b, d, name + ".in", x, st.requantize ? nullptr : &st.saved_input);
  }
  const TensorId partial = b.Activation(name + ".out", d.Full(out), d.act);
  const OpId gemm = b.Gemm(name, {gemm_in, gemm_weight}, {partial},
                           {.m = d.s * d.b, .n = out, .k = in, .batch = 1});
  *output = partial;
  if (d.sp) {
    *output = ReduceScatterSeq(b, d, name + ".out_shard", partial, TensorKind::kActivation);
    // TE's proj_fprop and fc2_fprop: each chunk's reduce-scatter beside the next chunk's GEMM.
    Overlap(b, st, *output, gemm, traces::TpOverlapMethod::kPipeline);
  } else if (d.t > 1) {
    *output = AllReduce(b, d, name + ".out_reduced", partial);
  }
  return st;
}

TensorId RowBackward(TraceBuilder& b, const Dims& d, const LinearState& st, TensorId g_output) {
  TensorId g_full = g_output;
  if (d.sp)
    g_full = AllGatherSeq(b, d, st.name + ".out.grad_full", g_output, TensorKind::kGradient);
  const bool fp8 = st.fp8.row != kNoTensor;  // as the forward ran
  Fp8Grad g8;
  if (fp8) g8 = QuantizeGrad(b, d, st.name + ".out.grad", {g_full}, st.out);
  const TensorId g_in = b.Gradient(st.name + ".in.grad", d.Full(st.in), d.act);
  const OpId dgrad =
      b.Gemm(st.name + ".dgrad", {fp8 ? g8.row : g_full, fp8 ? st.fp8.col : st.weight}, {g_in},
             {.m = d.s * d.b, .n = st.in, .k = st.out, .batch = 1});
  // TE's proj_dgrad and fc2_dgrad: the output gradient's shards arrive chunk by chunk.
  if (d.sp) Overlap(b, st, g_full, dgrad, traces::TpOverlapMethod::kRingExchange);
  const TensorId wgrad_in =
      st.requantize ? ColumnwiseOf(b, d, st.name + ".in", st.saved_input) : st.saved_input;
  std::vector<TensorId> wgrad_inputs = {wgrad_in, fp8 ? g8.col : g_full};
  const TensorId g_w = b.WeightGrad(st.weight, wgrad_inputs);
  b.Gemm(st.name + ".wgrad", wgrad_inputs, {g_w},
         {.m = st.out, .n = st.in, .k = d.s * d.b, .batch = 1});
  return g_in;
}

}  // namespace ssdtrain::models::detail

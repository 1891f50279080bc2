// Megatron-LM tensor-parallel linear layers and the collectives around them.
//
// Column-parallel (QKV, fc1, the vocabulary head): the weight's output rows are
// split across ranks; without sequence parallelism the input is replicated and
// the input gradient is all-reduced; with it the input is all-gathered before the
// gemm (and again in backward for the weight gradient) and the input gradient is
// reduce-scattered. Row-parallel (projection, fc2): the input columns are split;
// the output is all-reduced (or reduce-scattered with sequence parallelism) and
// in backward the output gradient is all-gathered with sequence parallelism.
// With t = 1 no collective is emitted.
//
// Under FP8 (Dims::fp8, models/detail/fp8.h) the GEMMs read FP8 copies of
// the input, the output gradient and the weight; with sequence parallelism
// the column-parallel input is quantized before its all-gather under the
// per-tensor recipes (Fp8Gathers: the FP8 shard saved, gathered again and
// transposed in backward), and all-gathered in 16 bits and quantized after
// under blockwise and MXFP8 (its 16-bit shard saved; models/README.md, "FP8").
#pragma once

#include <string>
#include <vector>

#include "models/detail/dims.h"
#include "models/detail/fp8.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

// What a linear layer's backward needs from its forward.
struct LinearState {
  std::string name;
  TensorId saved_input = kNoTensor;  // the input the weight gradient reads (a shard with SP)
  TensorId weight = kNoTensor;       // [out, in] on this rank
  TensorId bias = kNoTensor;         // [out], or kNoTensor
  int64_t in = 0;                    // gemm k in forward
  int64_t out = 0;                   // gemm n in forward
  bool gathered = false;             // column-parallel with SP: input all-gathered first
  // Its sequence-parallel collectives hide behind its GEMMs (TE's userbuffers:
  // Dims::tp_overlap of its forward, which its backward keeps).
  bool tp_overlap = false;
  // Its backward collectives run beside its GEMMs through NCCL (Megatron's
  // asynchronous tp backward: Dims::tp_async of its forward).
  bool tp_async = false;
  // FP8 (models/detail/fp8.h): the weight's copies the GEMMs read; and
  // whether saved_input is the 16-bit original, quantized again in backward.
  Fp8Weight fp8;
  bool requantize = false;
};

// Collectives over the tensor-parallel group. Each adds one kCollective op.
TensorId AllGatherSeq(TraceBuilder& b, const Dims& d, const std::string& name, TensorId shard,
                      TensorKind kind);
TensorId ReduceScatterSeq(TraceBuilder& b, const Dims& d, const std::string& name, TensorId full,
                          TensorKind kind);
// In place: the result is a view of `x`.
TensorId AllReduce(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x);

// `outputs` are made by the caller: the [s, b, out] result first, then any views of it.
// `weight` reuses an existing weight (a tied embedding) when not kNoTensor.
// `replicated_input`: x is already [s, b, in] on every rank (no gather even with
// SP), and its gradient is all-reduced.
LinearState ColumnForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                          int64_t in, int64_t out, const std::vector<TensorId>& outputs,
                          bool with_bias, TensorId weight = kNoTensor,
                          bool replicated_input = false);
// `g_outputs`: gradients of the outputs the forward consumers read (the views, or
// the result itself). Returns the input's gradient in the input's layout.
TensorId ColumnBackward(TraceBuilder& b, const Dims& d, const LinearState& st,
                        const std::vector<TensorId>& g_outputs);

// x is [s, b, in] on this rank. Returns the [s_local, b, out] output after the
// collective; the bias (if any) is added by the caller's dropout-add.
// `input_saved_elsewhere`: another op saves x for backward already (the
// attention's output, which its backward reads); under an FP8 recipe other
// than delayed the layer then keeps x itself and quantizes it again in
// backward (Megatron's save_original_input on linear_proj) instead of saving
// an FP8 copy.
LinearState RowForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                       int64_t in, int64_t out, TensorId* output,
                       bool input_saved_elsewhere = false);
TensorId RowBackward(TraceBuilder& b, const Dims& d, const LinearState& st, TensorId g_output);

}  // namespace ssdtrain::models::detail

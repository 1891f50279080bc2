// FP8 training's tensors and ops, as Transformer Engine's Linear and
// GroupedLinear make them under an FP8 recipe (traces/fp8.h has the recipes
// and the bytes; ../shared/TODAYS_LAYOUTS.md section 3 the sources):
// - forward: the 16-bit input is quantized by one op into the row-wise copy
//   the GEMM reads and, unless the layer keeps its original input, the
//   column-wise copy (stored [in, rows]) its weight gradient reads later, the
//   only one saved ("Discard row-wise data since it is not needed in backward
//   pass", TE linear.py); under current scaling the op reads its input twice
//   (the amax pass, then the cast);
// - backward: the output gradient is quantized by one op into the row-wise
//   copy the data gradient reads and the column-wise copy the weight gradient
//   reads; an input kept in 16 bits (save_original_input), or all-gathered in
//   FP8 with sequence parallelism, is made column-wise by one op first;
// - weights: each has a row-wise [out, in] and a column-wise [in, out] FP8
//   copy, resident all step (TE caches them across micro-batches) and
//   refreshed once a step by an optimizer-phase op (TraceBuilder::Finish).
// The GEMMs read only FP8 operands and write 16-bit outputs.
#pragma once

#include <string>
#include <vector>

#include "models/detail/dims.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

inline bool Fp8On(const Dims& d) { return d.fp8 != traces::Fp8Recipe::kOff; }
// Sequence parallelism's all-gather of a column-parallel input moves FP8: the
// per-tensor recipes, whose row-wise data transposes into the column-wise
// copy after the gather (TE: "All-gather is not supported with FP8
// column-wise data"); blockwise and MXFP8 copies are not transposable, so
// those gather the 16-bit input and quantize after.
inline bool Fp8Gathers(const Dims& d) {
  return d.fp8 == traces::Fp8Recipe::kDelayed || d.fp8 == traces::Fp8Recipe::kCurrent;
}

// A weight's FP8 copies: row-wise [out, in] (forward), column-wise [in, out]
// (the data gradient).
struct Fp8Weight {
  TensorId row = kNoTensor;
  TensorId col = kNoTensor;
};
Fp8Weight Fp8Weights(TraceBuilder& b, TensorId weight);

// Quantizes x [..., in] for a forward GEMM. Returns the row-wise operand; with
// `col` also the column-wise copy [in, rows] the weight gradient reads.
TensorId QuantizeInput(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                       TensorId* col);
// The column-wise copy [in, rows] of x [..., in] (16-bit: quantized; fp8:
// transposed), made in backward for the weight gradient.
TensorId ColumnwiseOf(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x);

// An output gradient's two FP8 copies (the data and the weight gradient's).
struct Fp8Grad {
  TensorId row = kNoTensor;
  TensorId col = kNoTensor;
};
// `g`: the gradient's parts as the forward's consumers produced them (one
// storage); their rows and total width make the copies.
Fp8Grad QuantizeGrad(TraceBuilder& b, const Dims& d, const std::string& name,
                     const std::vector<TensorId>& g, int64_t width);

}  // namespace ssdtrain::models::detail

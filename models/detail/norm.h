// LayerNorm / RMSNorm forward and backward. The backward reads the norm's input
// (saved) and its weight; it may fold in a residual gradient, as a fused
// "norm backward + add" kernel does, so the residual branch needs no extra op.
#pragma once

#include <string>

#include "models/detail/dims.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

// A norm over the last dimension of its input: the hidden size, or (MLA) a
// latent's rank; its weight is [2, width] (LayerNorm) or [width] (RMSNorm).
struct NormState {
  std::string name;
  TensorId input = kNoTensor;
  TensorId weight = kNoTensor;  // LayerNorm: [2, width] (scale and shift); RMSNorm: [width]
  // An RMSNorm run eagerly (Dims::eager_rmsnorm): what its backward reads, the
  // fp32 copy of the input (the input itself in fp32), the rsqrt per row and
  // the normalized rows cast back (the weight's product's input).
  bool eager = false;
  TensorId x_float = kNoTensor, rstd = kNoTensor, normed = kNoTensor;
};

TensorId NormForward(TraceBuilder& b, const Dims& d, NormKind kind, const std::string& name,
                     TensorId x, NormState* st);
// RMSNorm over each head's `d.d` elements of x [s, b, heads·d], weight [d.d] (Qwen3's
// q_norm and k_norm); its backward is NormBackward's.
TensorId HeadNormForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId x,
                         NormState* st);
// Returns the input's gradient (plus `g_residual` when it is not kNoTensor).
TensorId NormBackward(TraceBuilder& b, const Dims& d, const NormState& st, TensorId g_output,
                      TensorId g_residual);

}  // namespace ssdtrain::models::detail

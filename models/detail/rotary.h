// The rotary position embedding's ops on q and k: one fused op each way
// (Megatron-Core's and Transformer Engine's fused RoPE: each element read and
// written once in the activation dtype), or torchtitan's apply_rotary_emb in
// eager PyTorch (ModelConfig::rotary "complex": per tensor, a cast to fp32, a
// complex product with the frequencies and a cast back, each an op, and
// autograd's three steps back; models/README.md, "Block kernels").
#pragma once

#include "models/detail/dims.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

// q_in and k_in rotated into q_out and k_out (activations the caller made).
void RotaryForward(TraceBuilder& b, const Dims& d, bool complex, TensorId q_in, TensorId k_in,
                   TensorId q_out, TensorId k_out);
// The gradients of q_out and k_out into those of q_in and k_in (the caller's).
void RotaryBackward(TraceBuilder& b, const Dims& d, bool complex, TensorId g_q_out,
                    TensorId g_k_out, TensorId g_q_in, TensorId g_k_in);

}  // namespace ssdtrain::models::detail

// Multi-head latent attention between the block's first norm and its residual
// add (models/mla_config.h has the layout, the tensors saved and why).
#pragma once

#include "models/detail/attention.h"
#include "models/detail/dims.h"
#include "models/detail/linear.h"
#include "models/detail/norm.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

// A down projection, replicated over tp.
struct DuplicatedLinear {
  TensorId weight = kNoTensor;
  TensorId saved_input = kNoTensor;  // what its weight gradient reads (FP8: its own copy)
  Fp8Weight fp8;
};

struct MlaState {
  MlaSpec spec;
  TensorId x = kNoTensor;  // the norm output both down projections read [s_local, b, h]
  DuplicatedLinear q_down, kv_down;
  NormState q_norm, kv_norm;
  LinearState q_up;  // q_up from the query latent, or q_proj from x (no q_lora_rank)
  LinearState kv_up;
  TensorId k_pe = kNoTensor;  // the rotary key [s_local, b, dr] (a view of kv_down's output)
  AttentionState core;
  LinearState proj;
};

// `ln` is the block's first norm output [s_local, b, h]; `d` has d = dn + dr and
// dv = v_head_dim. Returns the projection's output in the residual stream's
// layout (before the residual add).
TensorId MlaAttentionForward(TraceBuilder& b, const Dims& d, const MlaSpec& spec, TensorId ln,
                             MlaState* st);
// From the projection output's gradient to the gradient of `ln`.
TensorId MlaAttentionBackward(TraceBuilder& b, const Dims& d, const MlaState& st, TensorId g_y);

}  // namespace ssdtrain::models::detail

// One transformer block (forward and backward) in Megatron-LM's pre-norm layout:
// x → norm → QKV → [q/k norm] → [rotary] → attention → projection → [dropout] + x
//   → [norm → Q, KV(encoder output) → attention → projection → [dropout] + ·]  (T5 decoder)
//   → norm → fc1 → GELU | ReLU | SwiGLU | GeGLU → fc2 → [dropout] + ·
// A parallel block (BlockStyle::parallel; GPT-J, Phi-2) instead runs
// x → norm → {QKV … projection, fc1 … fc2} on the one norm output, then adds
// both outputs (each through its dropout) to x; GPT-NeoX's (parallel_two_norms)
// gives fc1 a second norm of x. Gemma 2 (BlockStyle::post_norms) normalises each
// branch output again before its residual add: four norms per block.
// Multi-head latent attention (BlockStyle::mla; detail/mla.h) replaces QKV …
// projection.
// The forward records in BlockState what its backward reads; the backward emits
// its ops in reverse, each reading the saved tensors it needs and the incoming
// gradient.
#pragma once

#include "models/detail/attention.h"
#include "models/detail/dims.h"
#include "models/detail/linear.h"
#include "models/detail/mla.h"
#include "models/detail/moe.h"
#include "models/detail/norm.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

// "Projection output [+ bias] → dropout → + residual", or a plain residual add.
struct ResidualState {
  std::string name;
  TensorId bias = kNoTensor;  // the row-parallel layer's bias (a weight), or none
  TensorId mask = kNoTensor;  // uint8 dropout mask, or none
};

struct AttentionSublayer {
  NormState norm;
  bool mla = false;  // multi-head latent attention (`latent`) in place of q ... proj
  MlaState latent;
  LinearState q;  // self-attention: the fused QKV layer (wq when separate); cross-attention: Q only
  LinearState kv;         // cross-attention only: K and V from the encoder output
  bool separate = false;  // q, k and v from their own layers: q, k and v here
  LinearState k, v;
  bool qk_norm = false;
  NormState q_norm, k_norm;  // Qwen3: per-head RMSNorm of q and k, before rotary
  bool rotary = false;
  bool complex_rotary = false;  // torchtitan's three ops each way (BlockStyle::complex_rotary)
  TensorId q_pre = kNoTensor, k_pre = kNoTensor;  // rotary inputs (views of the QKV output)
  // torchtitan's repeat_kv (BlockStyle::repeat_kv, fewer kv heads than query
  // heads): attention runs on copies of k and v at every query head, `core`
  // with as many key/value heads as query heads; k_kv and v_kv the originals.
  bool kv_repeated = false;
  TensorId k_kv = kNoTensor, v_kv = kNoTensor;
  AttentionState core;
  LinearState proj;
  bool post_norm = false;  // Gemma 2: a norm of the projection output before the residual
  NormState post;
  ResidualState residual;
};

struct MlpSublayer {
  NormState norm;
  LinearState fc1;  // fc1 (the gate w1 when separate)
  MlpKind kind = MlpKind::kGelu;
  TensorId act_saved = kNoTensor;  // what the activation's backward reads
  // Separate projections (gated MLPs): the up layer w3, its output, and the
  // gate's activation output, which the product's backward reads.
  bool separate = false;
  LinearState up;
  TensorId up_out = kNoTensor, gate_act = kNoTensor;
  LinearState fc2;
  bool moe = false;  // a routed MLP (moe) replaces fc1 … fc2
  MoeState routed;
  bool post_norm = false;  // Gemma 2: a norm of the MLP output before the residual
  NormState post;
  ResidualState residual;
};

struct BlockState {
  bool parallel = false;   // self.norm is the shared norm; mlp.norm is unused, unless
  bool two_norms = false;  // the MLP reads its own norm of the block input (GPT-NeoX)
  AttentionSublayer self;
  bool has_cross = false;
  AttentionSublayer cross;
  MlpSublayer mlp;
};

// x: the residual stream [s_local, b, h]. `rel_bias`: T5's position bias for the
// self-attention, or kNoTensor. `encoder_out`: the encoder's output for a T5
// decoder block (adds cross-attention), or kNoTensor. `moe`: the block's routed
// MLP (detail/moe.h) in place of the dense one, or null. Returns the block output.
TensorId BlockForward(TraceBuilder& b, const Dims& d, const BlockStyle& style, TensorId x,
                      TensorId rel_bias, TensorId encoder_out, BlockState* st,
                      const MoeSpec* moe = nullptr);
// Returns the gradient of the block input. `*g_rel_bias` and `*g_encoder_out` are
// running sums over the blocks, read and replaced where the block uses them.
TensorId BlockBackward(TraceBuilder& b, const Dims& d, const BlockState& st, TensorId g_out,
                       TensorId* g_rel_bias, TensorId* g_encoder_out);

// A gradient reaching a tensor that several blocks read: the first one is kept,
// later ones are added to it by one elementwise op. Returns the running sum.
TensorId AccumulateGrad(TraceBuilder& b, const std::string& name, TensorId sum, TensorId part);

}  // namespace ssdtrain::models::detail

// The routed MLP of a mixture-of-experts block (models/moe_config.h has the
// config side). On the norm output x [s_local, b, h], with T = s·b tokens:
//   [all-gather x over tp with SP] → router gemm [T, E] → softmax or sigmoid (fp32) + top-k
//   → permute (x rows to their k experts, a [R, h] buffer and its int64 row map,
//   R = Σ tokens_e) → the rank's experts as grouped GEMMs: fc1 [R, 2f] → SwiGLU
//   → fc2 [R, h] → unpermute (each row times its router weight, summed back to [s, b, h])
//   With ep > 1 the permuted rows go to their experts' ranks by an all-to-all
//   (moe.dispatch), this rank runs its E/ep experts at the rows it receives, and
//   a second all-to-all (moe.combine) returns the outputs before the unpermute;
//   the backward runs both all-to-alls on the gradients.
//   [+ shared expert on all T tokens, optionally through a sigmoid gate]
//   → [all-reduce, or reduce-scatter with SP, over tp].
// The routed experts run as Megatron-Core's grouped MLP (--moe-grouped-gemm,
// GroupedMLP / TEGroupedMLP): one weight per projection holding every local
// expert's ([E_local, 2f, h] and [E_local, h, f]), one grouped GEMM per
// projection over the R permuted rows, each expert's rows a contiguous slice,
// and the activation function over all R rows at once. So a layer has the
// same ops at 8 experts as at 256 (their bytes and FLOPs are the sum over the
// experts). The GEMM's shape is the grouped kernel's: batch E_local of the
// most rows an expert runs; its FLOPs are the exact sum. Under an FP8 recipe
// the grouped tensors carry one set of scales, where Transformer Engine keeps
// one per expert split (a per-tensor recipe: 4 bytes per expert; blockwise
// activations: the split's last partial block of 128 rows).
// Experts are split over tp as the dense MLP is (f = width / tp per rank); the
// router is replicated. The backward runs the same in reverse; the router's
// gradient and the dispatch gradient are summed into the norm output's gradient.
#pragma once

#include <vector>

#include "models/detail/dims.h"
#include "models/detail/fp8.h"
#include "models/detail/trace_builder.h"
#include "models/model_config.h"

namespace ssdtrain::models::detail {

// One MoE layer's sizes on one tensor-parallel rank.
struct MoeSpec {
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t ffn = 0;         // each expert's width on this rank
  int64_t shared_ffn = 0;  // the shared expert's width on this rank; 0: none
  bool shared_gate = false;
  bool sigmoid = false;         // sigmoid scores (DeepSeek-V3), else softmax
  bool bias = false;            // gpt-oss: biases on the router and on every routed expert's gemms
  bool clamp = false;           // gpt-oss: the routed experts' SwiGLU clamped (swiglu_limit)
  std::vector<int64_t> tokens;  // per expert this rank runs: the rows it receives
  // Expert parallelism: ep > 1 holds experts.size() = E/ep of the E experts,
  // each at the tokens of all ep ranks; `routed` rows leave this rank's permute.
  int64_t ep = 1;
  int64_t routed = 0;  // Σ ExpertTokens over all E experts: this rank's dispatched rows
};

MoeSpec MoeSpecFor(const ModelConfig& c);

// A SwiGLU FFN over `rows` rows: the shared expert, or the rank's routed
// experts grouped (`groups` of them, the most rows one runs `group_rows`).
struct ExpertState {
  std::string name;
  std::vector<int64_t> rows;  // the row shape: {R} or {s, b}
  int64_t ffn = 0;
  int64_t groups = 1;      // experts in the grouped GEMMs; 1: a plain FFN
  int64_t group_rows = 0;  // the GEMMs' m: the most rows one expert runs
  TensorId in = kNoTensor, fc1_weight = kNoTensor, fc1_out = kNoTensor;
  TensorId act = kNoTensor, fc2_weight = kNoTensor, out = kNoTensor;
  TensorId fc1_bias = kNoTensor, fc2_bias = kNoTensor;  // gpt-oss's, or none
  bool clamp = false;
  // What the weight gradients read: `in` and `act`, or under FP8 their
  // column-wise copies (models/detail/fp8.h); the weights' FP8 copies.
  TensorId fc1_saved = kNoTensor, fc2_saved = kNoTensor;
  Fp8Weight fc1_fp8, fc2_fp8;
};

struct MoeState {
  MoeSpec spec;
  TensorId x = kNoTensor;  // the router's and experts' input [s, b, h] (gathered with SP)
  TensorId router_weight = kNoTensor, router_bias = kNoTensor;
  TensorId scores = kNoTensor, weights = kNoTensor, indices = kNoTensor;
  TensorId row_map = kNoTensor;
  TensorId returned = kNoTensor;  // ep > 1: the combine all-to-all's output [routed, h]
  ExpertState experts;            // the routed experts, grouped
  bool shared = false;
  ExpertState shared_expert;
  TensorId gate_weight = kNoTensor, gate = kNoTensor, shared_raw = kNoTensor;
};

// `ln` is the MLP norm's output [s_local, b, h]; returns the branch output in the
// residual stream's layout.
TensorId MoeBranchForward(TraceBuilder& b, const Dims& d, const MoeSpec& spec, TensorId ln,
                          MoeState* st);
// Returns the gradient of `ln`.
TensorId MoeBranchBackward(TraceBuilder& b, const Dims& d, const MoeState& st, TensorId g_y);

}  // namespace ssdtrain::models::detail

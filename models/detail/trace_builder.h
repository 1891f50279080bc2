// TraceBuilder: appends tensors and ops to a trace in issue order and keeps the
// producer/consumer tables consistent, so the family builders only describe the
// model. Linear time: every call is O(its inputs and outputs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "traces/fp8.h"
#include "traces/trace.h"

namespace ssdtrain::models::detail {

using traces::DType;
using traces::GemmDims;
using traces::OpId;
using traces::OpKind;
using traces::Phase;
using traces::TensorId;
using traces::TensorKind;

inline constexpr TensorId kNoTensor = -1;

// Saved activations smaller than this are never offloadable: one such I/O costs
// more in request overhead than the memory it frees (see models/README.md).
inline constexpr int64_t kMinOffloadBytes = 64 * 1024;
// Adam with fp32 master weights: master copy, first and second moments (3 × 4 bytes
// per parameter); without mixed precision the weights are the master copy.
inline constexpr int64_t kAdamStateWordsMixed = 3;
// Floating-point operations of one Adam update per parameter (moments, bias
// correction, sqrt, divide, weight decay, update).
inline constexpr int64_t kAdamFlopsPerParam = 12;
// Momentum SGD per parameter: buf = μ·buf + g (2), w -= lr·buf (2).
inline constexpr int64_t kSgdFlopsPerParam = 4;

// The optimizer ops' accounting: per layer's weights one state tensor of
// ceil(state_words_per_param × params / shards) elements of state_dtype
// (ZeRO stage 1: each rank holds 1/shards of it and updates as much) and one
// op, or with `master_passes` Megatron-LM's mixed-precision step as its
// passes (AddMasterWeightPasses in trace_builder.cc; models/README.md,
// "Optimizer").
struct OptimizerSpec {
  std::string name = "adam";  // the update op's name
  int64_t state_words_per_param = kAdamStateWordsMixed;
  DType state_dtype = DType::kFp32;
  int64_t flops_per_param = kAdamFlopsPerParam;
  int64_t shards = 1;
  // The routed experts' state (traces::IsRoutedExpert): ZeRO-1 with ep shards
  // it over the expert-data-parallel group (traces::Layout::
  // ExpertOptimizerShards); equal to `shards` otherwise.
  int64_t expert_shards = 1;
  // Megatron's Float16OptimizerWithFloat16Params (ModelConfig::optimizer_step
  // "megatron" with fp32 master weights): copy the 16-bit gradients to fp32,
  // unscale and check them (`loss_scaling`: fp16's loss scaler; bf16 has
  // none), take their norm (--clip-grad), update the fp32 master weights,
  // copy them to the 16-bit weights. Off: one fused pass.
  bool master_passes = false;
  bool loss_scaling = false;
  // The main gradients' dtype (models::GradDType): at ZeRO 0 and 1 the
  // weight gradients backward writes; at 2 and 3 the reduce-scatters' and
  // the shards' (zero_shard.cc casts to it). fp32 main gradients need no
  // copy to fp32 in the master passes.
  DType grad_dtype = DType::kFp16;
};

// ZeRO-2/3's own ops (models/detail/zero_shard.cc; traces/layout.h has the
// stages): at stage 2 and 3 each unit's gradients (a block's, or one weight
// outside the blocks: the embedding, the output layer, the final norm) are
// reduce-scattered into shards of 1/shards once backward has completed them,
// the full gradients then being transient; at stage 3 the weights are held as
// shards and each unit's are all-gathered into transient full copies before
// each run of its ops (forward, backward), `prefetch` units ahead.
struct ZeroSpec {
  int64_t stage = 0;
  int64_t shards = 1;  // the shard group's ranks
  // The routed experts' (traces::IsRoutedExpert) shard group with ep > 1:
  // the expert-data-parallel ranks (traces::Layout::ExpertGradientShards).
  // Their weights and gradients are units of their own, gathered and
  // reduce-scattered over it by ops in their scope (L<layer>.experts.zero_...,
  // traces/collective_kind.h). Equal to `shards` otherwise.
  int64_t expert_shards = 1;
  int64_t prefetch = 1;          // stage 3: units gathered ahead of the one computing
  bool defer_grad_sync = false;  // the reduce-scatters once, as the first optimizer ops
  // Stage 3 with fp32 master weights (models::MasterWeightsAreShards): the
  // shards are held in fp32, and each gather casts them to the weights'
  // dtype first (zero_shard.cc).
  bool fp32_shards = false;
};

class TraceBuilder {
 public:
  TraceBuilder(traces::Header header, size_t expected_tensors, size_t expected_ops);

  // Context applied to the tensors and ops created next.
  void SetLayer(int layer) { layer_ = layer; }
  void SetPhase(Phase phase) { phase_ = phase; }
  // The optimizer Finish() adds (default: Adam with fp32 master weights).
  void SetOptimizer(const OptimizerSpec& spec) { optimizer_ = spec; }
  // The ZeRO sharding Finish() applies (default: none).
  void SetZero(const ZeroSpec& spec) { zero_ = spec; }
  int layer() const { return layer_; }
  int stage() const { return static_cast<int>(header_.stage); }

  // Tensors. Names get the prefix "L<layer>." inside blocks. Bytes follow shape × dtype
  // (fp8: with the header recipe's scales, traces/fp8.h).
  TensorId Activation(const std::string& name, std::vector<int64_t> shape, DType dtype);
  TensorId Workspace(const std::string& name, std::vector<int64_t> shape, DType dtype);
  TensorId Gradient(const std::string& name, std::vector<int64_t> shape, DType dtype);
  TensorId Input(const std::string& name, std::vector<int64_t> shape, DType dtype);
  // A parameter of the current layer: no producer, updated by that layer's optimizer op.
  TensorId Weight(const std::string& name, std::vector<int64_t> shape, DType dtype);
  // An FP8 copy of `weight` (models/detail/fp8.h) of `shape`: resident all
  // step (no producer), its bytes with the recipe's 2-D weight scales; Finish
  // refreshes every copy in the optimizer phase, after its layer's update.
  TensorId Fp8WeightCopy(TensorId weight, const std::string& name, std::vector<int64_t> shape);
  // Sets an FP8 tensor's bytes where its scales are not Fp8Bytes's: one
  // all-gathered from shards under a per-tensor recipe carries each shard's
  // scale (traces/fp8.h). Before any op reads or writes it.
  void SetGatheredFp8Bytes(TensorId id, int64_t bytes);
  // A view sharing `root`'s storage (alias_of); the op that produces root lists it too.
  // Of root's kind, or of `kind` (a gradient an op writes over a saved activation in place).
  TensorId View(const std::string& name, TensorId root, std::vector<int64_t> shape,
                std::optional<TensorKind> kind = std::nullopt);

  // Appends an op in the current phase and layer. bytes_read sums the inputs;
  // bytes_written sums the outputs, except views of another output (no new bytes).
  // An input must not be listed twice.
  OpId Op(const std::string& name, OpKind kind, const std::vector<TensorId>& inputs,
          const std::vector<TensorId>& outputs, int64_t flops,
          std::optional<GemmDims> gemm = std::nullopt);
  // A gemm op: flops 2·m·n·k·batch; an FP8 GEMM (GemmDims::fp8) when its
  // first input is fp8.
  OpId Gemm(const std::string& name, const std::vector<TensorId>& inputs,
            const std::vector<TensorId>& outputs, GemmDims dims);
  // A grouped gemm: `dims` is the kernel's shape (batch groups of the largest
  // group's m or k), `flops` the groups' exact sum.
  OpId Gemm(const std::string& name, const std::vector<TensorId>& inputs,
            const std::vector<TensorId>& outputs, GemmDims dims, int64_t flops);

  // The gradient of `weight` that the next backward op writes: in the
  // optimizer's grad_dtype below ZeRO-2 (Megatron's main_grad), else in the
  // weight's dtype (FSDP casts at the reduce-scatter). Gradients of a
  // weight used several times accumulate: the previous partial gradient, if any,
  // is appended to `inputs` and the new tensor replaces it as the weight's gradient.
  TensorId WeightGrad(TensorId weight, std::vector<TensorId>& inputs);

  const traces::Tensor& tensor(TensorId id) const { return trace_.tensors[Index(id)]; }
  traces::Op& op(OpId id) { return trace_.ops[Index(id)]; }
  const std::vector<int64_t>& shape(TensorId id) const { return tensor(id).shape; }

  // Adds one optimizer op per layer's weights (in layer order, the non-block
  // weights first) and applies the trace-wide rules: saved_for_backward, the
  // `layer` of activations, offloadable. The builder is spent afterwards.
  traces::Trace Finish();

 private:
  static size_t Index(int64_t id) { return static_cast<size_t>(id); }
  TensorId AddTensor(const std::string& name, std::vector<int64_t> shape, DType dtype,
                     TensorKind kind, traces::Fp8Blocks blocks = traces::Fp8Blocks::kVector);
  std::string Prefixed(const std::string& name) const;
  void AddOptimizerOps();
  // One layer's weights, updated by `updated` parameters' worth on this rank.
  struct OptimizerGroup {
    std::vector<TensorId> weights, grads;
    int64_t params = 0, updated = 0, weight_bytes = 0;
  };
  void AddMasterWeightPasses(const OptimizerGroup& g, TensorId state);
  // The FP8 copies of the group's weights, quantized from the updated weights.
  void AddFp8WeightQuantize(const OptimizerGroup& g);
  // ZeRO-2/3 (zero_shard.cc): shards the weights (stage 3), inserts the
  // gathers and reduce-scatters, points last_grad_ at the gradient shards.
  void ShardForZero();
  friend class ZeroSharder;  // ShardForZero's steps (zero_shard.cc)
  // A weight's parameters (its elements before any sharding).
  int64_t Elements(TensorId weight) const;

  traces::Header header_;
  traces::Trace trace_;
  int layer_ = traces::kNoLayer;
  Phase phase_ = Phase::kForward;
  OptimizerSpec optimizer_;
  ZeroSpec zero_;
  std::vector<int64_t> sharded_elements_;  // per tensor id: a sharded weight's elements, else 0
  std::vector<TensorId> weights_;          // in creation order
  traces::Fp8Recipe fp8_ = traces::Fp8Recipe::kOff;  // the header's
  std::vector<std::vector<TensorId>> fp8_copies_;    // per weight id: its FP8 copies
  std::vector<TensorId> last_grad_;                  // per tensor id: the weight's current gradient
  std::vector<int> grad_count_;  // per tensor id: partial gradients made after the first
};

}  // namespace ssdtrain::models::detail

// The operator trace: one training step of one micro-batch (or one pipeline
// stage of it). The contract between the simulator and the executor; the
// written spec is traces/FORMAT.md.
//
// Units: time in nanoseconds, sizes in bytes, work in floating-point operations.
// Ids are row indices: tensors[i].id == i and ops[i].id == i, and ids are never
// reused (one row per tensor lifetime). Ops are listed in issue order on the
// compute stream: every op comes after the producers of its inputs.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ssdtrain::traces {

inline constexpr std::string_view kTraceFormatName = "ssdtrain-trace";
inline constexpr int kTraceFormatVersion = 1;

using TensorId = int64_t;
using OpId = int64_t;
inline constexpr OpId kNoOp = -1;
// Layer index used for everything outside the transformer blocks (embedding, head, loss).
inline constexpr int kNoLayer = -1;

// kFp8: E4M3 or E5M2, one byte per element, stored with its scaling factors
// (traces/fp8.h: its bytes are Fp8Bytes, not elements alone).
enum class DType { kFp16, kBf16, kFp32, kUint8, kInt32, kInt64, kFp8 };
enum class TensorKind { kActivation, kWeight, kGradient, kWorkspace, kOptimizerState, kInput };
enum class OpKind {
  kGemm,         // a (batched) matrix product; Op::gemm holds its dims
  kAttention,    // a fused (flash) attention kernel; flops counted, no gemm dims
  kElementwise,  // memory-bound: add, gelu, swiglu, rotary, bias, ...
  kNorm,         // layernorm / rmsnorm
  kSoftmax,
  kDropout,
  kEmbedding,
  kLoss,
  kCollective,  // tp all-reduce / all-gather / reduce-scatter; ep all-to-all
  kSend,        // pipeline activation send to the next stage
  kRecv,        // pipeline activation receive from the previous stage
  kOptimizer,
};
enum class Phase { kForward, kBackward, kOptimizer };
enum class EdgeKind { kOrder, kSync };

std::string_view ToString(DType v);
std::string_view ToString(TensorKind v);
std::string_view ToString(OpKind v);
std::string_view ToString(Phase v);
std::string_view ToString(EdgeKind v);
std::optional<DType> ParseDType(std::string_view s);
std::optional<TensorKind> ParseTensorKind(std::string_view s);
std::optional<OpKind> ParseOpKind(std::string_view s);
std::optional<Phase> ParsePhase(std::string_view s);
std::optional<EdgeKind> ParseEdgeKind(std::string_view s);
// Bytes per element: 2 for fp16/bf16, 4 for fp32/int32, 1 for uint8 and fp8, 8 for int64.
int64_t DTypeSize(DType v);

struct Tensor {
  TensorId id = 0;
  std::string name;
  int64_t bytes = 0;
  DType dtype = DType::kFp16;
  std::vector<int64_t> shape;
  TensorKind kind = TensorKind::kActivation;
  OpId producer = kNoOp;        // kNoOp for weights and step inputs
  std::vector<OpId> consumers;  // in issue order
  bool saved_for_backward = false;
  std::optional<TensorId> alias_of;  // a view: shares the storage of that tensor
  int layer = kNoLayer;
  int micro_batch = 0;
  bool offloadable = false;
};

struct GemmDims {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  // Its operands are FP8 (traces/fp8.h; the header names the recipe): it
  // runs at the GPU's FP8 rate, its output 16-bit. JSON: written when true.
  bool fp8 = false;
  bool operator==(const GemmDims&) const = default;
};

// How a tensor-parallel collective hides behind the GEMM beside it when
// Transformer Engine's userbuffers overlap is on (Megatron-Core's
// --tp-comm-overlap, NeMo's ub_tp_comm_overlap; TE's
// pytorch/module/base.py, initialize_ub): the sequence-parallel all-gather
// before a column-parallel GEMM (and before a row-parallel layer's data
// gradient) as a ring exchange, the reduce-scatter after a row-parallel GEMM
// as a pipeline of chunks, and a column-parallel layer's backward collectives
// in bulk beside its data and weight gradients. Without userbuffers, `async`:
// those same backward collectives launched through NCCL beside the GEMM
// (Megatron's asynchronous tp backward; header tp_backward_overlap).
// sim/op_cost.h prices each.
enum class TpOverlapMethod { kRingExchange, kPipeline, kBulk, kAsync };
std::string_view ToString(TpOverlapMethod v);
std::optional<TpOverlapMethod> ParseTpOverlapMethod(std::string_view s);

struct TpOverlap {
  TpOverlapMethod method = TpOverlapMethod::kBulk;
  GemmDims gemm;  // the GEMM it overlaps (its dims, so the cost needs no op id)
  bool operator==(const TpOverlap&) const = default;
};

// Which of the (query, key) pairs a fused attention op's FLOPs count its
// kernel computes. The trace counts every query against every key (Megatron's
// convention, no causal halving); kFull computes them all; kCausal computes a
// causal mask's, the kernel skipping the blocks above the diagonal (half);
// kHalf computes half without a mask: context parallelism's ring steps off
// the diagonal under a causal mask (Transformer Engine's load-balanced ring:
// all the rank's queries against half the arriving keys, or half its queries
// against all of them; models/detail/ring_attention.h).
enum class AttentionMask { kFull, kCausal, kHalf };
std::string_view ToString(AttentionMask v);
std::optional<AttentionMask> ParseAttentionMask(std::string_view s);

// A fused attention kernel's call, on the kAttention ops the model builder
// writes: the sequence length its queries run at and its mask.
// sim/op_cost.h prices it on the hardware's curves for the trace's kernel
// (Header::attention_kernel); ops without one (traces read from PyTorch) are
// priced by FLOPs alone.
struct AttentionCall {
  int64_t seq_len = 0;
  AttentionMask mask = AttentionMask::kFull;
  bool operator==(const AttentionCall&) const = default;
};

struct Op {
  OpId id = 0;
  std::string name;
  OpKind kind = OpKind::kElementwise;
  Phase phase = Phase::kForward;
  int layer = kNoLayer;
  int micro_batch = 0;
  int stage = 0;
  int stream = 0;  // 0 is the compute stream
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  int64_t flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  std::optional<GemmDims> gemm;
  std::optional<int64_t> measured_ns;      // a measured duration, when one is known
  std::optional<TpOverlap> tp_overlap;     // a collective hidden behind a GEMM
  std::optional<AttentionCall> attention;  // a fused attention kernel's length and mask
};

// An ordering or cross-stream sync dependency. Data dependencies are not listed:
// they follow from the tensors' producer and consumers.
struct Edge {
  OpId from = 0;
  OpId to = 0;
  EdgeKind kind = EdgeKind::kOrder;
};

// How a llama-family block runs its rotary embedding, grouped-query attention
// and RMSNorms (models/README.md, "Block kernels"; models: ModelConfig::rotary,
// gqa, norm), as a trace's header and a plan name them: each field "" for its
// default (rotary "fused", gqa "native", norm "fused") or its other value
// (kBlockKernels: "complex", "repeat", "eager").
struct BlockKernels {
  std::string rotary;
  std::string gqa;
  std::string norm;
  bool operator==(const BlockKernels&) const = default;
};
// Each block kernel's field name, default and other value.
struct BlockKernel {
  std::string_view field;
  std::string_view default_value;
  std::string_view other_value;
  std::string BlockKernels::*member;
};
inline constexpr std::array<BlockKernel, 3> kBlockKernels = {{
    {"rotary", "fused", "complex", &BlockKernels::rotary},
    {"gqa", "native", "repeat", &BlockKernels::gqa},
    {"norm", "fused", "eager", &BlockKernels::norm},
}};
// The value of `k` in `b`, its default where unset.
inline std::string_view KernelValue(const BlockKernels& b, const BlockKernel& k) {
  return (b.*k.member).empty() ? k.default_value : std::string_view(b.*k.member);
}
// What `value` sets `k` to in a BlockKernels ("" for the default); nullopt
// unless it is the default or the other value.
inline std::optional<std::string> ParseBlockKernel(const BlockKernel& k, std::string_view value) {
  if (value.empty() || value == k.default_value) return std::string();
  if (value == k.other_value) return std::string(value);
  return std::nullopt;
}

struct Header {
  std::string model;   // the config's name, e.g. "gpt-1.3b"
  std::string family;  // gpt, bert, t5, llama
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t layers = 0;  // transformer blocks in the whole model
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int64_t seq_len = 0;
  int64_t micro_batch = 0;
  int64_t tp = 1;
  bool sequence_parallel = false;
  // Transformer Engine's userbuffers overlap of the sequence-parallel
  // collectives (models: ModelConfig::tp_comm_overlap; its ops carry
  // Op::tp_overlap). JSON: optional, written when true.
  bool tp_comm_overlap = false;
  // Megatron's asynchronous tensor-parallel backward (models:
  // ModelConfig::tp_backward_overlap; tp > 1 only): each column-parallel
  // layer's backward collectives carry Op::tp_overlap `async`. JSON: optional,
  // written when true; a trace without it ran them in order.
  bool tp_backward_overlap = false;
  // Context-parallel degree (traces/layout.h): the sequence is cut over cp
  // ranks, this trace holding seq_len / cp of its tokens (seq_len is the
  // whole sequence's), attention running as a ring over the cp ranks with its
  // K/V exchanges as ops on kCpRingStream (traces/collective_kind.h). 1: none.
  int64_t cp = 1;
  int64_t pp = 1;
  // Expert-parallel degree: the routed experts of each MoE layer are spread
  // over ep ranks, this trace holding E/ep of them, with an all-to-all
  // (traces/collective_kind.h) before and after them. 1 for dense models.
  int64_t ep = 1;
  int64_t stage = 0;        // this trace's pipeline stage
  int64_t first_layer = 0;  // blocks [first_layer, first_layer + stage_layers) live here
  int64_t stage_layers = 0;
  // The pipeline's split (traces/layout.h): the first and the last stage's
  // blocks where the layout sets them, 0 where the stages split evenly (or as
  // the stages between). JSON: optional, written when set.
  int64_t pp_first_layers = 0;
  int64_t pp_last_layers = 0;
  std::string dtype = "fp16";
  std::string attention = "standard";  // standard or flash
  // The fused attention kernel flash attention runs as, by the name the
  // hardware's gpu.attention_kernels give its curves (flash2, cudnn, flash3
  // in the DGX H100 preset); "" the hardware's default attention curve.
  // Prices the ops (sim/op_cost.h), changes none: not in the fingerprint.
  // JSON: optional, written when set.
  std::string attention_kernel;
  // The blocks' projections (models: ModelConfig::projections), "fused" or
  // "separate" (torchtitan's wq, wk, wv, w1, w3). JSON: written when separate.
  std::string projections = "fused";
  // How the llama family's blocks run their rotary embedding, grouped-query
  // attention and RMSNorms (BlockKernels; models: ModelConfig::rotary, gqa,
  // norm). JSON: each written where not the default.
  BlockKernels block_kernels;
  // The weight gradients' dtype where the model config sets one (models:
  // ModelConfig::grad_dtype, "Gradient dtype"); "": the config's default for
  // its dtype. JSON: optional, written when set.
  std::string grad_dtype;
  // FP8 training (traces/fp8.h): the Transformer Engine recipe the linear
  // layers run under, "delayed", "current", "blockwise" or "mxfp8"; "" none.
  // Its GEMMs read fp8 tensors (their inputs quantized by ops named
  // ...quantize, the weights' FP8 copies refreshed by the optimizer phase).
  std::string fp8;
  // Where the weight gradients live (traces/storage_plan.h, "Residency"):
  // "persistent" (a buffer resident all step, Megatron-LM's contiguous grad
  // buffer) or "set_to_none" (each allocated by its first writer in backward,
  // freed after the optimizer: PyTorch's zero_grad(set_to_none=True)).
  std::string weight_grads = "persistent";
  // ZeRO (traces/layout.h): the stage (0 to 3) and the ranks of the shard
  // group the weights (stage 3), gradients (2) and optimizer state (1) are
  // split over. At stage 2 and 3 the trace carries the sharding's own ops
  // (models/detail/zero_shard.h): each layer's reduce-scatter of its
  // gradients and, at stage 3, the all-gathers of its weights, named
  // ...zero_all_gather and ...zero_reduce_scatter (traces/collective_kind.h)
  // on their own streams (kZeroGatherStream, kZeroReduceStream).
  int64_t zero_stage = 0;
  int64_t zero_shards = 1;
  // ZeRO 2 and 3: the reduce-scatters run once a step, as the optimizer
  // phase's first ops, over gradients accumulated by every micro-batch (FSDP's
  // deferred gradient sync; models::ModelConfig::zero_defer_grad_sync).
  bool zero_defer_grad_sync = false;
  std::string time_unit = "ns";
  std::string size_unit = "bytes";
};

struct Trace {
  Header header;
  std::vector<Tensor> tensors;
  std::vector<Op> ops;
  std::vector<Edge> edges;

  const Tensor& tensor(TensorId id) const { return tensors[static_cast<size_t>(id)]; }
  const Op& op(OpId id) const { return ops[static_cast<size_t>(id)]; }
  // The tensor whose storage `id` uses: itself, or the root of its alias_of chain.
  TensorId StorageOf(TensorId id) const;
};

// The GEMM an `async` collective (Op::tp_overlap, TpOverlapMethod::kAsync) runs
// beside: the first later op of its phase that is a GEMM of the dims it names,
// before any other collective; kNoOp for any other op, or where none is found.
// The collective's inputs stay until that GEMM has run (their storages' last
// use, traces/storage_plan.h, "Memory"), as Megatron's backward holds them
// until it waits for the collective after the GEMM; and so a replay can run
// the GEMM while the collective's messages are exchanged (exec/README.md).
OpId AsyncOverlapGemm(const Trace& trace, OpId collective);

// A stable 64-bit fingerprint of the trace's structure (header dims, tensor ids,
// bytes, producers, op ids and kinds). A plan records it so that the executor can
// refuse a plan made for another trace.
uint64_t Fingerprint(const Trace& trace);
// "0x" and 16 lowercase hex digits: how plans and step reports write a fingerprint.
std::string FingerprintHex(uint64_t fingerprint);
// The inverse; nullopt unless `s` has exactly that shape.
std::optional<uint64_t> ParseFingerprintHex(std::string_view s);

}  // namespace ssdtrain::traces

#include "traces/trace.h"

#include <array>
#include <utility>

#include "traces/detail/enum_names.h"

namespace ssdtrain::traces {
namespace {

using detail::NameOf;
using detail::NameTable;

constexpr NameTable<DType, 7> kDTypeNames{{{DType::kFp16, "fp16"},
                                           {DType::kBf16, "bf16"},
                                           {DType::kFp32, "fp32"},
                                           {DType::kUint8, "uint8"},
                                           {DType::kInt32, "int32"},
                                           {DType::kInt64, "int64"},
                                           {DType::kFp8, "fp8"}}};
constexpr NameTable<TensorKind, 6> kTensorKindNames{
    {{TensorKind::kActivation, "activation"},
     {TensorKind::kWeight, "weight"},
     {TensorKind::kGradient, "gradient"},
     {TensorKind::kWorkspace, "workspace"},
     {TensorKind::kOptimizerState, "optimizer_state"},
     {TensorKind::kInput, "input"}}};
constexpr NameTable<OpKind, 12> kOpKindNames{{{OpKind::kGemm, "gemm"},
                                              {OpKind::kAttention, "attention"},
                                              {OpKind::kElementwise, "elementwise"},
                                              {OpKind::kNorm, "norm"},
                                              {OpKind::kSoftmax, "softmax"},
                                              {OpKind::kDropout, "dropout"},
                                              {OpKind::kEmbedding, "embedding"},
                                              {OpKind::kLoss, "loss"},
                                              {OpKind::kCollective, "collective"},
                                              {OpKind::kSend, "send"},
                                              {OpKind::kRecv, "recv"},
                                              {OpKind::kOptimizer, "optimizer"}}};
constexpr NameTable<Phase, 3> kPhaseNames{{{Phase::kForward, "forward"},
                                           {Phase::kBackward, "backward"},
                                           {Phase::kOptimizer, "optimizer"}}};
constexpr NameTable<TpOverlapMethod, 4> kTpOverlapMethodNames{
    {{TpOverlapMethod::kRingExchange, "ring_exchange"},
     {TpOverlapMethod::kPipeline, "pipeline"},
     {TpOverlapMethod::kBulk, "bulk"},
     {TpOverlapMethod::kAsync, "async"}}};
constexpr NameTable<AttentionMask, 3> kAttentionMaskNames{{{AttentionMask::kFull, "full"},
                                                           {AttentionMask::kCausal, "causal"},
                                                           {AttentionMask::kHalf, "half"}}};
constexpr NameTable<EdgeKind, 2> kEdgeKindNames{
    {{EdgeKind::kOrder, "order"}, {EdgeKind::kSync, "sync"}}};

// FNV-1a, 64 bit: stable across platforms and runs.
class Fnv1a {
 public:
  void Add(int64_t v) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= static_cast<uint64_t>(v >> (8 * i)) & 0xffu;
      hash_ *= kPrime;
    }
  }
  void Add(std::string_view s) {
    for (char c : s) {
      hash_ ^= static_cast<unsigned char>(c);
      hash_ *= kPrime;
    }
    Add(static_cast<int64_t>(s.size()));
  }
  uint64_t value() const { return hash_; }

 private:
  static constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ull;
  static constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t hash_ = kOffsetBasis;
};

}  // namespace

std::string_view ToString(DType v) { return NameOf(kDTypeNames, v); }
std::string_view ToString(TensorKind v) { return NameOf(kTensorKindNames, v); }
std::string_view ToString(OpKind v) { return NameOf(kOpKindNames, v); }
std::string_view ToString(Phase v) { return NameOf(kPhaseNames, v); }
std::string_view ToString(EdgeKind v) { return NameOf(kEdgeKindNames, v); }
std::optional<DType> ParseDType(std::string_view s) { return detail::ParseName(kDTypeNames, s); }
std::optional<TensorKind> ParseTensorKind(std::string_view s) {
  return detail::ParseName(kTensorKindNames, s);
}
std::optional<OpKind> ParseOpKind(std::string_view s) { return detail::ParseName(kOpKindNames, s); }
std::optional<Phase> ParsePhase(std::string_view s) { return detail::ParseName(kPhaseNames, s); }
std::optional<EdgeKind> ParseEdgeKind(std::string_view s) {
  return detail::ParseName(kEdgeKindNames, s);
}
std::string_view ToString(TpOverlapMethod v) { return NameOf(kTpOverlapMethodNames, v); }
std::string_view ToString(AttentionMask v) { return NameOf(kAttentionMaskNames, v); }
std::optional<AttentionMask> ParseAttentionMask(std::string_view s) {
  return detail::ParseName(kAttentionMaskNames, s);
}
std::optional<TpOverlapMethod> ParseTpOverlapMethod(std::string_view s) {
  return detail::ParseName(kTpOverlapMethodNames, s);
}

int64_t DTypeSize(DType v) {
  switch (v) {
    case DType::kFp16:
    case DType::kBf16:
      return 2;
    case DType::kFp32:
    case DType::kInt32:
      return 4;
    case DType::kUint8:
    case DType::kFp8:
      return 1;
    case DType::kInt64:
      return 8;
  }
  return 1;
}

TensorId Trace::StorageOf(TensorId id) const {
  // Validation rejects alias cycles, so the chain ends.
  while (tensor(id).alias_of.has_value()) id = *tensor(id).alias_of;
  return id;
}

uint64_t Fingerprint(const Trace& trace) {
  Fnv1a h;
  const Header& hd = trace.header;
  h.Add(hd.model);
  h.Add(hd.family);
  for (int64_t v : {hd.hidden, hd.heads, hd.kv_heads, hd.layers, hd.ffn_hidden, hd.vocab,
                    hd.seq_len, hd.micro_batch, hd.tp, hd.pp, hd.stage, hd.first_layer,
                    hd.stage_layers, static_cast<int64_t>(hd.sequence_parallel)}) {
    h.Add(v);
  }
  if (hd.ep != 1) h.Add(hd.ep);  // dense and ep-1 traces keep their fingerprints
  if (hd.cp != 1) {              // and so do traces without context parallelism
    h.Add(std::string_view("cp"));
    h.Add(hd.cp);
  }
  h.Add(hd.dtype);
  h.Add(hd.attention);
  if (!hd.fp8.empty()) h.Add(hd.fp8);
  if (hd.weight_grads != "persistent") h.Add(hd.weight_grads);  // older fingerprints stay
  if (hd.zero_stage >= 2) {  // so do ZeRO 0's and 1's (their state's bytes say the shards)
    h.Add(hd.zero_stage);
    h.Add(hd.zero_shards);
    if (hd.zero_defer_grad_sync) h.Add(std::string_view("defer_grad_sync"));
  }
  h.Add(static_cast<int64_t>(trace.tensors.size()));
  for (const Tensor& t : trace.tensors) {
    h.Add(t.bytes);
    h.Add(t.producer);
    h.Add(t.alias_of.value_or(-1));
    h.Add(static_cast<int64_t>(t.kind));
  }
  h.Add(static_cast<int64_t>(trace.ops.size()));
  for (const Op& op : trace.ops) {
    h.Add(static_cast<int64_t>(op.kind));
    h.Add(static_cast<int64_t>(op.phase));
    h.Add(static_cast<int64_t>(op.inputs.size()));
    h.Add(static_cast<int64_t>(op.outputs.size()));
    if (op.tp_overlap) {  // traces without the overlap keep their fingerprints
      h.Add(std::string_view("tp_overlap"));
      h.Add(static_cast<int64_t>(op.tp_overlap->method));
    }
    // Op::attention and Header::attention_kernel price ops and change none:
    // a plan made before either stays valid for the trace built with them.
  }
  return h.value();
}

OpId AsyncOverlapGemm(const Trace& trace, OpId collective) {
  if (collective < 0 || collective >= static_cast<OpId>(trace.ops.size())) return kNoOp;
  const Op& c = trace.op(collective);
  if (!c.tp_overlap || c.tp_overlap->method != TpOverlapMethod::kAsync) return kNoOp;
  for (size_t i = static_cast<size_t>(collective) + 1; i < trace.ops.size(); ++i) {
    const Op& op = trace.ops[i];
    if (op.phase != c.phase || op.kind == OpKind::kCollective) return kNoOp;
    if (op.kind == OpKind::kGemm && op.gemm && *op.gemm == c.tp_overlap->gemm) {
      return static_cast<OpId>(i);
    }
  }
  return kNoOp;
}

std::string FingerprintHex(uint64_t fingerprint) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "0x";
  for (int shift = 60; shift >= 0; shift -= 4) out += kDigits[(fingerprint >> shift) & 0xf];
  return out;
}

std::optional<uint64_t> ParseFingerprintHex(std::string_view s) {
  if (s.size() != 18 || s.substr(0, 2) != "0x") return std::nullopt;
  uint64_t v = 0;
  for (char c : s.substr(2)) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace ssdtrain::traces

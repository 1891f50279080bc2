#include "models/detail/trace_builder.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "traces/dp_buckets.h"

namespace ssdtrain::models::detail {
namespace {

// GCC 12 warns (-Wrestrict, a known false positive) on "L" + std::to_string(...).
std::string LayerPrefix(int layer) {
  std::string prefix(1, 'L');
  prefix.append(std::to_string(layer));
  prefix.push_back('.');
  return prefix;
}

}  // namespace

TraceBuilder::TraceBuilder(traces::Header header, size_t expected_tensors, size_t expected_ops)
    : header_(std::move(header)) {
  trace_.header = header_;
  fp8_ = traces::ParseFp8Recipe(header_.fp8).value_or(traces::Fp8Recipe::kOff);
  trace_.tensors.reserve(expected_tensors);
  trace_.ops.reserve(expected_ops);
  last_grad_.reserve(expected_tensors);
  grad_count_.reserve(expected_tensors);
}

std::string TraceBuilder::Prefixed(const std::string& name) const {
  if (layer_ == traces::kNoLayer) return name;
  std::string out = LayerPrefix(layer_);
  out.append(name);
  return out;
}

TensorId TraceBuilder::AddTensor(const std::string& name, std::vector<int64_t> shape, DType dtype,
                                 TensorKind kind, traces::Fp8Blocks blocks) {
  traces::Tensor t;
  t.id = static_cast<TensorId>(trace_.tensors.size());
  t.name = Prefixed(name);
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  t.bytes = dtype == DType::kFp8 ? traces::Fp8Bytes(fp8_, shape, blocks)
                                 : elements * traces::DTypeSize(dtype);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.kind = kind;
  t.layer = layer_;
  trace_.tensors.push_back(std::move(t));
  last_grad_.push_back(kNoTensor);
  grad_count_.push_back(0);
  return trace_.tensors.back().id;
}

TensorId TraceBuilder::Activation(const std::string& name, std::vector<int64_t> shape,
                                  DType dtype) {
  return AddTensor(name, std::move(shape), dtype, TensorKind::kActivation);
}

TensorId TraceBuilder::Workspace(const std::string& name, std::vector<int64_t> shape, DType dtype) {
  return AddTensor(name, std::move(shape), dtype, TensorKind::kWorkspace);
}

TensorId TraceBuilder::Gradient(const std::string& name, std::vector<int64_t> shape, DType dtype) {
  return AddTensor(name, std::move(shape), dtype, TensorKind::kGradient);
}

TensorId TraceBuilder::Input(const std::string& name, std::vector<int64_t> shape, DType dtype) {
  return AddTensor(name, std::move(shape), dtype, TensorKind::kInput);
}

TensorId TraceBuilder::Weight(const std::string& name, std::vector<int64_t> shape, DType dtype) {
  const TensorId id = AddTensor(name, std::move(shape), dtype, TensorKind::kWeight);
  weights_.push_back(id);
  return id;
}

TensorId TraceBuilder::Fp8WeightCopy(TensorId weight, const std::string& name,
                                     std::vector<int64_t> shape) {
  assert(fp8_ != traces::Fp8Recipe::kOff);
  // Named in full already (the weight's name carries its layer prefix).
  const int layer = layer_;
  layer_ = tensor(weight).layer;
  const TensorId copy = AddTensor("", std::move(shape), DType::kFp8, TensorKind::kWorkspace,
                                  traces::Fp8Blocks::kWeight);
  layer_ = layer;
  trace_.tensors[Index(copy)].name = name;
  if (fp8_copies_.size() <= Index(weight)) fp8_copies_.resize(Index(weight) + 1);
  fp8_copies_[Index(weight)].push_back(copy);
  return copy;
}

void TraceBuilder::SetGatheredFp8Bytes(TensorId id, int64_t bytes) {
  traces::Tensor& t = trace_.tensors[Index(id)];
  assert(t.dtype == DType::kFp8 && t.consumers.empty() && t.producer == traces::kNoOp);
  t.bytes = bytes;
}

TensorId TraceBuilder::View(const std::string& name, TensorId root, std::vector<int64_t> shape,
                            std::optional<TensorKind> kind) {
  const traces::Tensor& r = tensor(root);
  const TensorId id = AddTensor(name, std::move(shape), r.dtype, kind.value_or(r.kind));
  trace_.tensors[Index(id)].alias_of = root;
  return id;
}

OpId TraceBuilder::Op(const std::string& name, OpKind kind, const std::vector<TensorId>& inputs,
                      const std::vector<TensorId>& outputs, int64_t flops,
                      std::optional<GemmDims> gemm) {
  traces::Op op;
  op.id = static_cast<OpId>(trace_.ops.size());
  op.name = Prefixed(name);
  op.kind = kind;
  op.phase = phase_;
  op.layer = layer_;
  op.stage = static_cast<int>(header_.stage);
  op.inputs = inputs;
  op.outputs = outputs;
  op.flops = flops;
  op.gemm = gemm;
  for (TensorId in : inputs) {
    traces::Tensor& t = trace_.tensors[Index(in)];
    assert((t.consumers.empty() || t.consumers.back() != op.id) && "input listed twice");
    t.consumers.push_back(op.id);
    op.bytes_read += t.bytes;
  }
  for (TensorId out : outputs) {
    traces::Tensor& t = trace_.tensors[Index(out)];
    assert(t.producer == traces::kNoOp && "a tensor has one producer");
    t.producer = op.id;
    bool view_of_sibling = false;
    if (t.alias_of) {
      for (TensorId other : outputs) view_of_sibling |= other == *t.alias_of;
    }
    if (!view_of_sibling) op.bytes_written += t.bytes;
  }
  trace_.ops.push_back(std::move(op));
  return trace_.ops.back().id;
}

OpId TraceBuilder::Gemm(const std::string& name, const std::vector<TensorId>& inputs,
                        const std::vector<TensorId>& outputs, GemmDims dims) {
  return Gemm(name, inputs, outputs, dims, 2 * dims.m * dims.n * dims.k * dims.batch);
}

OpId TraceBuilder::Gemm(const std::string& name, const std::vector<TensorId>& inputs,
                        const std::vector<TensorId>& outputs, GemmDims dims, int64_t flops) {
  // FP8 operands (models/detail/fp8.h) make an FP8 GEMM.
  dims.fp8 = !inputs.empty() && tensor(inputs.front()).dtype == DType::kFp8;
  return Op(name, OpKind::kGemm, inputs, outputs, flops, dims);
}

TensorId TraceBuilder::WeightGrad(TensorId weight, std::vector<TensorId>& inputs) {
  const traces::Tensor& w = tensor(weight);
  const TensorId previous = last_grad_[Index(weight)];
  if (previous != kNoTensor) inputs.push_back(previous);
  // The gradient belongs to the weight's layer, whatever layer is being built.
  const int saved_layer = layer_;
  layer_ = w.layer;
  std::string name = w.name;
  const std::string prefix = LayerPrefix(w.layer);
  if (w.layer != traces::kNoLayer && name.rfind(prefix, 0) == 0) name.erase(0, prefix.size());
  // A later partial sum of the same weight's gradient is named "<weight>.grad+<n>".
  std::string grad_name = name + ".grad";
  if (previous != kNoTensor) {
    grad_name.push_back('+');
    grad_name.append(std::to_string(++grad_count_[Index(weight)]));
  }
  const TensorId g =
      Gradient(grad_name, w.shape, zero_.stage >= 2 ? w.dtype : optimizer_.grad_dtype);
  layer_ = saved_layer;
  last_grad_[Index(weight)] = g;
  return g;
}

void TraceBuilder::AddOptimizerOps() {
  const int64_t shards = std::max<int64_t>(1, optimizer_.shards);
  const int64_t expert_shards = std::max<int64_t>(1, optimizer_.expert_shards);
  // Group the weights by layer (kNoLayer first), keeping creation order inside
  // a group; where the routed experts' state shards over another group (ZeRO-1
  // with ep), a layer's experts are a group of their own after the rest, as
  // Megatron-Core's distributed optimizer keeps them in buffers of their own.
  int max_layer = traces::kNoLayer;
  for (TensorId w : weights_) max_layer = std::max(max_layer, tensor(w).layer);
  const size_t n_layers = static_cast<size_t>(max_layer + 2);
  std::vector<std::vector<TensorId>> groups(2 * n_layers);
  for (TensorId w : weights_) {
    const bool expert = expert_shards != shards && traces::IsRoutedExpert(tensor(w));
    groups[2 * static_cast<size_t>(tensor(w).layer + 1) + (expert ? 1 : 0)].push_back(w);
  }
  phase_ = Phase::kOptimizer;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    if (groups[gi].empty()) continue;
    layer_ = static_cast<int>(gi / 2) - 1;
    const bool experts = gi % 2 == 1;
    const int64_t split = experts ? expert_shards : shards;
    OptimizerGroup g;
    g.weights = groups[gi];
    for (TensorId w : groups[gi]) {
      g.params += Elements(w);
      g.weight_bytes += tensor(w).bytes;
      if (last_grad_[Index(w)] != kNoTensor) g.grads.push_back(last_grad_[Index(w)]);
    }
    g.updated = (g.params + split - 1) / split;
    const int64_t state_elements =
        (optimizer_.state_words_per_param * g.params + split - 1) / split;
    const TensorId state =
        AddTensor(optimizer_.name + (experts ? "_state.experts" : "_state"), {state_elements},
                  optimizer_.state_dtype, TensorKind::kOptimizerState);
    if (optimizer_.master_passes) {
      AddMasterWeightPasses(g, state);
    } else {
      std::vector<TensorId> inputs = g.weights;
      inputs.insert(inputs.end(), g.grads.begin(), g.grads.end());
      inputs.push_back(state);
      const OpId id = Op(optimizer_.name, OpKind::kOptimizer, inputs, {},
                         optimizer_.flops_per_param * g.updated);
      // Updates the weights and its state in place.
      op(id).bytes_written = g.weight_bytes + tensor(state).bytes;
    }
    AddFp8WeightQuantize(g);
  }
}

// Transformer Engine quantizes a weight on the first micro-batch of a step
// and reuses the copies (is_first_microbatch): once a step, from the weights
// the optimizer has just written. Every copy is rewritten in place (a view).
void TraceBuilder::AddFp8WeightQuantize(const OptimizerGroup& g) {
  std::vector<TensorId> inputs, outputs;
  int64_t elements = 0, read = 0, written = 0;
  for (TensorId w : g.weights) {
    if (Index(w) >= fp8_copies_.size() || fp8_copies_[Index(w)].empty()) continue;
    inputs.push_back(w);
    elements += Elements(w);
    read += tensor(w).bytes;
    for (TensorId copy : fp8_copies_[Index(w)]) {
      std::string name = tensor(copy).name + ".quantized";  // prefixed already
      const TensorId view = View("", copy, tensor(copy).shape);
      trace_.tensors[Index(view)].name = std::move(name);
      trace_.tensors[Index(view)].bytes = tensor(copy).bytes;  // its 2-D scales too
      outputs.push_back(view);
      written += tensor(copy).bytes;
    }
  }
  if (inputs.empty()) return;
  const OpId id = Op("fp8_weight_quantize", OpKind::kOptimizer, inputs, outputs, elements);
  // Current scaling reads each weight twice: its amax, then the cast.
  op(id).bytes_read = fp8_ == traces::Fp8Recipe::kCurrent ? 2 * read : read;
  op(id).bytes_written = written;
}

// Megatron-LM's Float16OptimizerWithFloat16Params.step (megatron/optimizer/
// optimizer.py at 6985e589), pass by pass, each over the `updated` parameters
// in place: bytes per parameter, with 16-bit weights (2 bytes) and fp32
// master weights, moments and main gradients (4 bytes). Where the gradients
// are 16-bit (fp16's default), the first pass copies them to fp32 main
// gradients, which are not traced as tensors: the passes after it read and
// write them through the 16-bit gradients' ids, and bytes_read and
// bytes_written say what they move. Where the gradients are fp32 already
// (OptimizerSpec::grad_dtype: bf16's main_grad) there is no copy.
void TraceBuilder::AddMasterWeightPasses(const OptimizerGroup& g, TensorId state) {
  constexpr int64_t kFp32 = 4;
  constexpr int64_t kUnscaleFlopsPerParam = 1;  // one multiply by 1/scale (and a finite check)
  constexpr int64_t kNormFlopsPerParam = 2;     // square and add
  const int64_t half = traces::DTypeSize(tensor(g.weights.front()).dtype);  // 16-bit weights
  // ZeRO-3's fp32 shards are the master weights (models::MasterWeightsAreShards):
  // no 16-bit copy to write back, the gathers cast them.
  const bool weights_are_master = zero_.fp32_shards;
  const int64_t n = g.updated;
  // The moments and the master copy: state_words_per_param words (adam 3, sgd
  // 2), or the moments and the fp32 shard.
  const int64_t words = optimizer_.state_words_per_param + (weights_are_master ? 1 : 0);
  auto pass = [&](const std::string& name, const std::vector<TensorId>& inputs, int64_t flops,
                  int64_t read_per_param, int64_t written_per_param) {
    const OpId id = Op(name, OpKind::kOptimizer, inputs, {}, flops);
    op(id).bytes_read = read_per_param * n;
    op(id).bytes_written = written_per_param * n;
  };
  std::vector<TensorId> update = g.weights;
  update.insert(update.end(), g.grads.begin(), g.grads.end());
  update.push_back(state);
  if (!g.grads.empty()) {
    // _copy_model_grads_to_main_grads: main_param.grad = model_param.grad.float()
    // (a view of fp32 main gradients, no pass: Megatron's bf16 main_grad).
    const int64_t grad_bytes = traces::DTypeSize(tensor(g.grads.front()).dtype);
    if (grad_bytes != kFp32) pass("grad_to_fp32", g.grads, 0, grad_bytes, kFp32);
    // _unscale_main_grads_and_check_for_nan: torch._amp_foreach_non_finite_check_and_unscale_.
    if (optimizer_.loss_scaling)
      pass("unscale_check", g.grads, kUnscaleFlopsPerParam * n, kFp32, kFp32);
    // clip_grad_norm_fp32: multi_tensor_l2norm reads each main gradient once
    // (the multi_tensor_scale that follows only when the norm exceeds
    // --clip-grad is data-dependent and left out).
    pass("grad_norm", g.grads, kNormFlopsPerParam * n, kFp32, 0);
  }
  // optimizer.step() on the fp32 master weights: reads master, main gradient
  // and moments, writes master and moments.
  pass(optimizer_.name, update, optimizer_.flops_per_param * n, kFp32 * (words + 1), kFp32 * words);
  // _copy_main_params_to_model_params: multi_tensor_scale of the master weights into the 16-bit
  // ones.
  if (!weights_are_master) pass("master_to_model", g.weights, 0, kFp32, half);
}

int64_t TraceBuilder::Elements(TensorId weight) const {
  if (Index(weight) < sharded_elements_.size() && sharded_elements_[Index(weight)] > 0) {
    return sharded_elements_[Index(weight)];
  }
  int64_t elements = 1;
  for (int64_t d : tensor(weight).shape) elements *= d;
  return elements;
}

traces::Trace TraceBuilder::Finish() {
  if (zero_.stage >= 2) ShardForZero();
  AddOptimizerOps();
  auto& tensors = trace_.tensors;
  // saved_for_backward: every tensor made before the backward pass that a backward
  // op reads, and the storage root of each such view.
  for (const traces::Op& op : trace_.ops) {
    if (op.phase != Phase::kBackward) continue;
    for (TensorId in : op.inputs) {
      traces::Tensor& t = tensors[Index(in)];
      if (t.kind == TensorKind::kGradient || t.kind == TensorKind::kWorkspace) continue;
      if (t.producer != traces::kNoOp && trace_.ops[Index(t.producer)].phase != Phase::kForward) {
        continue;
      }
      t.saved_for_backward = true;
      tensors[Index(trace_.StorageOf(in))].saved_for_backward = true;
    }
  }
  // A saved activation's storage belongs to the layer of the first forward op that
  // reads it (or a saved view of it): the block input counts in the block that saves it.
  std::vector<int> storage_layer(tensors.size(), traces::kNoLayer - 1);
  constexpr int kUnassigned = traces::kNoLayer - 1;
  for (const traces::Op& op : trace_.ops) {
    if (op.phase != Phase::kForward) break;
    for (TensorId in : op.inputs) {
      const traces::Tensor& t = tensors[Index(in)];
      if (t.kind != TensorKind::kActivation || !t.saved_for_backward) continue;
      const size_t root = Index(trace_.StorageOf(in));
      if (storage_layer[root] == kUnassigned) storage_layer[root] = op.layer;
    }
  }
  for (traces::Tensor& t : tensors) {
    if (t.kind != TensorKind::kActivation || !t.saved_for_backward) continue;
    const size_t root = Index(trace_.StorageOf(t.id));
    if (storage_layer[root] != kUnassigned) t.layer = storage_layer[root];
    t.offloadable = t.layer != traces::kNoLayer && tensors[root].bytes >= kMinOffloadBytes;
  }
  return std::move(trace_);
}

}  // namespace ssdtrain::models::detail

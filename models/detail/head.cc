#include "models/detail/head.h"

#include "models/detail/costs.h"

namespace ssdtrain::models::detail {
namespace {

// torch.nn.functional.cross_entropy(input, labels) over the [s, b, V] input:
// log_softmax (aten/src/ATen/native/cuda/SoftMax.cu's row kernel for rows too
// long for shared memory: a pass for the row maximum, one for the sum of
// exponentials, one that reads the row again and writes the result) into a
// tensor of its own, which autograd saves for both log_softmax's and
// nll_loss's backward; nll_loss reads one log-probability a row.
template <typename Name>
void TorchCrossEntropyForward(TraceBuilder& b, const Name& N, HeadState* st) {
  const TensorId input = st->loss_input;
  const std::vector<int64_t> shape = b.shape(input);
  const traces::Tensor& in = b.tensor(input);
  const int64_t n = Elements(shape);
  const int64_t rows = n / shape.back();
  st->log_probs = b.Activation(N("loss.log_probs"), shape, in.dtype);
  const OpId log_softmax =
      b.Op(N("loss.log_softmax"), OpKind::kLoss, {input}, {st->log_probs}, 3 * kLossPassFlops * n);
  b.op(log_softmax).bytes_read = 3 * in.bytes;
  const TensorId loss = b.Activation(N("loss"), {1}, DType::kFp32);
  const OpId nll = b.Op(N("loss"), OpKind::kLoss, {st->log_probs, st->labels}, {loss}, rows);
  b.op(nll).bytes_read = rows * traces::DTypeSize(in.dtype) + b.tensor(st->labels).bytes;
}

// Its backward: nll_loss_backward fills a zero tensor of the input's size and
// writes -1/rows at each row's label; log_softmax's backward reads that
// gradient twice (its row sum, then the result) and the saved output once, into
// another tensor of the size. Returns the input's gradient.
template <typename Name>
TensorId TorchCrossEntropyBackward(TraceBuilder& b, const Name& N, const HeadState& st) {
  const std::vector<int64_t> shape = b.shape(st.log_probs);
  const traces::Tensor& lp = b.tensor(st.log_probs);
  const int64_t n = Elements(shape);
  const TensorId g_nll = b.Gradient(N("loss.log_probs.grad"), shape, lp.dtype);
  b.Op(N("loss.bwd"), OpKind::kLoss, {st.labels}, {g_nll}, n);
  const TensorId g_in = b.Gradient(N("logits.grad"), shape, lp.dtype);
  const OpId back = b.Op(N("loss.log_softmax.bwd"), OpKind::kLoss, {g_nll, st.log_probs}, {g_in},
                         kBackwardFactor * kLossPassFlops * n);
  b.op(back).bytes_read = 2 * b.tensor(g_nll).bytes + lp.bytes;
  return g_in;
}

}  // namespace

void HeadForward(TraceBuilder& b, const Dims& d, NormKind norm, bool mlm_transform, TensorId x,
                 TensorId word, HeadState* st, bool output_bias, bool final_softcap,
                 const std::string& prefix) {
  st->prefix = prefix;
  auto N = [&prefix](const char* name) { return prefix + name; };
  TensorId z = NormForward(b, d, norm, N("final_norm"), x, &st->final_norm);
  st->mlm_transform = mlm_transform;
  if (mlm_transform) {
    // Megatron's BertLMHead: a dense h×h layer replicated on every rank, GELU,
    // LayerNorm; with SP the sequence is gathered first.
    if (d.sp) z = AllGatherSeq(b, d, N("mlm.in_gathered"), z, TensorKind::kActivation);
    st->dense_in = z;
    st->dense_w = b.Weight(N("mlm.dense.weight"), {d.h, d.h}, d.act);
    st->dense_b = b.Weight(N("mlm.dense.bias"), {d.h}, d.act);
    st->gelu_in = b.Activation(N("mlm.dense.out"), d.Full(d.h), d.act);
    b.Gemm(N("mlm.dense"), {z, st->dense_w, st->dense_b}, {st->gelu_in},
           {.m = d.s * d.b, .n = d.h, .k = d.h, .batch = 1});
    const TensorId a = b.Activation(N("mlm.gelu.out"), d.Full(d.h), d.act);
    b.Op(N("mlm.gelu"), OpKind::kElementwise, {st->gelu_in}, {a}, kGeluFlops * d.s * d.b * d.h);
    z = NormForward(b, d, NormKind::kLayerNorm, N("mlm.norm"), a, &st->mlm_norm);
  }
  st->logits = b.Activation(N("logits"), d.Full(d.vocab), d.act);
  if (word == kNoTensor) word = b.Weight(N("output.weight"), {d.vocab, d.h}, d.act);
  // The output layer stays 16-bit under FP8 (Megatron's output_layer is not a
  // Transformer Engine module; only the blocks run under fp8_autocast), and
  // its collectives are not overlapped by TE's userbuffers.
  Dims head = d;
  head.fp8 = traces::Fp8Recipe::kOff;
  head.tp_overlap = false;
  st->logits_layer = ColumnForward(b, head, N("lm_head"), z, d.h, d.vocab, {st->logits},
                                   output_bias, word, /*replicated_input=*/mlm_transform);
  st->labels = b.Input(N("labels"), {d.b, d.s}, DType::kInt64);
  const int64_t n = Elements(b.shape(st->logits));
  const int64_t pass_flops = kLossPassFlops * n;
  TensorId logits = st->logits;
  if (final_softcap) {
    st->capped = b.Activation(N("logits.capped"), b.shape(st->logits), d.act);
    b.Op(N("logits.softcap"), OpKind::kElementwise, {st->logits}, {st->capped}, kSoftcapFlops * n);
    logits = st->capped;
  }
  st->loss_input = logits;
  if (d.fp32_loss) {
    st->loss_input = b.Activation(N("logits.float"), b.shape(logits), DType::kFp32);
    b.Op(N("logits.float"), OpKind::kElementwise, {logits}, {st->loss_input}, 0);
  }
  if (d.torch_cross_entropy) {
    TorchCrossEntropyForward(b, N, st);
    return;
  }
  // Megatron-LM's _VocabParallelCrossEntropy.forward (megatron/mpu/cross_entropy.py at
  // 6985e589), pass by pass over the rank's [s, b, V/t] input: the row maximum, subtract it
  // in place, exp in place, the row sum, divide by it in place; the result is the softmax it
  // saves. The first in-place pass writes a buffer of its own when the input is the capped
  // logits themselves (no fp32 copy), which the soft-cap's backward still reads.
  const TensorId input = st->loss_input;
  const std::vector<int64_t> shape = b.shape(input);
  const DType dtype = b.tensor(input).dtype;
  const std::vector<int64_t> rows(shape.begin(), shape.end() - 1);
  const TensorId row_max = b.Activation(N("loss.row_max"), rows, dtype);
  b.Op(N("loss.max"), OpKind::kLoss, {input}, {row_max}, pass_flops);
  const TensorId shifted = input == st->capped ? b.Activation(N("loss.shifted"), shape, dtype)
                                               : b.View(N("loss.shifted"), input, shape);
  b.Op(N("loss.sub"), OpKind::kLoss, {input, row_max}, {shifted}, pass_flops);
  const TensorId exps = b.View(N("loss.exp"), shifted, shape);
  b.Op(N("loss.exp"), OpKind::kLoss, {shifted}, {exps}, pass_flops);
  const TensorId row_sum = b.Activation(N("loss.row_sum"), rows, dtype);
  b.Op(N("loss.sum"), OpKind::kLoss, {exps}, {row_sum}, pass_flops);
  st->softmax = b.View(N("loss.softmax"), exps, shape);
  const TensorId loss = b.Activation(N("loss"), {1}, DType::kFp32);
  b.Op(N("loss"), OpKind::kLoss, {exps, row_sum, st->labels}, {st->softmax, loss}, pass_flops);
}

TensorId HeadBackward(TraceBuilder& b, const Dims& d, const HeadState& st) {
  auto N = [&st](const char* name) { return st.prefix + name; };
  const int64_t n = Elements(b.shape(st.logits));
  TensorId g_logits = kNoTensor;
  if (st.log_probs != kNoTensor) {
    g_logits = TorchCrossEntropyBackward(b, N, st);
  } else {
    // softmax − one-hot, scaled by the loss gradient, over the softmax's storage.
    g_logits = b.View(N("logits.grad"), st.softmax, b.shape(st.softmax), TensorKind::kGradient);
    b.Op(N("loss.bwd"), OpKind::kLoss, {st.softmax, st.labels}, {g_logits},
         kBackwardFactor * kLossFlops * n);
  }
  if (st.loss_input != st.logits && st.loss_input != st.capped) {
    const TensorId g16 = b.Gradient(N("logits.grad.half"), b.shape(st.logits), d.act);
    b.Op(N("logits.float.bwd"), OpKind::kElementwise, {g_logits}, {g16}, 0);
    g_logits = g16;
  }
  if (st.capped != kNoTensor) {
    // d/dx cap·tanh(x/cap) = 1 − (y/cap)², from the capped logits y.
    const TensorId g_raw = b.Gradient(N("logits.raw.grad"), b.shape(st.logits), d.act);
    b.Op(N("logits.softcap.bwd"), OpKind::kElementwise, {st.capped, g_logits}, {g_raw},
         kBackwardFactor * kSoftcapFlops * n);
    g_logits = g_raw;
  }
  TensorId g = ColumnBackward(b, d, st.logits_layer, {g_logits});
  if (st.mlm_transform) {
    g = NormBackward(b, d, st.mlm_norm, g, kNoTensor);
    const TensorId g_gelu_in = b.Gradient(N("mlm.dense.out.grad"), d.Full(d.h), d.act);
    b.Op(N("mlm.gelu.bwd"), OpKind::kElementwise, {st.gelu_in, g}, {g_gelu_in},
         kBackwardFactor * kGeluFlops * d.s * d.b * d.h);
    const TensorId g_in = b.Gradient(N("mlm.dense.in.grad"), d.Full(d.h), d.act);
    b.Gemm(N("mlm.dense.dgrad"), {g_gelu_in, st.dense_w}, {g_in},
           {.m = d.s * d.b, .n = d.h, .k = d.h, .batch = 1});
    std::vector<TensorId> inputs = {st.dense_in, g_gelu_in};
    const TensorId g_w = b.WeightGrad(st.dense_w, inputs);
    const TensorId g_b = b.WeightGrad(st.dense_b, inputs);
    b.Gemm(N("mlm.dense.wgrad"), inputs, {g_w, g_b},
           {.m = d.h, .n = d.h, .k = d.s * d.b, .batch = 1});
    g = g_in;
    if (d.sp) {
      // Every rank holds the whole gradient; each keeps its own rows.
      const TensorId shard = b.Gradient(N("mlm.in.grad_shard"), d.Stream(), d.act);
      b.Op(N("mlm.in.grad_split"), OpKind::kElementwise, {g}, {shard}, 0);
      g = shard;
    }
  }
  return NormBackward(b, d, st.final_norm, g, kNoTensor);
}

}  // namespace ssdtrain::models::detail

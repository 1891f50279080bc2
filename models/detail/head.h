// The language-model head and loss on the last stage: final norm, (BERT: the MLM
// transform dense → GELU → LayerNorm), vocabulary-parallel logits, softmax
// cross-entropy as Megatron-LM's _VocabParallelCrossEntropy runs it: on
// logits.float() unless --fp16-lm-cross-entropy (Dims::fp32_loss), computing the
// softmax in place over its input and saving it; backward turns that softmax
// into the logits' gradient in place, and the fp32 gradient is cast back to the
// logits' dtype. Or, with Dims::torch_cross_entropy, as torch.nn.functional.
// cross_entropy runs it (torchtitan, Hugging Face): log_softmax into a tensor of
// its own that it saves, nll_loss; backward writes nll_loss's gradient and then
// log_softmax's, each a new logits-sized tensor. Logits and loss stay on the GPU
// (never offloadable).
#pragma once

#include "models/detail/dims.h"
#include "models/detail/linear.h"
#include "models/detail/norm.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

struct HeadState {
  std::string prefix;  // before every tensor and op name ("mtp0." for an MTP depth's head)
  NormState final_norm;
  bool mlm_transform = false;  // BERT
  TensorId dense_in = kNoTensor, dense_w = kNoTensor, dense_b = kNoTensor;
  TensorId gelu_in = kNoTensor;
  NormState mlm_norm;
  LinearState logits_layer;
  TensorId logits = kNoTensor, labels = kNoTensor;
  TensorId capped = kNoTensor;  // Gemma 2: cap·tanh(logits/cap), or none
  // The cross-entropy's input (logits, or their fp32 copy: Dims::fp32_loss)
  // and the softmax it saves for backward, a view of that input (in place).
  TensorId loss_input = kNoTensor, softmax = kNoTensor;
  // torch's cross-entropy: log_softmax's output, saved (softmax stays kNoTensor).
  TensorId log_probs = kNoTensor;
};

// x: the last block's output [s_local, b, h]. `word`: the tied word table, or
// kNoTensor for an untied output layer (Llama). `output_bias`: the logits layer
// carries a bias (Phi-2's and GPT-J's lm_head; BERT's MLM output bias, its
// BertLMHead.bias, on the tied logits). `final_softcap` (Gemma 2): the logits are
// soft-capped before the loss, by an op whose output its backward reads.
// `prefix` goes before every name (a multi-token-prediction depth's own head).
void HeadForward(TraceBuilder& b, const Dims& d, NormKind norm, bool mlm_transform, TensorId x,
                 TensorId word, HeadState* st, bool output_bias = false, bool final_softcap = false,
                 const std::string& prefix = "");
// Returns the gradient of x.
TensorId HeadBackward(TraceBuilder& b, const Dims& d, const HeadState& st);

}  // namespace ssdtrain::models::detail

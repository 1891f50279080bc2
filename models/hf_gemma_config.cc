// Hugging Face configs of gemma and gemma2 (see hf_config.h).
#include <optional>
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

// transformers' GemmaConfig head_dim when the file gives none (not hidden / heads).
constexpr int64_t kGemmaDefaultHeadDim = 256;

}  // namespace

// Gemma: Llama's RMSNorm, rotary and grouped-query attention with an explicit
// head_dim, a GeGLU MLP of three matrices, no biases or dropout, and an output layer
// tied to the embeddings. Its RMSNorm scales by (1 + weight): the same weights and
// op; the embedding's scaling by sqrt(hidden_size) is a constant multiply that saves
// nothing for the backward and is not traced.
Result<int64_t> ReadGemma(Fields& f, ModelConfig* c) {
  c->family = "gemma";
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadLlamaNamedShape(f, c));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> kv,
                            f.OptionalSize("num_key_value_heads", "kv_heads"));
  c->kv_heads = kv.value_or(0);
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim,
                            f.OptionalSize("head_dim", "head_dim"));
  c->head_dim = head_dim.value_or(kGemmaDefaultHeadDim);
  if (!head_dim) {
    f.Assume("head_dim " + Str(kGemmaDefaultHeadDim) +
             ": the file has none (transformers' GemmaConfig default)");
  }
  SSDTRAIN_RETURN_IF_ERROR(
      CheckHeads(f, *c, "num_attention_heads", "hidden_size", "num_key_value_heads"));
  // transformers reads hidden_activation, and hidden_act where that is null or absent.
  const bool own = f.Has("hidden_activation") && !f.IsNull("hidden_activation");
  const char* act_field = own ? "hidden_activation" : "hidden_act";
  if (f.IsNull("hidden_activation")) f.ReadNull("hidden_activation");
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr(act_field, "gelu_pytorch_tanh"));
  if (!OneOf(kGelus, act)) {
    return f.NotModelled(act_field, "\"" + act + "\" is", List(kGelus) + ", the GeGLU MLP");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", true));
  if (!tied)
    return f.NotModelled("tie_word_embeddings", "false (an untied output layer) is", "true");
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "attention_bias", "true (q/k/v/o biases) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attention_dropout", "attention probabilities"));
  f.Assume("GeGLU MLP (gate, up, down): gemma's " + act + " gates the up projection");
  f.Assume(
      "the embedding's scaling by sqrt(hidden_size) is not traced (a constant multiply that "
      "saves nothing for the backward)");
  return positions;
}

// Gemma 2 is refused: its attention and logits are soft-capped (tanh over the
// scores and the logits, saved for the backward), every other layer attends in a
// sliding window, and each block has four norms; the trace models none of these.
Result<int64_t> ReadGemma2(Fields& f) {
  if (f.Has("attn_logit_softcapping") && !f.IsNull("attn_logit_softcapping")) {
    SSDTRAIN_ASSIGN_OR_RETURN(double cap, f.NumberOr("attn_logit_softcapping", 0.0));
    return f.NotModelled("attn_logit_softcapping",
                         Num(cap) + " (tanh soft-capping of the attention scores) for gemma2 is",
                         "gemma; gemma2's soft-capping, alternating sliding-window layers and "
                         "four norms per block are not modelled");
  }
  return f.NotModelled("model_type",
                       "\"gemma2\" (alternating sliding-window layers, four norms per block, "
                       "final_logit_softcapping) is",
                       "gemma");
}

}  // namespace ssdtrain::models::detail

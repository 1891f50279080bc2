// Hugging Face configs of gemma and gemma2 (see hf_config.h).
#include <algorithm>
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

// Gemma 2: Gemma's mapping, plus what Gemma2Config adds, each read and modelled:
// tanh soft-capping of the attention scores and of the final logits (ops whose
// outputs their backwards read), a post-norm of each branch output (four RMSNorms
// per block), query_pre_attn_scalar (a constant scale of the scores: no tensor
// changes), and a sliding window on every other block (ModelConfig::sliding_window).
Result<int64_t> ReadGemma2(Fields& f, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadGemma(f, c));
  c->family = "gemma2";
  struct Cap {
    const char* field;
    double fallback;  // Gemma2Config's default
    const char* what;
  };
  const Cap caps[] = {{"attn_logit_softcapping", 50.0, "the attention scores"},
                      {"final_logit_softcapping", 30.0, "the final logits"}};
  for (const Cap& cap : caps) {
    if (f.IsNull(cap.field)) {
      return f.NotModelled(cap.field, std::string("null (no soft-capping of ") + cap.what + ") is",
                           "a positive number");
    }
    SSDTRAIN_ASSIGN_OR_RETURN(double v, f.NumberOr(cap.field, cap.fallback));
    if (!(v > 0)) return f.Bad(cap.field, "expected a positive number, got " + Num(v));
    if (!f.Has(cap.field)) {
      f.Assume(std::string(cap.field) + " " + Num(v) + ": Gemma2Config's default");
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(double scalar, f.NumberOr("query_pre_attn_scalar", 256.0));
  if (!(scalar > 0)) {
    return f.Bad("query_pre_attn_scalar", "expected a positive number, got " + Num(scalar));
  }
  constexpr int64_t kGemma2DefaultWindow = 4096;  // Gemma2Config's sliding_window
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> window,
                            f.OptionalSize("sliding_window", "sliding_window"));
  if (!f.Has("sliding_window")) window = kGemma2DefaultWindow;
  c->sliding_window = window.value_or(0);
  if (window) {
    c->sliding_window_period = 2;  // Gemma2DecoderLayer: is_sliding = not layer_idx % 2
    f.Assume("sliding_window " + Str(*window) +
             " on every other block (0, 2, ...): flash attention skips the keys outside it at "
             "seq_len > " +
             Str(*window));
  }
  f.Assume("the attention scores scaled by query_pre_attn_scalar^-0.5: a constant, no tensor");
  return positions;
}

}  // namespace ssdtrain::models::detail

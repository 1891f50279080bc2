// Hugging Face configs of falcon (see hf_config.h): Falcon-7B's layout.
#include <optional>
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

// transformers' FalconConfig defaults for fields Falcon-7B's file leaves out.
constexpr int64_t kFalconDefaultPositions = 2048;

}  // namespace

// Falcon (RefinedWeb models as transformers reads them): LayerNorm, GELU, rotary,
// no biases, no dropout, a tied output layer; multi_query gives one kv head, and
// parallel_attn runs attention and MLP on one LayerNorm. What else Falcon can be
// (ALiBi, biases, new_decoder_architecture's two LayerNorms and kv groups, the
// post-LayerNorm residual) is refused naming its field.
Result<int64_t> ReadFalcon(Fields& f, ModelConfig* c) {
  c->family = "falcon";
  SSDTRAIN_ASSIGN_OR_RETURN(c->hidden, f.Size("hidden_size", "hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->layers, f.Size("num_hidden_layers", "layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->heads, f.Size("num_attention_heads", "heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->vocab, f.Size("vocab_size", "vocab"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> ffn,
                            f.OptionalSize("ffn_hidden_size", "ffn_hidden"));
  c->ffn_hidden = ffn.value_or(0);
  if (!ffn) f.Assume("ffn_hidden 4 x hidden_size: ffn_hidden_size is null or absent");
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> positions,
                            f.OptionalSize("max_position_embeddings", ""));
  if (!positions) {
    f.Assume("max positions " + Str(kFalconDefaultPositions) +
             ": max_position_embeddings is absent (transformers' FalconConfig default)");
  }
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(
      f, "new_decoder_architecture",
      "true (Falcon-40B/180B: two LayerNorms ln_attn and ln_mlp, grouped kv heads) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "alibi", "true (ALiBi attention biases) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "bias", "true (biases on every linear layer) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "apply_residual_connection_post_layernorm",
                                        "true (the residual taken after the LayerNorm) is"));
  SSDTRAIN_ASSIGN_OR_RETURN(bool multi_query, f.BoolOr("multi_query", true));
  c->kv_heads = multi_query ? 1 : 0;
  if (f.Has("num_kv_heads")) {
    f.Assume("num_kv_heads unused: only new_decoder_architecture reads it");
    SSDTRAIN_RETURN_IF_ERROR(f.OptionalSize("num_kv_heads", "").status());
  }
  SSDTRAIN_RETURN_IF_ERROR(CheckHeads(f, *c, "num_attention_heads", "hidden_size", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("activation", "gelu"));
  if (act != "gelu") return f.NotModelled("activation", "\"" + act + "\" is", "gelu");
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", true));
  if (!tied)
    return f.NotModelled("tie_word_embeddings", "false (an untied output layer) is", "true");
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attention_dropout", "attention probabilities"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "hidden_dropout", "the branch outputs"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->parallel_block, f.BoolOr("parallel_attn", true));
  if (c->parallel_block) {
    f.Assume("a parallel block: falcon's attention and MLP read one LayerNorm (input_layernorm)");
  }
  f.Assume(multi_query ? "one kv head: multi_query is true"
                       : "kv heads = num_attention_heads: multi_query is false");
  return positions.value_or(kFalconDefaultPositions);
}

}  // namespace ssdtrain::models::detail

// Hugging Face configs of falcon (see hf_config.h): Falcon-7B's layout, in
// transformers' FalconConfig names (model_type falcon) or in the names of the
// original RWConfig that Falcon's first hub files carry (model_type
// RefinedWebModel, RefinedWeb).
#include <optional>
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

// transformers' FalconConfig defaults for fields Falcon-7B's file leaves out.
constexpr int64_t kFalconDefaultPositions = 2048;

}  // namespace

// Falcon: LayerNorm, GELU, rotary,
// no biases, no dropout, a tied output layer; multi_query gives one kv head, and
// parallel_attn runs attention and MLP on one LayerNorm. What else Falcon can be
// (ALiBi, biases, new_decoder_architecture's two LayerNorms and kv groups, the
// post-LayerNorm residual) is refused naming its field.
// `rw`: an original RWConfig file (Falcon-7B's and Falcon-RW's RefinedWebModel,
// Falcon-40B's RefinedWeb): depth and heads are n_layer and n_head (RWConfig's
// attribute_map), and RWConfig's defaults for multi_query and parallel_attn are false
// where FalconConfig's are true.
Result<int64_t> ReadFalcon(Fields& f, bool rw, ModelConfig* c) {
  c->family = "falcon";
  const char* heads_field = rw ? "n_head" : "num_attention_heads";
  SSDTRAIN_ASSIGN_OR_RETURN(c->hidden, f.Size("hidden_size", "hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->layers, f.Size(rw ? "n_layer" : "num_hidden_layers", "layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->heads, f.Size(heads_field, "heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->vocab, f.Size("vocab_size", "vocab"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> ffn,
                            f.OptionalSize("ffn_hidden_size", "ffn_hidden"));
  c->ffn_hidden = ffn.value_or(0);
  if (!ffn) f.Assume("ffn_hidden 4 x hidden_size: ffn_hidden_size is null or absent");
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> positions,
                            f.OptionalSize("max_position_embeddings", ""));
  if (!positions) {
    f.Assume("max positions " + Str(kFalconDefaultPositions) +
             ": max_position_embeddings is absent (transformers' FalconConfig default; "
             "Falcon's pre-training sequence length)");
  }
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(
      f, "new_decoder_architecture",
      "true (Falcon-40B/180B: two LayerNorms ln_attn and ln_mlp, grouped kv heads) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "alibi", "true (ALiBi attention biases) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "bias", "true (biases on every linear layer) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "apply_residual_connection_post_layernorm",
                                        "true (the residual taken after the LayerNorm) is"));
  SSDTRAIN_ASSIGN_OR_RETURN(bool multi_query, f.BoolOr("multi_query", !rw));
  c->kv_heads = multi_query ? 1 : 0;
  if (f.Has("num_kv_heads")) {
    f.Assume("num_kv_heads unused: only new_decoder_architecture reads it");
    SSDTRAIN_RETURN_IF_ERROR(f.OptionalSize("num_kv_heads", "").status());
  }
  SSDTRAIN_RETURN_IF_ERROR(CheckHeads(f, *c, heads_field, "hidden_size", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("activation", "gelu"));
  if (act != "gelu") return f.NotModelled("activation", "\"" + act + "\" is", "gelu");
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", true));
  if (!tied)
    return f.NotModelled("tie_word_embeddings", "false (an untied output layer) is", "true");
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attention_dropout", "attention probabilities"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "hidden_dropout", "the branch outputs"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->parallel_block, f.BoolOr("parallel_attn", !rw));
  if (c->parallel_block) {
    f.Assume("a parallel block: falcon's attention and MLP read one LayerNorm (input_layernorm)");
  }
  f.Assume(multi_query ? "one kv head: multi_query is true"
                       : std::string("kv heads = ") + heads_field + ": multi_query is false");
  if (rw && !f.Has("multi_query")) f.Assume("multi_query false: RWConfig's default");
  return positions.value_or(kFalconDefaultPositions);
}

}  // namespace ssdtrain::models::detail

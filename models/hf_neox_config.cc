// Hugging Face configs of gpt_neox (see hf_config.h): GPT-NeoX-20B, Pythia.
#include <optional>
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {

// GPT-NeoX: LayerNorm, GELU, biases on every linear (none on embed_out), rotary over
// rotary_pct of each head, untied, no dropout; use_parallel_residual (the default)
// is the parallel block whose attention and MLP each read their own LayerNorm of x.
Result<int64_t> ReadNeox(Fields& f, ModelConfig* c) {
  c->family = "neox";
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadLlamaNamedShape(f, c));
  SSDTRAIN_RETURN_IF_ERROR(CheckHeads(f, *c, "num_attention_heads", "hidden_size", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("hidden_act", "gelu"));
  if (!OneOf(kGelus, act)) return f.NotModelled("hidden_act", "\"" + act + "\" is", List(kGelus));
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", false));
  if (tied) {
    return f.NotModelled("tie_word_embeddings", "true (an output layer tied to the embeddings) is",
                         "false");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(bool bias, f.BoolOr("attention_bias", true));
  if (!bias) {
    return f.NotModelled("attention_bias", "false (no q/k/v and dense biases) for gpt_neox is",
                         "true");
  }
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attention_dropout", "attention probabilities"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "hidden_dropout", "the branch outputs"));
  // Newer transformers write partial_rotary_factor next to rotary_pct; both are read.
  SSDTRAIN_RETURN_IF_ERROR(CheckRotaryFraction(f, "rotary_pct", 0.25));
  if (f.Has("partial_rotary_factor")) {
    SSDTRAIN_RETURN_IF_ERROR(CheckRotaryFraction(f, "partial_rotary_factor", 0.25));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(c->parallel_block, f.BoolOr("use_parallel_residual", true));
  if (c->parallel_block) {
    f.Assume(
        "a parallel block: gpt_neox's attention and MLP read their own LayerNorm of the block "
        "input (input_layernorm, post_attention_layernorm)");
  }
  f.Assume("q/k/v, dense and MLP biases, none on embed_out: gpt_neox always has them so");
  return positions;
}

}  // namespace ssdtrain::models::detail

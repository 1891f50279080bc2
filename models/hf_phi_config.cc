// Hugging Face configs of phi (see hf_config.h): Phi-2's parallel block.
#include <optional>
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {

// Phi-2: a parallel block (one LayerNorm, attention and GELU MLP side by side),
// partial rotary, biases everywhere, dropout on the branch outputs only, an untied
// output layer with a bias.
Result<int64_t> ReadPhi(Fields& f, ModelConfig* c) {
  c->family = "phi";
  c->parallel_block = true;
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadLlamaNamedShape(f, c));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> kv, f.OptionalSize("num_key_value_heads", ""));
  if (kv && *kv != c->heads) {
    return f.NotModelled("num_key_value_heads", Str(*kv) + " (grouped-query attention) for phi is",
                         "null or num_attention_heads " + Str(c->heads));
  }
  SSDTRAIN_RETURN_IF_ERROR(CheckHeads(f, *c, "num_attention_heads", "hidden_size", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("hidden_act", "gelu_new"));
  if (!OneOf(kGelus, act)) return f.NotModelled("hidden_act", "\"" + act + "\" is", List(kGelus));
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", false));
  if (tied) {
    return f.NotModelled("tie_word_embeddings", "true (an output layer tied to the embeddings) is",
                         "false");
  }
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "qk_layernorm", "true (LayerNorm of q and k) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attention_dropout", "attention probabilities"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "embd_pdrop", "the embeddings"));
  SSDTRAIN_RETURN_IF_ERROR(CheckRotaryFraction(f, "partial_rotary_factor", 0.5));
  SSDTRAIN_ASSIGN_OR_RETURN(double resid, f.NumberOr("resid_pdrop", 0.1));
  if (!(resid > 0.0)) {
    return f.NotModelled("resid_pdrop",
                         Num(resid) + " (no dropout on the branch outputs) for phi is",
                         "a rate above 0, Phi-2's layout");
  }
  f.Assume("a parallel block: phi's attention and MLP read one input LayerNorm");
  f.Assume(
      "residual dropout on both branch outputs (resid_pdrop); its rate does not change "
      "the compute");
  f.Assume("q/k/v, dense, fc1, fc2 and lm_head biases: phi always has them");
  return positions;
}

}  // namespace ssdtrain::models::detail

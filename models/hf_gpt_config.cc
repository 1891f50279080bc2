// Hugging Face configs of gpt2 and gptj (see hf_config.h): GPT-J reads the
// GPT-2 field names for its shape.
#include <optional>
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

// The GPT-2 field names GPT-J shares: widths, depth, heads, the MLP, the
// vocabulary and the GELU; returns n_positions.
Result<int64_t> ReadGpt2Shape(Fields& f, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(c->hidden, f.Size("n_embd", "hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->layers, f.Size("n_layer", "layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->heads, f.Size("n_head", "heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> inner, f.OptionalSize("n_inner", "ffn_hidden"));
  c->ffn_hidden = inner.value_or(0);
  if (!inner) f.Assume("ffn_hidden 4 x n_embd: n_inner is null or absent");
  SSDTRAIN_ASSIGN_OR_RETURN(c->vocab, f.Size("vocab_size", "vocab"));
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t positions, f.Size("n_positions", ""));
  SSDTRAIN_RETURN_IF_ERROR(CheckHeads(f, *c, "n_head", "n_embd", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("activation_function", "gelu_new"));
  if (!OneOf(kGelus, act)) {
    return f.NotModelled("activation_function", "\"" + act + "\" is", List(kGelus));
  }
  return positions;
}

}  // namespace

// GPT-2: learned positions, LayerNorm, GELU MLP, biases, dropout, tied output.
Result<int64_t> ReadGpt2(Fields& f, ModelConfig* c) {
  c->family = "gpt";
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadGpt2Shape(f, c));
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", true));
  if (!tied)
    return f.NotModelled("tie_word_embeddings", "false (an untied output layer) is", "true");
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "add_cross_attention", "true (cross-attention) is"));
  f.Assume("learned position embeddings of seq_len rows (the file allows n_positions " +
           Str(positions) + ")");
  return positions;
}

// GPT-J: a parallel block (one LayerNorm), rotary over rotary_dim of each head, no
// attention biases, MLP biases, no dropout, an untied output layer with a bias.
Result<int64_t> ReadGptj(Fields& f, ModelConfig* c) {
  c->family = "gptj";
  c->parallel_block = true;
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadGpt2Shape(f, c));
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", false));
  if (tied) {
    return f.NotModelled("tie_word_embeddings", "true (an output layer tied to the embeddings) is",
                         "false");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> rotary, f.OptionalSize("rotary_dim", ""));
  if (rotary && *rotary > HeadDim(*c)) {
    return f.Bad("rotary_dim", Str(*rotary) + " exceeds the head width " + Str(HeadDim(*c)));
  }
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attn_pdrop", "attention probabilities"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "embd_pdrop", "the embeddings"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "resid_pdrop", "the branch outputs"));
  f.Assume("a parallel block: gptj's attention and MLP read one LayerNorm (ln_1)");
  f.Assume(
      "the rotary op is costed over all of q and k (rotary_dim rotates part of each head "
      "and copies the rest; the tensors are the same)");
  f.Assume("fc_in, fc_out and lm_head biases, none on q/k/v/out_proj: gptj always has them so");
  return positions;
}

}  // namespace ssdtrain::models::detail

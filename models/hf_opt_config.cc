// Hugging Face configs of opt (see hf_config.h).
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

// A residual dropout the family builds: its rate must be above 0.
Status RequireResidualDropout(Fields& f, const std::string& field, const std::string& family,
                              double fallback) {
  SSDTRAIN_ASSIGN_OR_RETURN(double rate, f.NumberOr(field, fallback));
  if (!(rate > 0.0)) {
    return f.NotModelled(field,
                         Num(rate) + " (no dropout on the branch outputs) for " + family + " is",
                         "a rate above 0, as published");
  }
  return Status::Ok();
}

}  // namespace

// OPT: GPT's pre-LayerNorm block with ReLU, learned positions, biases, dropout on
// the branch outputs only, tied output layer.
Result<int64_t> ReadOpt(Fields& f, ModelConfig* c) {
  c->family = "opt";
  SSDTRAIN_ASSIGN_OR_RETURN(c->hidden, f.Size("hidden_size", "hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->layers, f.Size("num_hidden_layers", "layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->heads, f.Size("num_attention_heads", "heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->ffn_hidden, f.Size("ffn_dim", "ffn_hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->vocab, f.Size("vocab_size", "vocab"));
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t positions, f.Size("max_position_embeddings", ""));
  SSDTRAIN_RETURN_IF_ERROR(CheckHeads(f, *c, "num_attention_heads", "hidden_size", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("activation_function", "relu"));
  if (act != "relu") return f.NotModelled("activation_function", "\"" + act + "\" is", "relu");
  SSDTRAIN_ASSIGN_OR_RETURN(bool pre_norm, f.BoolOr("do_layer_norm_before", true));
  if (!pre_norm) {
    return f.NotModelled("do_layer_norm_before", "false (post-LayerNorm blocks, OPT-350m) is",
                         "true");
  }
  if (f.Has("word_embed_proj_dim")) {
    SSDTRAIN_ASSIGN_OR_RETURN(int64_t proj, f.Size("word_embed_proj_dim", ""));
    if (proj != c->hidden) {
      return f.NotModelled(
          "word_embed_proj_dim",
          Str(proj) + " (embeddings projected in and out of hidden_size " + Str(c->hidden) + ") is",
          "hidden_size");
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(bool bias, f.BoolOr("enable_bias", true));
  if (!bias) return f.NotModelled("enable_bias", "false (no linear biases) is", "true");
  SSDTRAIN_ASSIGN_OR_RETURN(bool affine, f.BoolOr("layer_norm_elementwise_affine", true));
  if (!affine) {
    return f.NotModelled("layer_norm_elementwise_affine", "false (LayerNorms without weights) is",
                         "true");
  }
  SSDTRAIN_RETURN_IF_ERROR(
      RequireFalse(f, "_remove_final_layer_norm", "true (no final LayerNorm) is"));
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", true));
  if (!tied)
    return f.NotModelled("tie_word_embeddings", "false (an untied output layer) is", "true");
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attention_dropout", "attention probabilities"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "activation_dropout", "the ReLU output"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "layerdrop", "whole layers"));
  SSDTRAIN_RETURN_IF_ERROR(RequireResidualDropout(f, "dropout", "opt", 0.1));
  f.Assume(
      "residual dropout on both branch outputs (dropout); its rate does not change the "
      "compute");
  f.Assume(
      "learned position embeddings of seq_len rows (OPT's table has max_position_embeddings "
      "+ 2 = " +
      Str(positions + 2) + ", its first two never used)");
  return positions;
}

}  // namespace ssdtrain::models::detail

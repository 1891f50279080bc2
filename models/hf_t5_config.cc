// Hugging Face configs of t5 (see hf_config.h): T5, Flan-T5 and T5 v1.1.
#include <optional>
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

// T5's relative-position buckets as the t5 family builds them (detail/embedding.cc).
constexpr int64_t kT5RelativeBuckets = 32;
// T5 has relative positions and no maximum; its pre-training input length is 512
// tokens (Raffel et al. 2020, section 3.1.2).
constexpr int64_t kT5PretrainingLength = 512;

}  // namespace

// T5: RMSNorm, relative position bias, no biases; a ReLU MLP and a tied output layer
// (T5), or a GeGLU MLP and an untied one (Flan-T5, T5 v1.1).
Result<int64_t> ReadT5(Fields& f, ModelConfig* c) {
  c->family = "t5";
  SSDTRAIN_ASSIGN_OR_RETURN(c->hidden, f.Size("d_model", "hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->heads, f.Size("num_heads", "heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->head_dim, f.Size("d_kv", "head_dim"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->encoder_layers, f.Size("num_layers", "encoder_layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> decoder,
                            f.OptionalSize("num_decoder_layers", ""));
  if (!decoder) f.Assume("decoder layers = num_layers: num_decoder_layers is absent");
  c->layers = c->encoder_layers + decoder.value_or(c->encoder_layers);
  SSDTRAIN_ASSIGN_OR_RETURN(c->ffn_hidden, f.Size("d_ff", "ffn_hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->vocab, f.Size("vocab_size", "vocab"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string proj, f.StringOr("feed_forward_proj", "relu"));
  if (proj != "relu" && proj != "gated-gelu") {
    return f.NotModelled("feed_forward_proj", "\"" + proj + "\" is",
                         "relu (two matrices) or gated-gelu (GeGLU, three matrices)");
  }
  c->gated_mlp = proj == "gated-gelu";
  SSDTRAIN_ASSIGN_OR_RETURN(bool gated, f.BoolOr("is_gated_act", c->gated_mlp));
  if (gated != c->gated_mlp) {
    return f.Bad("is_gated_act", std::string(gated ? "true" : "false") +
                                     " contradicts feed_forward_proj \"" + proj + "\"");
  }
  // transformers uses gelu_new for "gated-gelu" whatever dense_act_fn says; for
  // "relu" it is ReLU.
  if (f.Has("dense_act_fn")) {
    SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("dense_act_fn", ""));
    const std::string expected = c->gated_mlp ? "gelu_new" : "relu";
    if (act != expected) {
      return f.NotModelled("dense_act_fn",
                           "\"" + act + "\" with feed_forward_proj \"" + proj + "\" is", expected);
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", true));
  c->untied_output = !tied;
  SSDTRAIN_ASSIGN_OR_RETURN(bool enc_dec, f.BoolOr("is_encoder_decoder", true));
  if (!enc_dec) {
    return f.NotModelled("is_encoder_decoder", "false (an encoder or decoder alone) is", "true");
  }
  if (f.Has("relative_attention_num_buckets")) {
    SSDTRAIN_ASSIGN_OR_RETURN(int64_t buckets, f.Size("relative_attention_num_buckets", ""));
    if (buckets != kT5RelativeBuckets) {
      return f.NotModelled("relative_attention_num_buckets",
                           Str(buckets) + " relative-position buckets are",
                           Str(kT5RelativeBuckets));
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> positions, f.OptionalSize("n_positions", ""));
  if (!positions) {
    f.Assume("max positions " + Str(kT5PretrainingLength) +
             ": T5's positions are relative; n_positions is absent, so its pre-training input "
             "length");
  }
  f.Assume("encoder and decoder both of seq_len tokens");
  return positions.value_or(kT5PretrainingLength);
}

}  // namespace ssdtrain::models::detail

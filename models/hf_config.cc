#include "models/hf_config.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>

#include "models/detail/hf_fields.h"
#include "traces/detail/json_fields.h"

namespace ssdtrain::models {
namespace {

using detail::Fields;
using detail::Num;
using detail::Str;
using traces::detail::JsonPath;
using traces::detail::ObjectReader;

constexpr std::array<std::string_view, 11> kSupported = {
    "bert", "gpt2", "gptj", "llama", "mistral", "opt", "phi", "qwen2", "qwen3", "roberta", "t5"};
constexpr std::array<std::string_view, 4> kGelus = {"gelu", "gelu_new", "gelu_fast",
                                                    "gelu_pytorch_tanh"};
// BERT's segment vocabulary as the bert family builds it by default (detail/embedding.cc).
constexpr int64_t kBertTokenTypes = 2;
// RoBERTa's pad token id: its positions start at pad_token_id + 1.
constexpr int64_t kRobertaPadToken = 1;
// T5's relative-position buckets as the t5 family builds them (detail/embedding.cc).
constexpr int64_t kT5RelativeBuckets = 32;
// T5 has relative positions and no maximum; its pre-training input length is 512
// tokens (Raffel et al. 2020, section 3.1.2).
constexpr int64_t kT5PretrainingLength = 512;

template <size_t N>
bool OneOf(const std::array<std::string_view, N>& names, const std::string& v) {
  return std::find(names.begin(), names.end(), v) != names.end();
}

template <size_t N>
std::string List(const std::array<std::string_view, N>& names) {
  std::string out;
  for (size_t i = 0; i < N; ++i) out += (i > 0 ? ", " : "") + std::string(names[i]);
  return out;
}

Status RequireFalse(Fields& f, const std::string& field, const std::string& what) {
  SSDTRAIN_ASSIGN_OR_RETURN(bool v, f.BoolOr(field, false));
  if (v) return f.NotModelled(field, what, "false");
  return Status::Ok();
}

// Heads divide the width (unless head_dim is explicit) and kv heads divide heads,
// in the file's own field names.
Status CheckHeads(const Fields& f, const ModelConfig& c, const char* heads, const char* hidden,
                  const char* kv) {
  if (c.head_dim == 0 && c.hidden % c.heads != 0) {
    return f.Bad(heads, Str(c.heads) + " does not divide " + hidden + " " + Str(c.hidden) +
                            " (and no head_dim is given)");
  }
  if (c.kv_heads != 0 && c.heads % c.kv_heads != 0) {
    return f.Bad(kv, Str(c.kv_heads) + " does not divide " + heads + " " + Str(c.heads));
  }
  return Status::Ok();
}

// The dense model_type whose attention a MoE model_type shares.
std::string DenseAttentionOf(const std::string& model_type) {
  if (model_type == "mixtral") return "mistral";
  if (model_type == "qwen2_moe") return "qwen2";
  if (model_type == "qwen3_moe") return "qwen3";
  return model_type;
}

// A sliding window shorter than the positions changes attention's cost and saved
// bytes at long sequences, which the trace does not model.
Status CheckSlidingWindow(Fields& f, const std::string& model_type, int64_t max_positions) {
  const bool qwen = model_type == "qwen2" || model_type == "qwen3";
  bool used = true;
  if (qwen) {
    SSDTRAIN_ASSIGN_OR_RETURN(used, f.BoolOr("use_sliding_window", false));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> window, f.OptionalSize("sliding_window", ""));
  if (qwen && f.Has("max_window_layers") && !used) {
    f.Assume("sliding_window and max_window_layers unused: use_sliding_window is false");
  }
  if (used && window && *window < max_positions) {
    return f.NotModelled("sliding_window",
                         Str(*window) + " (shorter than max_position_embeddings " +
                             Str(max_positions) + "): sliding-window attention is",
                         "null, or at least max_position_embeddings" +
                             std::string(qwen ? ", or use_sliding_window false" : ""));
  }
  return Status::Ok();
}

}  // namespace

// llama, mistral, qwen2 and qwen3: RMSNorm, rotary positions, SwiGLU, no biases
// (qwen2: on q/k/v only), untied; qwen3 normalises each head's q and k. mixtral,
// qwen2_moe and qwen3_moe have the attention of mistral, qwen2 and qwen3.
Result<int64_t> detail::ReadLlamaLike(Fields& f, const std::string& model_type, ModelConfig* c) {
  c->family = "llama";
  const std::string dense = DenseAttentionOf(model_type);
  SSDTRAIN_ASSIGN_OR_RETURN(c->hidden, f.Size("hidden_size", "hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->layers, f.Size("num_hidden_layers", "layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->heads, f.Size("num_attention_heads", "heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> kv,
                            f.OptionalSize("num_key_value_heads", "kv_heads"));
  c->kv_heads = kv.value_or(0);
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim,
                            f.OptionalSize("head_dim", "head_dim"));
  c->head_dim = head_dim.value_or(0);
  SSDTRAIN_ASSIGN_OR_RETURN(c->ffn_hidden, f.Size("intermediate_size", "ffn_hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->vocab, f.Size("vocab_size", "vocab"));
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t positions, f.Size("max_position_embeddings", ""));
  SSDTRAIN_RETURN_IF_ERROR(
      CheckHeads(f, *c, "num_attention_heads", "hidden_size", "num_key_value_heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("hidden_act", "silu"));
  if (act != "silu") {
    return f.NotModelled("hidden_act", "\"" + act + "\" for " + model_type + " is",
                         "silu, the SwiGLU MLP of three matrices");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", false));
  if (tied) {
    return f.NotModelled("tie_word_embeddings",
                         "true (an output layer tied to the embeddings) for " + model_type + " is",
                         "false");
  }
  if (dense == "llama" || dense == "qwen3") {
    SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "attention_bias", "true (q/k/v/o biases) is"));
  }
  if (dense == "llama") {
    SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "mlp_bias", "true (MLP biases) is"));
  } else {
    SSDTRAIN_RETURN_IF_ERROR(CheckSlidingWindow(f, dense, positions));
  }
  if (dense == "qwen2") {
    c->qkv_bias = true;
    f.Assume("q/k/v projection biases (" + Str((c->heads + 2 * KvHeads(*c)) * HeadDim(*c)) +
             " parameters per layer): qwen2 always has them");
  }
  if (dense == "qwen3") {
    c->qk_norm = true;
    f.Assume("per-head RMSNorm of q and k (2 x head_dim " + Str(HeadDim(*c)) +
             " weights per layer): qwen3 always has them");
  }
  return positions;
}

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

// BERT and RoBERTa: as Megatron's BERT with --bert-no-binary-head (no pooler, MLM
// head). RoBERTa is BERT's architecture with one token type and positions that
// start after the pad token.
Result<int64_t> ReadBert(Fields& f, const std::string& model_type, ModelConfig* c) {
  c->family = "bert";
  SSDTRAIN_ASSIGN_OR_RETURN(c->hidden, f.Size("hidden_size", "hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->layers, f.Size("num_hidden_layers", "layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->heads, f.Size("num_attention_heads", "heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->ffn_hidden, f.Size("intermediate_size", "ffn_hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->vocab, f.Size("vocab_size", "vocab"));
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t positions, f.Size("max_position_embeddings", ""));
  SSDTRAIN_RETURN_IF_ERROR(CheckHeads(f, *c, "num_attention_heads", "hidden_size", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("hidden_act", "gelu"));
  if (act != "gelu") return f.NotModelled("hidden_act", "\"" + act + "\" is", "gelu");
  SSDTRAIN_ASSIGN_OR_RETURN(std::string pos, f.StringOr("position_embedding_type", "absolute"));
  if (pos != "absolute") {
    return f.NotModelled("position_embedding_type", "\"" + pos + "\" is", "absolute");
  }
  if (f.Has("type_vocab_size")) {
    SSDTRAIN_ASSIGN_OR_RETURN(int64_t types, f.Size("type_vocab_size", "token_types"));
    if (types != kBertTokenTypes) c->token_types = types;
  } else {
    f.Assume("token types " + Str(kBertTokenTypes) + ": type_vocab_size is absent");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(bool tied, f.BoolOr("tie_word_embeddings", true));
  if (!tied)
    return f.NotModelled("tie_word_embeddings", "false (an untied output layer) is", "true");
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "is_decoder", "true (a causal BERT) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "add_cross_attention", "true (cross-attention) is"));
  f.Assume("the masked-LM head (dense, GELU, LayerNorm, tied logits), no pooler or NSP head");
  f.Assume("learned position embeddings of seq_len rows (the file allows " + Str(positions) + ")");
  if (model_type != "roberta") return positions;
  // RoBERTa's position ids count from pad_token_id + 1: the rows below are never used.
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t pad, f.IndexOr("pad_token_id", kRobertaPadToken));
  if (pad + 1 >= positions) {
    return f.Bad("pad_token_id", Str(pad) + " leaves no positions of max_position_embeddings " +
                                     Str(positions) + " (RoBERTa's positions start at pad + 1)");
  }
  f.Assume("max positions " + Str(positions - pad - 1) + ": roberta's start at pad_token_id + 1");
  return positions - pad - 1;
}

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

// A dropout the phi family does not build: its rate must be 0.
Status RequireNoDropout(Fields& f, const std::string& field, const std::string& where) {
  SSDTRAIN_ASSIGN_OR_RETURN(double rate, f.NumberOr(field, 0.0));
  if (rate != 0.0) {
    return f.NotModelled(field, Num(rate) + " (dropout on " + where + ") is", "0.0");
  }
  return Status::Ok();
}

// Phi-2: a parallel block (one LayerNorm, attention and GELU MLP side by side),
// partial rotary, biases everywhere, dropout on the branch outputs only, an untied
// output layer with a bias.
Result<int64_t> ReadPhi(Fields& f, ModelConfig* c) {
  c->family = "phi";
  c->parallel_block = true;
  SSDTRAIN_ASSIGN_OR_RETURN(c->hidden, f.Size("hidden_size", "hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->layers, f.Size("num_hidden_layers", "layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->heads, f.Size("num_attention_heads", "heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> kv, f.OptionalSize("num_key_value_heads", ""));
  if (kv && *kv != c->heads) {
    return f.NotModelled("num_key_value_heads", Str(*kv) + " (grouped-query attention) for phi is",
                         "null or num_attention_heads " + Str(c->heads));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(c->ffn_hidden, f.Size("intermediate_size", "ffn_hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->vocab, f.Size("vocab_size", "vocab"));
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t positions, f.Size("max_position_embeddings", ""));
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
  SSDTRAIN_ASSIGN_OR_RETURN(double rotary, f.NumberOr("partial_rotary_factor", 0.5));
  if (!(rotary > 0.0 && rotary <= 1.0)) {
    return f.Bad("partial_rotary_factor", "expected a fraction in (0, 1], got " + Num(rotary));
  }
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
  f.Assume(
      "the rotary op is costed over all of q and k (partial_rotary_factor rotates part "
      "and copies the rest; the tensors are the same)");
  f.Assume("q/k/v, dense, fc1, fc2 and lm_head biases: phi always has them");
  return positions;
}

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

// seq_len and dtype: the training-time choices the file does not make.
Status ReadTrainingDefaults(Fields& f, int64_t positions, ModelConfig* c) {
  c->seq_len = std::min(positions, kHfDefaultSeqLen);
  f.Assume("seq_len " + Str(c->seq_len) + ": min(max positions " + Str(positions) + ", " +
           Str(kHfDefaultSeqLen) + ")");
  const char* field = f.Has("torch_dtype") ? "torch_dtype" : "dtype";
  SSDTRAIN_ASSIGN_OR_RETURN(std::string dtype, f.StringOr(field, ""));
  if (dtype.empty()) {
    c->dtype = "bf16";
    f.Assume("dtype bf16: the file has no torch_dtype");
  } else if (dtype == "bfloat16") {
    c->dtype = "bf16";
  } else if (dtype == "float16") {
    c->dtype = "fp16";
  } else if (dtype == "float32") {
    c->dtype = "fp32";
  } else {
    return f.NotModelled(field, "\"" + dtype + "\" is", "bfloat16, float16, float32");
  }
  f.Assume("micro_batch 1, tp 1, pp 1, standard attention, Adam with mixed precision");
  return Status::Ok();
}

Result<int64_t> ReadFamily(Fields& f, const std::string& model_type, ModelConfig* c) {
  if (model_type == "gpt2") return ReadGpt2(f, c);
  if (model_type == "bert" || model_type == "roberta") return ReadBert(f, model_type, c);
  if (model_type == "t5") return ReadT5(f, c);
  if (model_type == "phi") return ReadPhi(f, c);
  if (model_type == "opt") return ReadOpt(f, c);
  if (model_type == "gptj") return ReadGptj(f, c);
  if (detail::IsHfMoeType(model_type)) return detail::ReadHfMoe(f, model_type, c);
  return detail::ReadLlamaLike(f, model_type, c);
}

void ListIgnored(const nlohmann::json& j, const std::vector<std::string>& read, HfReport* report) {
  if (report == nullptr) return;
  for (const auto& [key, value] : j.items()) {
    if (key == "model_type") continue;
    if (std::find(read.begin(), read.end(), key) == read.end()) report->ignored.push_back(key);
  }
}

}  // namespace

std::string HfSupportedModelTypes() {
  return List(kSupported) + "; mixture of experts: " + detail::HfMoeSupported();
}

bool IsHfConfig(const nlohmann::json& j) {
  return j.is_object() && (j.contains("model_type") || j.contains("architectures"));
}

std::string HfConfigName(const std::string& path) {
  const std::filesystem::path p(path);
  if (p.filename() != "config.json") return p.stem().string();
  const std::filesystem::path dir = std::filesystem::absolute(p).parent_path();
  return dir.filename().string();
}

Result<ModelConfig> ModelConfigFromHfJson(const nlohmann::json& j, const std::string& source,
                                          const std::string& name, HfReport* report) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, JsonPath(source, "")));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string model_type, r.String("model_type"));
  if (!OneOf(kSupported, model_type) && !detail::IsHfMoeType(model_type)) {
    return Status::InvalidArgument(source + ": model_type: \"" + model_type +
                                   "\" is not supported (supported: " + HfSupportedModelTypes() +
                                   ")");
  }
  if (report != nullptr) report->model_type = model_type;
  Fields f(std::move(r), j, source, report);
  ModelConfig c;
  c.name = name;
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t positions, ReadFamily(f, model_type, &c));
  SSDTRAIN_RETURN_IF_ERROR(ReadTrainingDefaults(f, positions, &c));
  ListIgnored(j, f.read(), report);
  SSDTRAIN_RETURN_IF_ERROR(ValidateConfig(c, source));
  return c;
}

}  // namespace ssdtrain::models

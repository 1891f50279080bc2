// Hugging Face configs of bert and roberta (see hf_config.h).
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

// BERT's segment vocabulary as the bert family builds it by default (detail/embedding.cc).
constexpr int64_t kBertTokenTypes = 2;
// RoBERTa's pad token id: its positions start at pad_token_id + 1.
constexpr int64_t kRobertaPadToken = 1;

}  // namespace

// BERT and RoBERTa: as Megatron's BERT with --bert-no-binary-head (no pooler, MLM
// head). RoBERTa is BERT's architecture with one token type and positions that
// start after the pad token.
Result<int64_t> ReadBert(Fields& f, const std::string& model_type, ModelConfig* c) {
  c->family = "bert";
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadLlamaNamedShape(f, c));
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

}  // namespace ssdtrain::models::detail

// The field checks the Hugging Face family readers share (detail/hf_fields.h).
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {

Result<int64_t> ReadLlamaNamedShape(Fields& f, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(c->hidden, f.Size("hidden_size", "hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->layers, f.Size("num_hidden_layers", "layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->heads, f.Size("num_attention_heads", "heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->ffn_hidden, f.Size("intermediate_size", "ffn_hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->vocab, f.Size("vocab_size", "vocab"));
  return f.Size("max_position_embeddings", "");
}

// The load-balancing loss is a few [tokens, E] ops; the trace leaves it out.
void AssumeNoAuxLoss(Fields& f) {
  f.Assume(
      "the router's load-balancing loss (router_aux_loss_coef) is not in the trace: its ops "
      "are [tokens, experts], small next to the experts");
  f.Assume(
      "balanced routing: tokens x experts_per_token spread evenly over the experts, no "
      "capacity (capacity_factor 0)");
}

Status ReadGroupedQueryHeads(Fields& f, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> kv,
                            f.OptionalSize("num_key_value_heads", "kv_heads"));
  c->kv_heads = kv.value_or(0);
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim,
                            f.OptionalSize("head_dim", "head_dim"));
  c->head_dim = head_dim.value_or(0);
  SSDTRAIN_RETURN_IF_ERROR(
      CheckHeads(f, *c, "num_attention_heads", "hidden_size", "num_key_value_heads"));
  return Status::Ok();
}

Status ReadSwigluAndTiedOutput(Fields& f, const std::string& model_type, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(std::string act, f.StringOr("hidden_act", "silu"));
  if (act != "silu") {
    return f.NotModelled("hidden_act", "\"" + act + "\" for " + model_type + " is",
                         "silu, the SwiGLU MLP of three matrices");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(c->tied_output, f.BoolOr("tie_word_embeddings", false));
  if (c->tied_output) f.Assume("the output layer is the word embeddings (tie_word_embeddings)");
  return Status::Ok();
}

Status RequireFalse(Fields& f, const std::string& field, const std::string& what) {
  SSDTRAIN_ASSIGN_OR_RETURN(bool v, f.BoolOr(field, false));
  if (v) return f.NotModelled(field, what, "false");
  return Status::Ok();
}

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

Status RequireNoDropout(Fields& f, const std::string& field, const std::string& where) {
  SSDTRAIN_ASSIGN_OR_RETURN(double rate, f.NumberOr(field, 0.0));
  if (rate != 0.0) {
    return f.NotModelled(field, Num(rate) + " (dropout on " + where + ") is", "0.0");
  }
  return Status::Ok();
}

Status CheckRotaryFraction(Fields& f, const std::string& field, double fallback) {
  SSDTRAIN_ASSIGN_OR_RETURN(double rotary, f.NumberOr(field, fallback));
  if (!(rotary > 0.0 && rotary <= 1.0)) {
    return f.Bad(field, "expected a fraction in (0, 1], got " + Num(rotary));
  }
  if (rotary < 1.0) {
    f.Assume(field + " " + Num(rotary) +
             ": the rotary op is costed over all of q and k (it rotates part of each head and "
             "copies the rest into the same tensors; memory and op times do not change)");
  }
  return Status::Ok();
}

}  // namespace ssdtrain::models::detail

#include "models/mla_config.h"

#include "traces/detail/json_fields.h"

namespace ssdtrain::models {
namespace {

Status Bad(const std::string& source, const std::string& field, const std::string& what) {
  return Status::InvalidArgument(source + ": " + field + ": " + what);
}

std::string Str(int64_t v) { return std::to_string(v); }

Status ValidateMtp(const ModelConfig& c, const std::string& source) {
  if (c.mtp_layers < 0) {
    return Bad(source, "mtp_layers", "expected 0 (none) or more, got " + Str(c.mtp_layers));
  }
  if (c.mtp_layers > 0 && c.family != "llama") {
    return Bad(source, "mtp_layers",
               "multi-token prediction is only modelled for the llama family, not " + c.family);
  }
  return Status::Ok();
}

}  // namespace

bool IsMla(const ModelConfig& c) { return c.kv_lora_rank > 0; }

Status ReadMlaFields(const traces::detail::ObjectReader& r, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(c->q_lora_rank, r.IntOr("q_lora_rank", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->kv_lora_rank, r.IntOr("kv_lora_rank", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->qk_nope_head_dim, r.IntOr("qk_nope_head_dim", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->qk_rope_head_dim, r.IntOr("qk_rope_head_dim", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->v_head_dim, r.IntOr("v_head_dim", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->mtp_layers, r.IntOr("mtp_layers", 0));
  return Status::Ok();
}

void MlaFieldsToJson(const ModelConfig& c, nlohmann::json& j) {
  if (IsMla(c)) {
    j["q_lora_rank"] = c.q_lora_rank;
    j["kv_lora_rank"] = c.kv_lora_rank;
    j["qk_nope_head_dim"] = c.qk_nope_head_dim;
    j["qk_rope_head_dim"] = c.qk_rope_head_dim;
    j["v_head_dim"] = c.v_head_dim;
  }
  if (c.mtp_layers != 0) j["mtp_layers"] = c.mtp_layers;
}

Status ValidateMla(const ModelConfig& c, const std::string& source) {
  SSDTRAIN_RETURN_IF_ERROR(ValidateMtp(c, source));
  if (c.kv_lora_rank < 0) {
    return Bad(source, "kv_lora_rank",
               "expected 0 (no latent attention) or more, got " + Str(c.kv_lora_rank));
  }
  const std::pair<const char*, int64_t> sizes[] = {{"q_lora_rank", c.q_lora_rank},
                                                   {"qk_nope_head_dim", c.qk_nope_head_dim},
                                                   {"qk_rope_head_dim", c.qk_rope_head_dim},
                                                   {"v_head_dim", c.v_head_dim}};
  if (!IsMla(c)) {
    for (const auto& [field, value] : sizes) {
      if (value != 0) {
        return Bad(source, field,
                   "is a multi-head latent attention field and needs kv_lora_rank > 0");
      }
    }
    return Status::Ok();
  }
  if (c.family != "llama") {
    return Bad(
        source, "kv_lora_rank",
        "multi-head latent attention is only modelled for the llama family, not " + c.family);
  }
  if (c.q_lora_rank < 0) {
    return Bad(
        source, "q_lora_rank",
        "expected 0 (queries projected from the hidden state) or more, got " + Str(c.q_lora_rank));
  }
  for (const auto& [field, value] : sizes) {
    if (std::string(field) != "q_lora_rank" && value <= 0) {
      return Bad(source, field,
                 "expected a positive width with kv_lora_rank set, got " + Str(value));
    }
  }
  if (c.head_dim != 0) {
    return Bad(source, "head_dim",
               "is unused with multi-head latent attention (qk_nope_head_dim, qk_rope_head_dim "
               "and v_head_dim say the widths); expected 0, got " +
                   Str(c.head_dim));
  }
  if (c.kv_heads != 0 && c.kv_heads != c.heads) {
    return Bad(source, "kv_heads",
               Str(c.kv_heads) +
                   " with multi-head latent attention: every head has its own key "
                   "and value (expected 0 or heads " +
                   Str(c.heads) + ")");
  }
  const std::pair<const char*, bool> unmodelled[] = {{"qkv_bias", c.qkv_bias},
                                                     {"qk_norm", c.qk_norm},
                                                     {"parallel_block", c.parallel_block},
                                                     {"attention_bias", c.attention_bias},
                                                     {"attention_sinks", c.attention_sinks},
                                                     {"sliding_window", c.sliding_window != 0}};
  for (const auto& [field, set] : unmodelled) {
    if (set) return Bad(source, field, "is not modelled with multi-head latent attention");
  }
  return Status::Ok();
}

}  // namespace ssdtrain::models

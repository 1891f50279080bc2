#include "models/moe_config.h"

#include <algorithm>
#include <cmath>

#include "models/build_trace.h"
#include "traces/detail/json_fields.h"

namespace ssdtrain::models {
namespace {

// A SwiGLU expert: gate and up projections [2·width, h] and the down projection [h, width].
constexpr int64_t kSwigluMatrices = 3;

Status Bad(const std::string& source, const std::string& field, const std::string& what) {
  return Status::InvalidArgument(source + ": " + field + ": " + what);
}

std::string Str(int64_t v) { return std::to_string(v); }

// A rank routes its own tokens: seq_len / cp of each sequence.
int64_t RoutedAssignments(const ModelConfig& c) {
  return c.seq_len / std::max<int64_t>(1, c.cp) * c.micro_batch * c.experts_per_token;
}

// Fields that only a MoE config may set, with the value that means "unset".
Status CheckDenseHasNoMoeFields(const ModelConfig& c, const std::string& source) {
  const std::pair<const char*, bool> set[] = {
      {"experts_per_token", c.experts_per_token != 0},
      {"expert_ffn_hidden", c.expert_ffn_hidden != 0},
      {"shared_expert_ffn_hidden", c.shared_expert_ffn_hidden != 0},
      {"shared_expert_gate", c.shared_expert_gate},
      {"router_score", c.router_score != "softmax"},
      {"expert_bias", c.expert_bias},
      {"swiglu_limit", c.swiglu_limit != 0.0},
      {"capacity_factor", c.capacity_factor != 0.0},
      {"first_dense_layers", c.first_dense_layers != 0},
      {"moe_layer_step", c.moe_layer_step != 1},
      {"dense_layers", !c.dense_layers.empty()},
      {"ep", c.ep != 1}};
  for (const auto& [field, is_set] : set) {
    if (is_set) return Bad(source, field, "is a mixture-of-experts field and needs experts > 0");
  }
  return Status::Ok();
}

// ep against the experts and the data-parallel ranks (see moe_config.h).
Status ValidateExpertParallel(const ModelConfig& c, const std::string& source) {
  if (c.ep < 1) return Bad(source, "ep", "expected a positive integer, got " + Str(c.ep));
  if (c.experts % c.ep != 0) {
    return Bad(source, "ep", Str(c.ep) + " does not divide the " + Str(c.experts) + " experts");
  }
  // The expert grid regroups the cp · dp ranks of a stage and tp index (traces/layout.h).
  const int64_t cp = std::max<int64_t>(1, c.cp);
  if ((cp * c.dp * c.tp) % (c.ep * c.tp) != 0) {
    const std::string ranks = cp > 1 ? "cp x dp" : "dp";
    const std::string of = cp > 1 ? Str(cp) + " x " + Str(c.dp) : Str(c.dp);
    return Bad(source, "ep",
               "ep x tp = " + Str(c.ep) + " x " + Str(c.tp) + " does not divide " + ranks +
                   " x tp = " + of + " x " + Str(c.tp) +
                   " (Megatron-Core's expert ranks; the experts are split over tp, so ep must "
                   "divide " +
                   ranks + " " + (cp > 1 ? Str(cp * c.dp) : Str(c.dp)) + ")");
  }
  return Status::Ok();
}

}  // namespace

int64_t LocalExperts(const ModelConfig& c) { return IsMoe(c) ? c.experts / c.ep : 0; }

int64_t LocalExpertTokens(const ModelConfig& c, int64_t local) {
  return c.ep * ExpertTokens(c, local);
}

bool IsMoe(const ModelConfig& c) { return c.experts > 0; }

bool IsMoeLayer(const ModelConfig& c, int64_t layer) {
  // A multi-token-prediction depth's block is built as the last block is
  // (Megatron-Core's MTP block spec takes the decoder's last layer spec).
  if (layer >= c.layers) return IsMoeLayer(c, c.layers - 1);
  if (!IsMoe(c) || layer < c.first_dense_layers) return false;
  if ((layer + 1) % c.moe_layer_step != 0) return false;
  return std::find(c.dense_layers.begin(), c.dense_layers.end(), layer) == c.dense_layers.end();
}

int64_t MoeLayerCount(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.layers; ++l) n += IsMoeLayer(c, l) ? 1 : 0;
  return n;
}

int64_t ExpertFfnHidden(const ModelConfig& c) {
  return c.expert_ffn_hidden != 0 ? c.expert_ffn_hidden : FfnHidden(c);
}

int64_t ExpertTokens(const ModelConfig& c, int64_t expert) {
  const int64_t assignments = RoutedAssignments(c);
  const int64_t even = assignments / c.experts + (expert < assignments % c.experts ? 1 : 0);
  if (c.capacity_factor <= 0.0) return even;
  const auto capacity = static_cast<int64_t>(std::ceil(
      c.capacity_factor * static_cast<double>(assignments) / static_cast<double>(c.experts)));
  return std::min(even, capacity);
}

int64_t ExpertParameters(const ModelConfig& c) {
  const int64_t f = ExpertFfnHidden(c);
  return kSwigluMatrices * c.hidden * f + (c.expert_bias ? 2 * f + c.hidden : 0);
}

Result<int64_t> ActiveParameterCount(const ModelConfig& c) {
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t total, ParameterCount(c));
  if (!IsMoe(c)) return total;
  int64_t routed_layers = 0;
  for (int64_t l = 0; l < c.layers + c.mtp_layers; ++l) routed_layers += IsMoeLayer(c, l) ? 1 : 0;
  return total - routed_layers * (c.experts - c.experts_per_token) * ExpertParameters(c);
}

Status ReadMoeFields(const traces::detail::ObjectReader& r, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(c->experts, r.IntOr("experts", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->experts_per_token, r.IntOr("experts_per_token", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->expert_ffn_hidden, r.IntOr("expert_ffn_hidden", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->shared_expert_ffn_hidden, r.IntOr("shared_expert_ffn_hidden", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->shared_expert_gate, r.BoolOr("shared_expert_gate", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c->router_score, r.StringOr("router_score", "softmax"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->expert_bias, r.BoolOr("expert_bias", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c->swiglu_limit, r.NumberOr("swiglu_limit", 0.0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->capacity_factor, r.NumberOr("capacity_factor", 0.0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->first_dense_layers, r.IntOr("first_dense_layers", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c->moe_layer_step, r.IntOr("moe_layer_step", 1));
  if (r.Has("dense_layers")) {
    SSDTRAIN_ASSIGN_OR_RETURN(c->dense_layers, r.IntArray("dense_layers"));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(c->ep, r.IntOr("ep", 1));
  return Status::Ok();
}

void MoeFieldsToJson(const ModelConfig& c, nlohmann::json& j) {
  if (!IsMoe(c)) return;
  j["experts"] = c.experts;
  j["experts_per_token"] = c.experts_per_token;
  j["expert_ffn_hidden"] = c.expert_ffn_hidden;
  j["shared_expert_ffn_hidden"] = c.shared_expert_ffn_hidden;
  j["shared_expert_gate"] = c.shared_expert_gate;
  if (c.router_score != "softmax") j["router_score"] = c.router_score;
  if (c.expert_bias) j["expert_bias"] = true;
  if (c.swiglu_limit != 0.0) j["swiglu_limit"] = c.swiglu_limit;
  j["capacity_factor"] = c.capacity_factor;
  j["first_dense_layers"] = c.first_dense_layers;
  j["moe_layer_step"] = c.moe_layer_step;
  j["dense_layers"] = c.dense_layers;
  if (c.ep != 1) j["ep"] = c.ep;
}

Status ValidateMoe(const ModelConfig& c, const std::string& source) {
  if (c.experts < 0)
    return Bad(source, "experts", "expected 0 (dense) or more, got " + Str(c.experts));
  if (!IsMoe(c)) return CheckDenseHasNoMoeFields(c, source);
  if (c.family != "llama") {
    return Bad(source, "experts",
               "mixture of experts is only modelled for the llama family, not " + c.family);
  }
  if (c.parallel_block) return Bad(source, "parallel_block", "is not modelled with experts");
  if (c.experts_per_token < 1 || c.experts_per_token > c.experts) {
    return Bad(source, "experts_per_token",
               "expected 1 to experts (" + Str(c.experts) + "), got " + Str(c.experts_per_token));
  }
  const std::pair<const char*, int64_t> widths[] = {
      {"expert_ffn_hidden", c.expert_ffn_hidden},
      {"shared_expert_ffn_hidden", c.shared_expert_ffn_hidden},
      {"first_dense_layers", c.first_dense_layers}};
  for (const auto& [field, value] : widths) {
    if (value < 0) return Bad(source, field, "expected 0 or more, got " + Str(value));
  }
  // tp dividing the experts' widths: TensorParallelRefusal, which
  // ValidateConfig asks before this.
  if (c.shared_expert_gate && c.shared_expert_ffn_hidden == 0) {
    return Bad(source, "shared_expert_gate",
               "needs a shared expert (shared_expert_ffn_hidden > 0)");
  }
  if (c.router_score != "softmax" && c.router_score != "sigmoid") {
    return Bad(source, "router_score",
               "expected \"softmax\" or \"sigmoid\", got \"" + c.router_score + "\"");
  }
  if (!(c.swiglu_limit >= 0.0) || !std::isfinite(c.swiglu_limit)) {
    return Bad(source, "swiglu_limit",
               "expected 0 (no clamp) or a positive number, got " + std::to_string(c.swiglu_limit));
  }
  if (!(c.capacity_factor >= 0.0) || !std::isfinite(c.capacity_factor)) {
    return Bad(
        source, "capacity_factor",
        "expected 0 (no capacity) or a positive number, got " + std::to_string(c.capacity_factor));
  }
  if (c.moe_layer_step < 1) {
    return Bad(source, "moe_layer_step", "expected 1 or more, got " + Str(c.moe_layer_step));
  }
  for (int64_t l : c.dense_layers) {
    if (l < 0 || l >= c.layers) {
      return Bad(source, "dense_layers",
                 "layer " + Str(l) + " is outside [0, layers " + Str(c.layers) + ")");
    }
  }
  SSDTRAIN_RETURN_IF_ERROR(ValidateExpertParallel(c, source));
  if (RoutedAssignments(c) < c.experts) {
    return Bad(source, "experts",
               Str(c.experts) + " experts receive no token from seq_len " + Str(c.seq_len) +
                   (c.cp > 1 ? " / cp " + Str(c.cp) : std::string()) + " x micro_batch " +
                   Str(c.micro_batch) + " x experts_per_token " + Str(c.experts_per_token) +
                   " (expected at least one token per expert)");
  }
  return Status::Ok();
}

}  // namespace ssdtrain::models

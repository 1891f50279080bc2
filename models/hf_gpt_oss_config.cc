// Hugging Face configs of gpt-oss (model_type gpt_oss; OpenAI's gpt-oss-20b and
// gpt-oss-120b): Llama's RMSNorm, rotary and grouped-query attention with
//   attention   biases on q, k, v and o (attention_bias), a learned sink logit
//               per head (always), sliding_window on the layers layer_types
//               names "sliding_attention" (alternate ones)
//   experts     num_local_experts of intermediate_size, num_experts_per_tok,
//               every layer MoE, a biased router and biased experts (always),
//               the SwiGLU clamped at swiglu_limit
#include <string>
#include <vector>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

constexpr double kGptOssDefaultSwigluLimit = 7.0;  // GptOssConfig's swiglu_limit

// layer_types onto the window's first layer and period: the windowed layers
// must be every period-th from the first (gpt-oss: 0, 2, 4, ...).
Status ReadLayerTypes(Fields& f, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t window, f.Size("sliding_window", "sliding_window"));
  std::vector<std::string> defaults;
  for (int64_t l = 0; l < c->layers; ++l) {
    defaults.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
  }
  if (!f.Has("layer_types")) {
    f.Assume(
        "layer_types: sliding_attention on the even layers, full on the odd (gpt_oss's "
        "default)");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const std::vector<std::string> types,
                            f.StringListOr("layer_types", defaults));
  if (static_cast<int64_t>(types.size()) != c->layers) {
    return f.Bad("layer_types", Str(static_cast<int64_t>(types.size())) +
                                    " entries for num_hidden_layers " + Str(c->layers));
  }
  std::vector<int64_t> windowed;
  for (int64_t l = 0; l < c->layers; ++l) {
    const std::string& t = types[static_cast<size_t>(l)];
    if (t == "sliding_attention") {
      windowed.push_back(l);
    } else if (t != "full_attention") {
      return f.Bad("layer_types", "entry " + Str(l) + " \"" + t +
                                      "\": expected sliding_attention or full_attention");
    }
  }
  if (windowed.empty()) return Status::Ok();
  const int64_t first = windowed.front();
  const int64_t period = windowed.size() > 1 ? windowed[1] - windowed[0] : c->layers;
  for (int64_t l = 0; l < c->layers; ++l) {
    const bool expected = l >= first && (l - first) % period == 0;
    const bool is = types[static_cast<size_t>(l)] == "sliding_attention";
    if (expected != is) {
      return f.NotModelled("layer_types",
                           "sliding_attention other than every " + Str(period) +
                               " layers from layer " + Str(first) + " (layer " + Str(l) + ") is",
                           "windows a fixed number of layers apart");
    }
  }
  c->sliding_window = window;
  c->sliding_window_first_layer = first;
  c->sliding_window_period = period;
  f.Assume("sliding_window " + Str(window) + " every " + Str(period) + " layers from layer " +
           Str(first) + " (layer_types): flash attention skips the keys outside it");
  return Status::Ok();
}

}  // namespace

Result<int64_t> ReadGptOss(Fields& f, ModelConfig* c) {
  c->family = "llama";
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadLlamaNamedShape(f, c));
  SSDTRAIN_RETURN_IF_ERROR(ReadGroupedQueryHeads(f, c));
  SSDTRAIN_RETURN_IF_ERROR(ReadSwigluAndTiedOutput(f, "gpt_oss", c));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attention_dropout", "attention probabilities"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->attention_bias, f.BoolOr("attention_bias", true));
  c->attention_sinks = true;
  f.Assume(
      "a learned sink logit per attention head (gpt_oss always has them): a weight [heads] "
      "read by the attention kernel, its gradient from the kernel's backward");
  SSDTRAIN_RETURN_IF_ERROR(ReadLayerTypes(f, c));
  // Routed experts on every layer, of intermediate_size.
  SSDTRAIN_ASSIGN_OR_RETURN(c->experts, f.Size("num_local_experts", "experts"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->experts_per_token,
                            f.Size("num_experts_per_tok", "experts_per_token"));
  if (c->experts_per_token > c->experts) {
    return f.Bad("num_experts_per_tok",
                 Str(c->experts_per_token) + " exceeds num_local_experts " + Str(c->experts));
  }
  if (f.Has("experts_per_token")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const int64_t k, f.Size("experts_per_token", ""));
    if (k != c->experts_per_token) {
      return f.Bad("experts_per_token",
                   Str(k) + " differs from num_experts_per_tok " + Str(c->experts_per_token));
    }
  }
  c->expert_ffn_hidden = c->ffn_hidden;
  c->expert_bias = true;
  SSDTRAIN_ASSIGN_OR_RETURN(c->swiglu_limit, f.NumberOr("swiglu_limit", kGptOssDefaultSwigluLimit));
  if (!(c->swiglu_limit > 0.0)) {
    return f.Bad("swiglu_limit", "expected a positive clamp, got " + Num(c->swiglu_limit));
  }
  f.Assume("each expert a SwiGLU of intermediate_size " + Str(c->ffn_hidden) +
           " with biases on its gemms and on the router (gpt_oss always has them), its gate "
           "and up halves clamped at swiglu_limit " +
           Num(c->swiglu_limit) + " in one fused op (α 1.702)");
  AssumeNoAuxLoss(f);
  return positions;
}

}  // namespace ssdtrain::models::detail

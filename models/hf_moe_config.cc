// Hugging Face configs of mixture-of-experts models (see hf_config.h):
//   model_type  experts            k                    expert width            more
//   mixtral     num_local_experts  num_experts_per_tok  intermediate_size       -
//   qwen2_moe   num_experts        num_experts_per_tok  moe_intermediate_size   shared expert of
//               shared_expert_intermediate_size behind a sigmoid gate; dense layers of
//               intermediate_size by decoder_sparse_step and mlp_only_layers
//   qwen3_moe   as qwen2_moe without the shared expert
// The attention is that of mistral (mixtral), qwen2 and qwen3 (detail::ReadLlamaLike).
//   deepseek_v2, deepseek_v3, kimi_k2: multi-head latent attention and
//               DeepSeekMoE (hf_deepseek_config.cc)
//   gpt_oss: attention sinks and biases, alternate windows, biased experts
//            with a clamped SwiGLU (hf_gpt_oss_config.cc)
// The other MoE families are refused naming the field.
#include <algorithm>
#include <array>
#include <string_view>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

constexpr std::array<std::string_view, 7> kMoeRead = {
    "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss"};
constexpr std::array<std::string_view, 5> kMoeRefused = {"olmoe", "phimoe", "dbrx", "granitemoe",
                                                         "jetmoe"};

template <size_t N>
bool In(const std::array<std::string_view, N>& names, const std::string& v) {
  return std::find(names.begin(), names.end(), v) != names.end();
}

Status ReadRouting(Fields& f, const char* experts_field, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(c->experts, f.Size(experts_field, "experts"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->experts_per_token,
                            f.Size("num_experts_per_tok", "experts_per_token"));
  if (c->experts_per_token > c->experts) {
    return f.Bad("num_experts_per_tok",
                 Str(c->experts_per_token) + " exceeds " + experts_field + " " + Str(c->experts));
  }
  return Status::Ok();
}

// Mixtral: Mistral's attention; every layer has E SwiGLU experts of intermediate_size.
Result<int64_t> ReadMixtral(Fields& f, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadLlamaLike(f, "mixtral", c));
  SSDTRAIN_RETURN_IF_ERROR(ReadRouting(f, "num_local_experts", c));
  c->expert_ffn_hidden = c->ffn_hidden;
  SSDTRAIN_ASSIGN_OR_RETURN(double jitter, f.NumberOr("router_jitter_noise", 0.0));
  if (jitter != 0.0) {
    return f.NotModelled("router_jitter_noise", Num(jitter) + " (noise on the router input) is",
                         "0.0");
  }
  f.Assume("each of the experts is a SwiGLU of intermediate_size " + Str(c->ffn_hidden));
  AssumeNoAuxLoss(f);
  return positions;
}

// Qwen2-MoE and Qwen3-MoE: Qwen2's / Qwen3's attention; routed experts of
// moe_intermediate_size; dense layers of intermediate_size where the file says so.
Result<int64_t> ReadQwenMoe(Fields& f, const std::string& model_type, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadLlamaLike(f, model_type, c));
  SSDTRAIN_RETURN_IF_ERROR(ReadRouting(f, "num_experts", c));
  SSDTRAIN_ASSIGN_OR_RETURN(c->expert_ffn_hidden,
                            f.Size("moe_intermediate_size", "expert_ffn_hidden"));
  if (f.Has("decoder_sparse_step")) {
    SSDTRAIN_ASSIGN_OR_RETURN(c->moe_layer_step, f.Size("decoder_sparse_step", "moe_layer_step"));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(c->dense_layers, f.IntListOr("mlp_only_layers", {}));
  for (int64_t l : c->dense_layers) {
    if (l < 0 || l >= c->layers) {
      return f.Bad("mlp_only_layers",
                   "layer " + Str(l) + " is outside [0, num_hidden_layers " + Str(c->layers) + ")");
    }
  }
  // Renormalising the k weights or not changes no shape: read, type-checked, unused.
  SSDTRAIN_RETURN_IF_ERROR(f.BoolOr("norm_topk_prob", false).status());
  if (model_type == "qwen2_moe") {
    SSDTRAIN_ASSIGN_OR_RETURN(c->shared_expert_ffn_hidden, f.Size("shared_expert_intermediate_size",
                                                                  "shared_expert_ffn_hidden"));
    c->shared_expert_gate = true;
    f.Assume("a shared expert behind a sigmoid gate [1, hidden_size]: qwen2_moe always has it");
  }
  if (c->moe_layer_step > 1 || !c->dense_layers.empty()) {
    f.Assume(
        "dense layers (decoder_sparse_step, mlp_only_layers) have a SwiGLU of "
        "intermediate_size " +
        Str(c->ffn_hidden));
  }
  AssumeNoAuxLoss(f);
  return positions;
}

// What each refused family has that the trace does not model.
Status RefuseMoe(Fields& f, const std::string& model_type) {
  return f.NotModelled("model_type", "the mixture-of-experts model \"" + model_type + "\" is",
                       HfMoeSupported());
}

}  // namespace

bool IsHfMoeType(const std::string& model_type) {
  return In(kMoeRead, model_type) || In(kMoeRefused, model_type);
}

std::string HfMoeSupported() {
  std::string out;
  for (std::string_view n : kMoeRead) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

Result<int64_t> ReadHfMoe(Fields& f, const std::string& model_type, ModelConfig* c) {
  if (model_type == "mixtral") return ReadMixtral(f, c);
  if (model_type == "qwen2_moe" || model_type == "qwen3_moe") return ReadQwenMoe(f, model_type, c);
  if (model_type == "deepseek_v2" || model_type == "deepseek_v3" || model_type == "kimi_k2") {
    return ReadDeepseek(f, model_type, c);
  }
  if (model_type == "gpt_oss") return ReadGptOss(f, c);
  return RefuseMoe(f, model_type);
}

}  // namespace ssdtrain::models::detail

// Hugging Face configs of the llama family (see hf_config.h): llama, mistral,
// qwen2, qwen3 and phi3; the MoE readers share their attention (hf_moe_config.cc).
#include <optional>
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

// The dense model_type whose attention a MoE model_type shares.
std::string DenseAttentionOf(const std::string& model_type) {
  if (model_type == "mixtral") return "mistral";
  if (model_type == "qwen2_moe") return "qwen2";
  if (model_type == "qwen3_moe") return "qwen3";
  return model_type;
}

// Sliding-window attention (ModelConfig::sliding_window): mistral, mixtral and
// phi3 window every layer; qwen2 and qwen3 only where use_sliding_window is true,
// and then the layers from max_window_layers on (Qwen2Attention's
// layer_idx >= max_window_layers).
Status ReadSlidingWindow(Fields& f, const std::string& model_type, ModelConfig* c) {
  const bool qwen = model_type == "qwen2" || model_type == "qwen3";
  bool used = true;
  if (qwen) {
    SSDTRAIN_ASSIGN_OR_RETURN(used, f.BoolOr("use_sliding_window", false));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> window,
                            f.OptionalSize("sliding_window", "sliding_window"));
  if (qwen && !used) {
    if (window || f.Has("max_window_layers")) {
      f.Assume("sliding_window and max_window_layers unused: use_sliding_window is false");
    }
    return Status::Ok();
  }
  if (!window) return Status::Ok();
  int64_t first = 0;
  if (qwen) {
    constexpr int64_t kQwenDefaultMaxWindowLayers = 28;  // Qwen2Config's and Qwen3Config's
    SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> from,
                              f.OptionalSize("max_window_layers", "sliding_window_first_layer"));
    if (!f.Has("max_window_layers")) {
      f.Assume("max_window_layers " + Str(kQwenDefaultMaxWindowLayers) + ": " + model_type +
               "'s default");
    }
    first = from.value_or(kQwenDefaultMaxWindowLayers);
    if (first >= c->layers) {
      f.Assume("no layer windowed: max_window_layers " + Str(first) + " >= num_hidden_layers " +
               Str(c->layers));
      return Status::Ok();
    }
  }
  c->sliding_window = *window;
  c->sliding_window_first_layer = first;
  f.Assume("sliding_window " + Str(*window) + " on " +
           (first == 0 ? std::string("every layer") : "the layers from " + Str(first) + " on") +
           ": flash attention skips the keys outside it at seq_len > " + Str(*window));
  return Status::Ok();
}

// Phi-3 is Llama's block with q/k/v fused in one qkv_proj and gate/up in one
// gate_up_proj (the trace's QKV and fc1 gemms are fused so already: the same weights
// and flops), dropout rates that must be 0, and partial rotary (Phi-4-mini).
Status ReadPhi3Extras(Fields& f) {
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attention_dropout", "attention probabilities"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "embd_pdrop", "the embeddings"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "resid_pdrop", "the branch outputs"));
  SSDTRAIN_RETURN_IF_ERROR(CheckRotaryFraction(f, "partial_rotary_factor", 1.0));
  f.Assume("phi3's fused qkv_proj and gate_up_proj: the trace's QKV and fc1 gemms (same weights)");
  return Status::Ok();
}

}  // namespace

// llama, mistral, qwen2, qwen3 and phi3: RMSNorm, rotary positions, SwiGLU, no biases
// (qwen2: on q/k/v only), untied unless tie_word_embeddings, mistral and phi3 with a
// sliding window where set (qwen2 and qwen3 where use_sliding_window); qwen3 normalises each head's
// q and k. mixtral, qwen2_moe and qwen3_moe have the attention of mistral, qwen2 and qwen3.
Result<int64_t> ReadLlamaLike(Fields& f, const std::string& model_type, ModelConfig* c) {
  c->family = "llama";
  const std::string dense = DenseAttentionOf(model_type);
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadLlamaNamedShape(f, c));
  SSDTRAIN_RETURN_IF_ERROR(ReadGroupedQueryHeads(f, c));
  SSDTRAIN_RETURN_IF_ERROR(ReadSwigluAndTiedOutput(f, model_type, c));
  if (dense == "llama" || dense == "qwen3" || dense == "phi3") {
    SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "attention_bias", "true (q/k/v/o biases) is"));
  }
  if (dense == "llama") {
    SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "mlp_bias", "true (MLP biases) is"));
  } else {
    SSDTRAIN_RETURN_IF_ERROR(ReadSlidingWindow(f, dense, c));
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
  if (dense == "phi3") SSDTRAIN_RETURN_IF_ERROR(ReadPhi3Extras(f));
  return positions;
}

}  // namespace ssdtrain::models::detail

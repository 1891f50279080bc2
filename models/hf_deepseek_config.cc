// Hugging Face configs of DeepSeek-V2, DeepSeek-V3 and Kimi K2 (model_type
// deepseek_v2, deepseek_v3, kimi_k2; Kimi K2 is DeepSeek-V3's architecture):
// multi-head latent attention (models/mla_config.h) and DeepSeekMoE.
//   attention  q_lora_rank (null: no query latent), kv_lora_rank,
//              qk_nope_head_dim, qk_rope_head_dim, v_head_dim
//   experts    n_routed_experts, num_experts_per_tok, moe_intermediate_size,
//              n_shared_experts shared experts of moe_intermediate_size each
//              (one shared SwiGLU of their summed width, no gate), scoring_func
//              softmax (V2) or sigmoid (V3)
//   layers     first_k_dense_replace dense layers of intermediate_size, then MoE
//              (moe_layer_freq 1)
//   MTP        num_nextn_predict_layers depths on the last stage
#include <optional>
#include <string>

#include "models/detail/hf_fields.h"

namespace ssdtrain::models::detail {
namespace {

Status ReadLatentAttention(Fields& f, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> kv,
                            f.OptionalSize("num_key_value_heads", "heads"));
  if (kv && *kv != c->heads) {
    return f.Bad("num_key_value_heads",
                 Str(*kv) + " differs from num_attention_heads " + Str(c->heads) +
                     " (multi-head latent attention gives every head its own key and value)");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> q_lora,
                            f.OptionalSize("q_lora_rank", "q_lora_rank"));
  c->q_lora_rank = q_lora.value_or(0);
  if (!q_lora) f.Assume("no query latent (q_lora_rank null): q_proj from the hidden state");
  SSDTRAIN_ASSIGN_OR_RETURN(c->kv_lora_rank, f.Size("kv_lora_rank", "kv_lora_rank"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->qk_nope_head_dim, f.Size("qk_nope_head_dim", "qk_nope_head_dim"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->qk_rope_head_dim, f.Size("qk_rope_head_dim", "qk_rope_head_dim"));
  SSDTRAIN_ASSIGN_OR_RETURN(c->v_head_dim, f.Size("v_head_dim", "v_head_dim"));
  SSDTRAIN_RETURN_IF_ERROR(RequireFalse(f, "attention_bias", "true (q/k/v/o biases) is"));
  SSDTRAIN_RETURN_IF_ERROR(RequireNoDropout(f, "attention_dropout", "attention probabilities"));
  return Status::Ok();
}

Status ReadDeepseekMoe(Fields& f, const std::string& model_type, ModelConfig* c) {
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> routed,
                            f.OptionalSize("n_routed_experts", "experts"));
  if (!routed) {
    return f.NotModelled("n_routed_experts",
                         "null (a dense " + model_type + " without routed experts) is",
                         "a positive count");
  }
  c->experts = *routed;
  SSDTRAIN_ASSIGN_OR_RETURN(c->experts_per_token,
                            f.Size("num_experts_per_tok", "experts_per_token"));
  if (c->experts_per_token > c->experts) {
    return f.Bad("num_experts_per_tok",
                 Str(c->experts_per_token) + " exceeds n_routed_experts " + Str(c->experts));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(c->expert_ffn_hidden,
                            f.Size("moe_intermediate_size", "expert_ffn_hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> shared,
                            f.OptionalSize("n_shared_experts", "shared_expert_ffn_hidden"));
  if (shared) {
    c->shared_expert_ffn_hidden = *shared * c->expert_ffn_hidden;
    f.Assume(Str(*shared) + " shared expert(s) of moe_intermediate_size " +
             Str(c->expert_ffn_hidden) + " as one shared SwiGLU of width " +
             Str(c->shared_expert_ffn_hidden) + ", no gate (Megatron-Core's shared expert)");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(c->first_dense_layers, f.IndexOr("first_k_dense_replace", 0));
  if (c->first_dense_layers >= c->layers) {
    return f.Bad(
        "first_k_dense_replace",
        Str(c->first_dense_layers) + " leaves no MoE layer of num_hidden_layers " + Str(c->layers));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t freq, f.IndexOr("moe_layer_freq", 1));
  if (freq != 1) {
    return f.NotModelled("moe_layer_freq", Str(freq) + " (MoE every " + Str(freq) + " layers) is",
                         "1");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(c->router_score, f.StringOr("scoring_func", "softmax"));
  if (c->router_score != "softmax" && c->router_score != "sigmoid") {
    return f.NotModelled("scoring_func", "\"" + c->router_score + "\" is", "softmax, sigmoid");
  }
  // Type-checked; none changes a shape or an op worth its own time.
  SSDTRAIN_RETURN_IF_ERROR(f.BoolOr("norm_topk_prob", false).status());
  SSDTRAIN_RETURN_IF_ERROR(f.NumberOr("routed_scaling_factor", 1.0).status());
  SSDTRAIN_RETURN_IF_ERROR(f.StringOr("topk_method", "greedy").status());
  SSDTRAIN_RETURN_IF_ERROR(f.IndexOr("n_group", 1).status());
  SSDTRAIN_RETURN_IF_ERROR(f.IndexOr("topk_group", 1).status());
  f.Assume(
      "the router's group-limited top-k (n_group, topk_group), its score correction bias (a "
      "buffer, not a trained weight) and routed_scaling_factor are a few [tokens, experts] "
      "ops inside the router's op; balanced routing spreads the tokens evenly over the experts");
  f.Assume(
      "the load-balancing losses (aux_loss_alpha, seq_aux) are not in the trace: their ops "
      "are [tokens, experts], small next to the experts");
  if (c->first_dense_layers > 0) {
    f.Assume("the first " + Str(c->first_dense_layers) +
             " layers (first_k_dense_replace) have a SwiGLU of intermediate_size " +
             Str(c->ffn_hidden));
  }
  return Status::Ok();
}

}  // namespace

Result<int64_t> ReadDeepseek(Fields& f, const std::string& model_type, ModelConfig* c) {
  c->family = "llama";
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t positions, ReadLlamaNamedShape(f, c));
  SSDTRAIN_RETURN_IF_ERROR(ReadLatentAttention(f, c));
  SSDTRAIN_RETURN_IF_ERROR(ReadSwigluAndTiedOutput(f, model_type, c));
  SSDTRAIN_RETURN_IF_ERROR(ReadDeepseekMoe(f, model_type, c));
  SSDTRAIN_ASSIGN_OR_RETURN(c->mtp_layers, f.IndexOr("num_nextn_predict_layers", 0));
  if (c->mtp_layers > 0) {
    f.Assume(Str(c->mtp_layers) +
             " multi-token prediction depth(s) (num_nextn_predict_layers) on the last stage, "
             "as DeepSeek-V3 trains (Hugging Face's model does not run them)");
  }
  return positions;
}

}  // namespace ssdtrain::models::detail

// Hugging Face `config.json` files as model configs.
//
// A file is recognised as Hugging Face's by its `model_type` or `architectures`
// key (IsHfConfig); LoadModelConfig (model_config.h) then reads it here. Each
// supported model_type has its own explicit field mapping onto ModelConfig:
//
//   model_type        family  width / depth / heads / ffn
//   llama, mistral,   llama   hidden_size, num_hidden_layers, num_attention_heads,
//   qwen2, qwen3              num_key_value_heads, head_dim, intermediate_size
//   gpt2              gpt     n_embd, n_layer, n_head, n_inner (null: 4·n_embd)
//   bert, roberta     bert    hidden_size, num_hidden_layers, num_attention_heads,
//                             intermediate_size, type_vocab_size (token_types)
//   t5                t5      d_model, num_layers (encoder) + num_decoder_layers
//                             (absent: num_layers), num_heads, d_kv (head_dim), d_ff
//   phi               phi     hidden_size, num_hidden_layers, num_attention_heads,
//                             intermediate_size (num_key_value_heads must equal heads)
//   opt               opt     hidden_size, num_hidden_layers, num_attention_heads, ffn_dim
//   gptj              gptj    n_embd, n_layer, n_head, n_inner (null: 4·n_embd)
//   phi3              llama   as llama (fused qkv_proj / gate_up_proj: the same gemms)
//   gpt_neox          neox    hidden_size, num_hidden_layers, num_attention_heads,
//                             intermediate_size, use_parallel_residual, rotary_pct
//   falcon            falcon  hidden_size, num_hidden_layers, num_attention_heads,
//                             multi_query (one kv head), ffn_hidden_size (null: 4h),
//                             parallel_attn
//   RefinedWebModel,  falcon  as falcon with n_layer, n_head (RWConfig's names; its
//   RefinedWeb                multi_query and parallel_attn default to false)
//   gemma             gemma   as llama plus head_dim (absent: 256),
//                             hidden_activation (null: hidden_act)
//   gemma2            gemma2  as gemma plus attn_logit_softcapping,
//                             final_logit_softcapping, query_pre_attn_scalar,
//                             sliding_window (absent: Gemma2Config's 50, 30, 256, 4096)
//   mixtral,          llama   as mistral / qwen2 / qwen3, plus the experts
//   qwen2_moe,                (mixture of experts: hf_moe_config.cc has the mapping,
//   qwen3_moe                 moe_config.h the model)
//
// qwen2 always has q/k/v biases (ModelConfig::qkv_bias) and qwen3 a per-head
// RMSNorm of q and k (qk_norm); neither has a field in the file. phi is Phi-2's
// parallel block (parallel_block: one LayerNorm feeds attention and the GELU MLP),
// with rotary positions (partial_rotary_factor is read; the rotary op is costed over
// all of q and k), biases on every linear and on lm_head, and dropout on the two
// branch outputs only: attention_dropout and embd_pdrop must be 0, resid_pdrop above 0.
// opt is GPT's pre-LayerNorm block with ReLU, biases, learned positions (OPT's table
// has 2 unused rows more than seq_len), tied output, dropout on the branch outputs
// only (attention_dropout, activation_dropout, layerdrop 0; dropout above 0); OPT-350m
// (do_layer_norm_before false, word_embed_proj_dim 512) is refused. gptj is GPT-J's
// parallel block on one LayerNorm, rotary (rotary_dim of each head, costed over all
// of it), biases on fc_in / fc_out and lm_head only, no dropout (every pdrop 0).
// gpt_neox is a parallel block (use_parallel_residual, the default) whose attention
// and MLP read their own LayerNorm, or GPT's sequential block; rotary, biases on
// every linear but embed_out, untied, no dropout. falcon is Falcon-7B's layout:
// rotary, no biases (bias false), a tied output, no dropout, one kv head with
// multi_query, parallel_attn on one LayerNorm; alibi, bias, new_decoder_architecture
// (Falcon-40B's two LayerNorms and kv groups) and the post-LayerNorm residual are
// refused; the original RWConfig files (RefinedWebModel: Falcon-7B, Falcon-RW;
// RefinedWeb: Falcon-40B) are read in their own names. gemma is Llama's block with a
// GeGLU MLP and a tied output (its embedding scaling by sqrt(hidden_size) is not
// traced: a constant multiply that saves nothing); gemma2 adds the soft-capping of
// the attention scores and final logits (tanh ops, their outputs saved), a post-norm
// per branch (four RMSNorms per block) and a sliding window on every other block,
// which must be at least the sequence length (it then masks nothing; a shorter one,
// or null soft-capping, is refused). phi3 is read as llama: dropout
// rates must be 0, and a sliding window is held to llama's rule. Partial rotary
// (phi and phi3 partial_rotary_factor, gpt_neox rotary_pct) is read and checked
// but changes neither the tensors nor the op times (CheckRotaryFraction,
// detail/hf_fields.h).
//
// and vocab_size, max_position_embeddings (gpt2: n_positions; roberta: less its
// first pad_token_id + 1 positions, which its position ids skip), the activation
// (llama family and phi3: silu, the three-matrix SwiGLU MLP; gpt2, bert, gpt_neox
// and falcon: gelu, two
// matrices; t5: feed_forward_proj relu, two matrices, or gated-gelu, the GeGLU of
// three (ModelConfig::gated_mlp; Flan-T5, T5 v1.1); phi: hidden_act gelu*; opt:
// activation_function relu; gptj: activation_function gelu*) and tie_word_embeddings
// (llama family, phi, gptj and gpt_neox untied, gpt2, bert, opt, falcon and gemma
// tied, t5 either: untied_output).
//
// A field that changes the compute in a way the trace does not model is refused
// with "FILE: FIELD: ... not modelled (supported: ...)", never approximated:
// another activation, tied llama embeddings, attention or MLP biases
// (attention_bias, mlp_bias), a sliding window shorter than the positions, BERT's
// or RoBERTa's relative position embeddings, T5 feed-forwards other
// than relu and gated-gelu (or a dense_act_fn other than the one transformers uses
// with them) or other relative-position bucket counts, phi's qk_layernorm,
// grouped-query attention or other dropout placements. The other
// mixture-of-experts model_types (deepseek_v2/v3: multi-head latent attention;
// gpt_oss: sliding-window layers, attention sinks, expert biases; olmoe, phimoe,
// dbrx, granitemoe, jetmoe) are refused naming what is not modelled; any other
// model_type names the supported ones. Fields that do not change the compute (token ids,
// rope_theta, rope_scaling, norm epsilons, dropout rates...) are ignored and listed in the report.
//
// Training-time choices are not in the file and get these defaults:
// seq_len min(max_position_embeddings, 4096) (t5: n_positions, or 512, its
// pre-training length, without one), micro_batch 1, dtype the file's
// torch_dtype (or `dtype`; bfloat16 -> bf16, float16 -> fp16, float32 -> fp32)
// or bf16 without one, tp 1, pp 1, standard attention, Adam with mixed precision.
// The CLI's flags override them (ApplyOverrides).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "traces/status.h"

namespace ssdtrain::models {

// What a Hugging Face config gave and what was assumed, for `trace --summary`.
struct HfReport {
  std::string model_type;            // "llama"
  std::vector<std::string> read;     // "hidden_size 4096 -> hidden"
  std::vector<std::string> assumed;  // "seq_len 4096: min(max_position_embeddings 8192, 4096)"
  std::vector<std::string> ignored;  // top-level fields that were not read
};

// The default sequence length cap: seq_len = min(max_position_embeddings, this).
inline constexpr int64_t kHfDefaultSeqLen = 4096;

// The supported model_types, comma-separated ("bert, gpt2, ..."), for help texts.
std::string HfSupportedModelTypes();

// True for a JSON object with a `model_type` or an `architectures` key.
bool IsHfConfig(const nlohmann::json& j);

// Maps one Hugging Face config object onto a validated ModelConfig named `name`.
// `source` names the file in messages; `report` (may be null) receives what was
// read, assumed and ignored.
Result<ModelConfig> ModelConfigFromHfJson(const nlohmann::json& j, const std::string& source,
                                          const std::string& name, HfReport* report);

// The model name for a config file: the folder's name for ".../<folder>/config.json",
// else the file's stem.
std::string HfConfigName(const std::string& path);

}  // namespace ssdtrain::models

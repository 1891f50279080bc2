// Multi-head latent attention and multi-token prediction: the fields of a
// model config from q_lora_rank to mtp_layers (model_config.h) and their rules.
//
// MLA (DeepSeek-V2 §2.1; Megatron-Core's MLASelfAttention, read in
// ../shared/TODAYS_LAYOUTS.md §4.2), on one tensor-parallel rank with n = heads/tp
// heads, dn = qk_nope_head_dim, dr = qk_rope_head_dim, dv = v_head_dim, on the
// norm output x [s_local, b, h]:
//   q_down   x → [s_local, b, q_lora_rank], replicated over tp (Megatron's
//            'duplicated' TELinear: every rank holds the whole weight and runs
//            its own rows) → q_norm (RMSNorm) → q_up, column-parallel →
//            [s, b, n·(dn + dr)]. Without q_lora_rank, q_proj (column-parallel)
//            from x.
//   kv_down  x → [s_local, b, kv_lora_rank + dr], replicated; its first
//            kv_lora_rank columns → kv_norm → kv_up, column-parallel →
//            [s, b, n·(dn + dv)]; its last dr columns are the rotary key k_pe that
//            every head shares (all-gathered over tp with sequence parallelism;
//            without it, its gradient is all-reduced over tp, each rank having
//            its own heads' part).
//   query = [q_nope, rope(q_pe)], key = [k_nope, rope(k_pe) for every head] and
//            value = a contiguous copy of kv_up's value columns: the three
//            contiguous tensors TE's attention reads (Megatron's .contiguous()).
//   attention with queries and keys dn + dr wide and values dv wide → proj
//            (row-parallel, n·dv → h).
// Saved for backward: x (both down projections read it), both latents before
// their norms (the norms' inputs) and after them (the up projections'
// inputs), k_pe, query, key and value, the context and the lse. Megatron's
// `--recompute-modules mla_up_proj` drops query, key and value after the
// forward and rebuilds them from the latents before the attention's backward:
// the tensors the ops of the "mla_up" scope produce (traces::kMlaUpScope; the
// planner's `recompute-selective` with its modules).
//
// MTP (DeepSeek-V3 §2.2; Megatron-Core's MultiTokenPredictionLayer), depth k
// of mtp_layers, on the last stage after the last block, at layer index
// layers + k: RMSNorms of the embeddings of the tokens k + 1 ahead (enorm, from
// the word table: the first stage's, or with pp > 1 the last stage's own copy)
// and of the hidden state (hnorm; the last block's output or the previous
// depth's), concatenated [s, b, 2h] and projected back to h by eh_proj
// (column-parallel with its output gathered over tp), one transformer block
// built as the last block is (moe_config.h, IsMoeLayer), then its own final
// norm, the shared output layer and a second loss (Megatron scales it by
// mtp_loss_scaling_factor: a scalar, no op).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "models/model_config.h"
#include "traces/status.h"

namespace ssdtrain::traces::detail {
class ObjectReader;
}

namespace ssdtrain::models {

// True when the config has multi-head latent attention (kv_lora_rank > 0).
bool IsMla(const ModelConfig& c);

// The MLA fields and mtp_layers of our own JSON config (absent: none).
Status ReadMlaFields(const traces::detail::ObjectReader& r, ModelConfig* c);
// Writes the MLA fields for an MLA config and mtp_layers where set.
void MlaFieldsToJson(const ModelConfig& c, nlohmann::json& j);
// The rules: without kv_lora_rank no other MLA field is set; with it the
// llama family, qk_nope_head_dim, qk_rope_head_dim and v_head_dim > 0,
// q_lora_rank >= 0, head_dim 0, kv_heads 0 or heads, and none of qkv_bias,
// qk_norm, parallel_block or a sliding window. mtp_layers >= 0, llama
// family only.
Status ValidateMla(const ModelConfig& c, const std::string& source);

}  // namespace ssdtrain::models

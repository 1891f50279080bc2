// Per-rank sizes and the block style of one model, derived once from its config.
#pragma once

#include <cstdint>
#include <vector>

#include "models/detail/trace_builder.h"
#include "models/model_config.h"
#include "traces/fp8.h"
#include "traces/trace.h"

namespace ssdtrain::models::detail {

enum class NormKind { kLayerNorm, kRmsNorm };
enum class MlpKind { kGelu, kRelu, kSwiglu, kGeglu };

// Multi-head latent attention's widths (models/mla_config.h); kv_lora 0: none.
struct MlaSpec {
  int64_t q_lora = 0;  // 0: queries projected from the hidden state directly
  int64_t kv_lora = 0;
  int64_t nope = 0;  // qk_nope_head_dim
  int64_t rope = 0;  // qk_rope_head_dim
};

// What a family's transformer block is made of.
struct BlockStyle {
  NormKind norm = NormKind::kLayerNorm;
  MlpKind mlp = MlpKind::kGelu;
  bool dropout = true;            // post-projection and post-MLP (residual) dropout
  bool attention_dropout = true;  // attention-probability dropout (needs `dropout`)
  bool attn_bias = true;          // the attention's linear layers (QKV, projection) carry biases
  bool mlp_bias = true;           // the MLP's linear layers (fc1, fc2) carry biases
  bool embedding_dropout = true;  // dropout after the embeddings (needs `dropout`)
  bool rotary = false;            // rotary position embedding on q and k
  bool rel_bias = false;          // T5 relative position bias added to the attention scores
  bool qkv_bias = false;          // the QKV layer carries a bias even where `bias` is false (Qwen2)
  bool qk_norm = false;           // RMSNorm over each head's q and k before rotary (Qwen3)
  bool parallel = false;  // attention and MLP read one shared norm; both add to the residual
  // With `parallel`: the MLP reads a norm of its own of the same block input
  // (GPT-NeoX's use_parallel_residual: input_layernorm and post_attention_layernorm).
  bool parallel_two_norms = false;
  // Gemma 2: an RMSNorm of each branch output before its residual add
  // (post_attention_layernorm, post_feedforward_layernorm), beside the two pre-norms.
  bool post_norms = false;
  // Gemma 2: tanh soft-capping of the attention scores (standard attention: its own
  // op, whose output its backward reads) and of the final logits.
  bool attn_softcap = false;
  bool final_softcap = false;
  // gpt-oss: a learned sink logit per head in every softmax's denominator.
  bool sinks = false;
  // Multi-head latent attention (models/mla_config.h) in place of the QKV layer.
  MlaSpec mla;
  // q, k and v (and a gated MLP's gate and up) as linear layers of their own,
  // the gated activation as its two ops (ModelConfig::projections separate).
  bool separate_projections = false;
  // torchtitan's eager kernels (ModelConfig::rotary complex, gqa repeat): the
  // rotary embedding through fp32 complex numbers, three ops each way; k and v
  // copied to every query head before attention.
  bool complex_rotary = false;
  bool repeat_kv = false;
};

// Sizes seen by one tensor-parallel rank. Element counts unless named otherwise.
struct Dims {
  int64_t seq = 0;  // the whole sequence (the model's: position tables)
  int64_t cp = 1;   // context-parallel degree
  int64_t s = 0;    // sequence length on this rank: seq / cp
  int64_t b = 0;    // micro-batch
  int64_t h = 0;    // hidden
  int64_t t = 1;    // tensor-parallel degree
  bool sp = false;  // sequence parallelism in effect (requested and t > 1)
  // TE's userbuffers overlap of the sp collectives (ModelConfig::tp_comm_overlap, in effect with
  // sp)
  bool tp_overlap = false;
  // Megatron's asynchronous tp backward through NCCL (ModelConfig::tp_backward_overlap, in
  // effect with t > 1): a column-parallel layer's backward collectives beside its GEMMs.
  bool tp_async = false;
  int64_t s_local = 0;   // rows of the residual stream on this rank: s / t with sp, else s
  int64_t heads = 0;     // query heads on this rank (a / t)
  int64_t kv_heads = 0;  // key/value heads on this rank
  int64_t d = 0;         // head dim of queries and keys
  int64_t dv = 0;        // head dim of values (MLA: v_head_dim; else d)
  int64_t ffn = 0;       // MLP width on this rank
  int64_t vocab = 0;     // padded vocabulary rows on this rank
  bool flash = false;
  // Self-attention's causal mask: each query attends to the keys up to its own
  // (decoders; not BERT, T5's encoder or any cross-attention). The trace counts
  // all s² pairs either way; a fused kernel's call records the mask
  // (traces::AttentionCall), which the simulator prices.
  bool causal = false;
  // Keys each query attends to where fewer than the sequence (a sliding window,
  // models::AttentionWindow of the block's layer), else 0. Set per block.
  int64_t window = 0;
  // The loss runs on an fp32 copy of 16-bit logits (ModelConfig::fp16_lm_cross_entropy off).
  bool fp32_loss = false;
  // The loss as torch.nn.functional.cross_entropy runs it (ModelConfig::cross_entropy torch).
  bool torch_cross_entropy = false;
  // RMSNorms as torchtitan's eager module runs them (ModelConfig::norm eager).
  bool eager_rmsnorm = false;
  traces::DType act = traces::DType::kFp16;  // activations, weights and gradients
  // FP8 training (traces/fp8.h; models/detail/fp8.h): the blocks' linear layers.
  traces::Fp8Recipe fp8 = traces::Fp8Recipe::kOff;

  std::vector<int64_t> Stream() const { return {s_local, b, h}; }  // residual stream
  std::vector<int64_t> Full(int64_t width) const { return {s, b, width}; }
};

Dims MakeDims(const ModelConfig& c);
// The config's optimizer, precision and ZeRO stage as the builder accounts them.
OptimizerSpec OptimizerFor(const ModelConfig& c);
// The ZeRO sharding of the config's layout (stage, shard group, prefetch).
ZeroSpec ZeroFor(const ModelConfig& c);
BlockStyle StyleFor(const ModelConfig& c);

}  // namespace ssdtrain::models::detail

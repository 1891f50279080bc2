#include "models/detail/dims.h"

#include "models/mla_config.h"

namespace ssdtrain::models::detail {

OptimizerSpec OptimizerFor(const ModelConfig& c) {
  OptimizerSpec spec;
  spec.name = c.optimizer;
  spec.state_words_per_param = OptimizerStateWordsPerParam(c);
  spec.state_dtype = *traces::ParseDType(OptimizerStateDType(c));
  spec.flops_per_param = c.optimizer == "sgd" ? kSgdFlopsPerParam : kAdamFlopsPerParam;
  spec.shards = OptimizerStateShards(c);
  const traces::Layout layout = LayoutOf(c);
  spec.expert_shards = layout.ep > 1 ? layout.ExpertOptimizerShards() : spec.shards;
  spec.master_passes = HasMasterWeights(c) && c.optimizer_step == "megatron";
  spec.loss_scaling = spec.master_passes && c.dtype == "fp16";  // bf16 runs without a scaler
  spec.grad_dtype = *traces::ParseDType(GradDType(c));
  return spec;
}

ZeroSpec ZeroFor(const ModelConfig& c) {
  const traces::Layout layout = LayoutOf(c);
  ZeroSpec spec;
  spec.stage = c.zero_stage;
  spec.shards = layout.GradientShards();
  spec.expert_shards = layout.ep > 1 ? layout.ExpertGradientShards() : spec.shards;
  spec.prefetch = c.zero_prefetch;
  spec.defer_grad_sync = DefersGradSync(c);
  spec.fp32_shards = MasterWeightsAreShards(c);
  return spec;
}

Dims MakeDims(const ModelConfig& c) {
  Dims d;
  d.seq = c.seq_len;
  d.cp = c.cp;
  d.s = c.seq_len / c.cp;
  d.b = c.micro_batch;
  d.h = c.hidden;
  d.t = c.tp;
  d.sp = c.sequence_parallel && c.tp > 1;
  d.tp_overlap = d.sp && c.tp_comm_overlap;
  d.tp_async = c.tp > 1 && c.tp_backward_overlap;
  d.s_local = d.sp ? d.s / c.tp : d.s;
  d.heads = c.heads / c.tp;
  d.kv_heads = KvHeads(c) / c.tp;
  d.d = HeadDim(c);
  d.dv = ValueHeadDim(c);
  d.ffn = FfnHidden(c) / c.tp;
  d.vocab = PaddedVocab(c) / c.tp;
  d.flash = c.attention == "flash";
  // T5's decoder blocks set it themselves (encoder_decoder.cc).
  d.causal = c.family != "bert" && c.family != "t5";
  d.act = *traces::ParseDType(c.dtype);
  d.fp8 = traces::ParseFp8Recipe(c.fp8).value_or(traces::Fp8Recipe::kOff);
  d.fp32_loss = !c.fp16_lm_cross_entropy && d.act != traces::DType::kFp32;
  d.torch_cross_entropy = c.cross_entropy == "torch";
  d.eager_rmsnorm = c.norm == "eager";
  return d;
}

BlockStyle StyleFor(const ModelConfig& c) {
  const std::string& family = c.family;
  BlockStyle s;
  if (family == "t5") {
    s.norm = NormKind::kRmsNorm;
    s.mlp = c.gated_mlp ? MlpKind::kGeglu : MlpKind::kRelu;
    s.attn_bias = s.mlp_bias = false;
    s.rel_bias = true;
  } else if (family == "llama") {
    s.norm = NormKind::kRmsNorm;
    s.mlp = MlpKind::kSwiglu;
    s.dropout = false;
    s.attn_bias = s.mlp_bias = false;
    s.rotary = true;
    s.qkv_bias = c.qkv_bias;
    s.attn_bias = c.attention_bias;
    s.sinks = c.attention_sinks;
    s.qk_norm = c.qk_norm;
    s.separate_projections = c.projections == "separate";
    s.complex_rotary = c.rotary == "complex";
    s.repeat_kv = c.gqa == "repeat";
  } else if (family == "phi") {
    // Phi-2: GPT's LayerNorm, GELU and biases with rotary positions; dropout only
    // on the two branch outputs (resid_pdrop), none on attention probabilities.
    s.rotary = true;
    s.attention_dropout = false;
    s.embedding_dropout = false;
  } else if (family == "opt") {
    // OPT: GPT's block with ReLU; dropout after each branch only (attention_dropout
    // and the embeddings' are 0 in every published OPT).
    s.mlp = MlpKind::kRelu;
    s.attention_dropout = false;
    s.embedding_dropout = false;
  } else if (family == "gptj") {
    // GPT-J: rotary, no dropout (its pdrops are 0), biases on the MLP only.
    s.rotary = true;
    s.dropout = false;
    s.attn_bias = false;
  } else if (family == "neox") {
    // GPT-NeoX (Pythia): GPT's LayerNorm, GELU and biases with rotary positions, no
    // dropout (its rates are 0); a parallel block gives the MLP its own norm.
    s.rotary = true;
    s.dropout = false;
    s.parallel_two_norms = true;
  } else if (family == "falcon") {
    // Falcon-7B: LayerNorm, GELU, rotary, no biases (bias false), no dropout.
    s.rotary = true;
    s.dropout = false;
    s.attn_bias = s.mlp_bias = false;
  } else if (family == "gemma" || family == "gemma2") {
    // Gemma: Llama's RMSNorm and rotary, no biases or dropout, a GeGLU MLP. Gemma 2
    // adds a post-norm to each branch and soft-caps the attention scores and logits.
    s.norm = NormKind::kRmsNorm;
    s.mlp = MlpKind::kGeglu;
    s.dropout = false;
    s.attn_bias = s.mlp_bias = false;
    s.rotary = true;
    s.post_norms = s.attn_softcap = s.final_softcap = family == "gemma2";
  }
  s.parallel = c.parallel_block;
  if (IsMla(c)) s.mla = {c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim};
  return s;
}

}  // namespace ssdtrain::models::detail

// Model configs (configs/models/*.json) and the options that override them.
//
// Read this header first, then build_trace.h. A config file is one JSON object
// whose fields mirror ModelConfig field for field; unknown fields are rejected.
// Every error is a Status whose message names the file, the field and what was
// expected: "configs/models/x.json: heads: 12 does not divide hidden 1000".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "traces/layout.h"
#include "traces/status.h"

namespace ssdtrain::models {

// Mirrors the JSON config field for field. Sizes are element counts.
// Required fields: name, family, hidden, heads, layers, vocab, seq_len (and
// encoder_layers for t5); every other field has the default shown.
struct ModelConfig {
  std::string name;            // "gpt-1.3b"; equals the file's stem
  std::string family;          // gpt, bert, t5, llama, phi, opt, gptj, neox, falcon, gemma, gemma2
  int64_t hidden = 0;          // h (model width)
  int64_t heads = 0;           // a (query heads)
  int64_t kv_heads = 0;        // grouped-query attention (llama, falcon, gemma, gemma2); 0: = heads
  int64_t head_dim = 0;        // per-head width; 0 means hidden / heads (T5-11B: 128)
  int64_t layers = 0;          // transformer blocks (for t5: encoder + decoder)
  int64_t encoder_layers = 0;  // t5 only; decoder_layers = layers - encoder_layers
  int64_t ffn_hidden = 0;      // 0 means 4h
  // llama family only (Qwen2, Qwen3): what its q/k/v attention adds to Llama's.
  bool qkv_bias = false;  // the q/k/v projection carries a bias (Qwen2)
  bool qk_norm = false;   // RMSNorm over each head's q and k, weight [head_dim],
                          // before rotary (Qwen3)
  // llama family only (gpt-oss): biases on q, k, v and the output projection
  // (Hugging Face's attention_bias), and a learned sink logit per head that
  // joins every softmax's denominator (weight [heads]; attention sinks).
  bool attention_bias = false;
  bool attention_sinks = false;
  // Attention and MLP side by side (GPT-J, Phi-2): both read one shared norm of the
  // block input, and both outputs are added to the residual. Not for t5.
  bool parallel_block = false;
  int64_t token_types = 0;  // bert only: segment-type rows; 0 means BERT's 2 (RoBERTa: 1)
  // t5 only (Flan-T5, T5 v1.1): what their blocks and head change from T5's.
  bool gated_mlp = false;      // GeGLU MLP: fc1 projects to 2·ffn_hidden, gelu(gate)·up
  bool untied_output = false;  // the output layer has its own weight, not the embeddings'
  // Sliding-window attention (Mistral, Qwen2, Phi-3, Gemma 2; causal decoders, not
  // bert or t5): a windowed layer's queries attend to at most this many keys, each
  // its own among them (0: no window). Layers sliding_window_first_layer,
  // + sliding_window_period, + 2·period, ... are windowed (Gemma 2: 0 and 2, every
  // other layer; Qwen2: from max_window_layers on); the others attend to the whole
  // causal sequence. What a window changes is AttentionWindow's.
  int64_t sliding_window = 0;
  int64_t sliding_window_period = 1;
  int64_t sliding_window_first_layer = 0;
  // llama family only: the output layer is the word embeddings' weight (Hugging
  // Face's tie_word_embeddings, Qwen2.5-0.5B). The other families' rule is fixed
  // (TiedOutput).
  bool tied_output = false;
  int64_t vocab = 0;               // tokens; padded to a multiple of 128·tp as Megatron-LM does
  int64_t seq_len = 0;             // s (tokens per sample; t5: encoder and decoder alike)
  int64_t micro_batch = 1;         // b (samples per micro-batch)
  int64_t tp = 1;                  // tensor-parallel degree t
  bool sequence_parallel = false;  // Megatron sequence parallelism (no effect when tp = 1)
  // Transformer Engine's userbuffers overlap of the sequence-parallel
  // collectives with the GEMMs beside them (Megatron-Core's
  // --tp-comm-overlap, NeMo's ub_tp_comm_overlap; models/README.md, "TP
  // communication overlap"): needs sequence_parallel; no effect when tp = 1.
  bool tp_comm_overlap = false;
  // Megatron's asynchronous tensor-parallel backward (models/README.md, "TP
  // communication overlap"): a column-parallel layer's input all-gather runs
  // beside its data gradient and the data gradient's all-reduce or
  // reduce-scatter beside its weight gradient, through NCCL, as Megatron-LM
  // has since 2021-08-30 (cf7efd4f, --async-tensor-model-parallel-allreduce),
  // Megatron-Core and Transformer Engine's linear layers do. false: after
  // them, in order, as Megatron-LM ran before (the SC21 runs). No effect when
  // tp = 1. JSON: optional, written when false.
  bool tp_backward_overlap = true;
  // Context-parallel degree (traces/layout.h): each rank holds seq_len / cp
  // tokens of every sequence (the load-balanced split into 2·cp chunks) and
  // attention runs as Transformer Engine's ring of fused attention over the cp
  // ranks (models/detail/ring_attention.h); needs attention flash.
  int64_t cp = 1;
  int64_t pp = 1;  // pipeline stages; must divide layers unless the split below is set
  // The pipeline split (traces/layout.h; Megatron-Core's
  // --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers):
  // the blocks on stage 0 and on the last stage, the stages between sharing
  // the rest evenly; 0: as those. JSON: optional, written when set.
  int64_t pp_first_layers = 0;
  int64_t pp_last_layers = 0;
  std::string attention = "standard";  // standard or flash
  // The fused kernel flash attention runs as: a name the hardware's
  // gpu.attention_kernels give curves for (the DGX H100 preset: flash2,
  // cudnn, flash3), priced by sequence length and causal mask
  // (sim/op_cost.h); "" (default) the hardware's one attention curve, by
  // FLOPs. Changes no op or tensor; needs attention flash.
  std::string attention_kernel;
  std::string dtype = "fp16";  // activations and weights: fp16, bf16, fp32
  // FP8 training (traces/fp8.h): the linear layers of the transformer blocks
  // run their GEMMs in FP8 under Transformer Engine's recipe "delayed",
  // "current", "blockwise" or "mxfp8" (Blackwell only), saving their inputs
  // in FP8 and keeping an FP8 copy of their weights; "" (default) none. Needs
  // a 16-bit dtype; not with ZeRO-3 yet. models/README.md, "FP8".
  std::string fp8;
  // Static memory (weights, gradients, optimizer state; OptimizerStateWordsPerParam):
  std::string optimizer = "adam";   // adam (two moments) or sgd (momentum SGD: one buffer)
  std::string precision = "mixed";  // mixed: fp32 master weights and fp32 optimizer state;
                                    // pure: no master copy, state in dtype (the SSDTrain
                                    // paper's pure FP16). fp32 models have no master copy.
  // How the mixed-precision step runs (only with fp32 master weights: precision
  // mixed, a 16-bit dtype): "megatron" (Megatron-LM's fp16/bf16 optimizer, as
  // its passes: 16-bit gradients copied to fp32, unscaled and checked for
  // inf/nan under fp16's loss scaler, their norm for --clip-grad, the update
  // on the fp32 master weights, the master weights copied back to 16 bits)
  // or "fused" (one pass reading the 16-bit gradients and writing the 16-bit
  // weights, as a fused mixed-precision kernel does).
  std::string optimizer_step = "megatron";
  // ZeRO (traces/layout.h): 0 none; 1 the optimizer state sharded over the
  // shard group (Megatron's distributed optimizer); 2 the gradients too (each
  // layer's reduce-scattered in backward); 3 the weights too (each layer's
  // all-gathered before its forward and its backward, FSDP's FULL_SHARD).
  int64_t zero_stage = 0;
  int64_t dp = 1;        // data-parallel degree
  int64_t dp_shard = 0;  // HSDP: the shard group's dp ranks (a divisor of dp); 0: dp
  // ZeRO-3: the layers whose weights are gathered ahead of the one computing
  // (FSDP's prefetch: 1 holds two layers' full weights at a time). Each costs
  // a layer's full weights in memory.
  int64_t zero_prefetch = 1;
  // ZeRO-2 and 3: reduce-scatter the gradients once a step, after the last
  // micro-batch's backward, instead of after every micro-batch's (FSDP2's
  // set_requires_gradient_sync(False) on the others, NeMo Automodel's
  // defer_fsdp_grad_sync). The full gradients then accumulate over the
  // micro-batches, resident as weight_grads says, and are reduce-scattered by
  // the first optimizer ops: traffic once a step for their memory. No effect at
  // stages 0 and 1, whose gradients are exchanged once a step already; not
  // with HSDP (dp_shard < dp). models/README.md, "ZeRO-2 and 3".
  bool zero_defer_grad_sync = false;
  // Multi-head latent attention (DeepSeek-V2/V3, Kimi K2; llama family only;
  // models/mla_config.h has the rules), on where kv_lora_rank > 0: the keys and
  // values are up-projected from a compressed latent of kv_lora_rank (and the
  // queries from one of q_lora_rank; 0: projected from the hidden state
  // directly); each head's query and key are qk_nope_head_dim wide plus
  // qk_rope_head_dim of rotary part (the key's shared by every head), its value
  // v_head_dim. heads is the query and key/value heads alike; head_dim and
  // kv_heads stay 0.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // Multi-token prediction (DeepSeek-V3's num_nextn_predict_layers; llama
  // family only): this many further depths on the last stage, each a norm of
  // the next tokens' embeddings and of the hidden state, their concatenation
  // projected back to hidden (eh_proj), one transformer block like the last
  // one, its own final norm and the shared output layer and loss
  // (models/mla_config.h, "MTP").
  int64_t mtp_layers = 0;
  // Mixture of experts (llama family only; models/moe_config.h has the rules):
  // experts = 0 is a dense model and every other field below is then unused.
  int64_t experts = 0;                   // E routed experts per MoE layer
  int64_t experts_per_token = 0;         // k: experts each token is dispatched to (top-k)
  int64_t expert_ffn_hidden = 0;         // each expert's (SwiGLU) width; 0 means ffn_hidden
  int64_t shared_expert_ffn_hidden = 0;  // one shared expert every token sees; 0: none
  bool shared_expert_gate = false;       // a sigmoid gate [1, h] on the shared expert (Qwen2-MoE)
  // gpt-oss: the router and every expert carry biases (router [E], fc1 [2f],
  // fc2 [h] per expert), and the experts' SwiGLU clamps its gate and up
  // halves at swiglu_limit (0: no clamp; one fused op, as Megatron-Core's).
  bool expert_bias = false;
  double swiglu_limit = 0.0;
  // How the router scores the experts: "softmax" (Mixtral, Qwen) or "sigmoid"
  // (DeepSeek-V3: per-expert sigmoids, top-k by score plus a load-balancing
  // bias that is a buffer, not a trained weight, the k weights renormalised).
  std::string router_score = "softmax";
  double capacity_factor = 0.0;       // 0: no capacity; else each expert takes at most
                                      // ceil(capacity_factor · tokens · k / E) tokens
  int64_t first_dense_layers = 0;     // the first this many layers are dense
  int64_t moe_layer_step = 1;         // layer l is MoE when (l + 1) % step == 0
  std::vector<int64_t> dense_layers;  // further layers that stay dense (mlp_only_layers)
  // Expert-parallel degree: each rank holds E/ep routed experts per MoE layer
  // and runs them at the tokens the ep group routes to them (ep divides E and dp).
  int64_t ep = 1;
  // Megatron-LM's --fp16-lm-cross-entropy: the loss on the 16-bit logits. Off
  // (Megatron's default): the loss runs on logits.float(), an fp32 copy of the
  // logits whose softmax the vocabulary-parallel cross-entropy saves in place.
  // No effect on fp32 models, whose logits are fp32 already.
  bool fp16_lm_cross_entropy = false;
  // Where the weight gradients live (traces::Header::weight_grads). "persistent"
  // (Megatron-LM's default: its DDP allocates one contiguous grad buffer when the
  // model is wrapped, param.main_grad views into it, and each step zeroes it in
  // place, zero_grad_buffer): resident all step. "set_to_none" (PyTorch's plain
  // optimizer.zero_grad(set_to_none=True), its default since 2.0): each weight
  // gradient is allocated by the backward op that first writes it, kept across
  // the later micro-batches' backwards and freed after the optimizer step.
  std::string weight_grads = "persistent";
  // The dtype the weight gradients are accumulated, held and exchanged
  // between data-parallel ranks in (GradDType resolves it; models/README.md,
  // "Gradient dtype"): "fp16", "bf16" or "fp32"; "" (default) as the
  // frameworks do: fp32 for bf16 with fp32 master weights (Megatron-LM forces
  // --accumulate-allreduce-grads-in-fp32 for bf16; NeMo's distributed Adam
  // syncs gradients in its fp32 state dtype; torchtitan's FSDP2 reduces in
  // float32), else the dtype (Megatron's fp16 default). At ZeRO 0 and 1 the
  // backward writes them in this dtype (Megatron's fp32 main_grad buffer, the
  // weight-gradient GEMMs accumulating into it); at 2 and 3 it writes them in
  // the dtype and each unit's are cast to this dtype for its reduce-scatter
  // (FSDP2's reduce_dtype), whose shards are in it.
  std::string grad_dtype;
  // How the blocks' input projections are laid out (llama family, tp 1):
  // "fused" (Megatron-Core's linear_qkv and linear_fc1: q, k and v one GEMM,
  // the SwiGLU's gate and up one GEMM, one fused activation op) or
  // "separate" (torchtitan's and Hugging Face's Llama: wq, wk and wv, w1 and
  // w3 their own linear layers, silu and the product their own ops;
  // models/README.md, "Projections"). Where a per-op checkpointing policy
  // counts GEMMs (recompute-sac) the two differ.
  std::string projections = "fused";
  // How the loss runs (models/README.md, "Loss"): "vocab_parallel" (Megatron's
  // _VocabParallelCrossEntropy: its softmax in place over its input, the
  // gradient in place over that softmax) or "torch" (torch.nn.functional.
  // cross_entropy as torchtitan and Hugging Face call it: log_softmax saves its
  // own output, and backward writes nll_loss's gradient and log_softmax's, two
  // more logits-sized tensors; tp 1 only).
  std::string cross_entropy = "vocab_parallel";
  // How the rotary embedding runs (llama family; models/README.md, "Block
  // kernels"): "fused" (one kernel over q and k, each element read and written
  // once in the activation dtype: Megatron-Core's and Transformer Engine's
  // fused RoPE) or "complex" (torchtitan's apply_rotary_emb in eager PyTorch:
  // q and k cast to fp32, multiplied by the frequencies as complex numbers,
  // cast back; three kernels each way, 20 bytes an element of a 16-bit q or k
  // where the fused kernel moves 4).
  std::string rotary = "fused";
  // How grouped-query attention reaches the attention kernel (llama family):
  // "native" (the kernel reads kv_heads heads of k and v: flash-attn,
  // Transformer Engine) or "repeat" (torchtitan's repeat_kv before SDPA: k and
  // v copied to every query head, the copies what attention reads and saves,
  // their gradients summed back in backward; nothing to copy where kv_heads
  // equals heads).
  std::string gqa = "native";
  // How the RMSNorms run (llama family): "fused" (one op each way) or "eager"
  // (torchtitan's RMSNorm module, norm_type "rmsnorm": x.float(), its square,
  // mean, rsqrt, the product, type_as and the weight's product, each a kernel,
  // autograd saving the fp32 copy of x; models/README.md, "Block kernels").
  std::string norm = "fused";
};

// Command-line overrides; unset fields keep the config's value.
struct ConfigOverrides {
  std::optional<int64_t> micro_batch, seq_len, tp, pp, cp;
  std::optional<int64_t> pp_first_layers, pp_last_layers;  // the pipeline split
  // The data-parallel degree and ZeRO stage: the optimizer state is sharded
  // over dp when zero_stage is 1 (the planner's searched dp, a plan's dp).
  std::optional<int64_t> dp, zero_stage, dp_shard;
  std::optional<int64_t> ep;  // expert parallelism (MoE models)
  std::optional<bool> zero_defer_grad_sync;
  std::optional<bool> sequence_parallel;
  std::optional<bool> tp_comm_overlap;      // --tp-comm-overlap
  std::optional<bool> tp_backward_overlap;  // false: --no-tp-backward-overlap
  std::optional<std::string> attention, dtype, fp8;
  std::optional<std::string> projections;       // --projections fused|separate
  std::optional<std::string> attention_kernel;  // --attention-kernel NAME ("": none)
  // --rotary fused|complex, --gqa native|repeat, --norm fused|eager (llama
  // family), --grad-dtype fp16|bf16|fp32.
  std::optional<std::string> rotary, gqa, norm, grad_dtype;
};

// Parses one config object (types, required and unknown fields) and validates it.
// `source` names the file in messages ("configs/models/x.json: hidden: ...").
Result<ModelConfig> ModelConfigFromJson(const nlohmann::json& j, const std::string& source);
struct HfReport;  // hf_config.h
// Reads, parses and validates a config file; its "name" must equal the file's stem.
// A Hugging Face config.json (a JSON object with model_type or architectures), or a
// folder holding one, is mapped by ModelConfigFromHfJson (hf_config.h) and named
// after its folder (HfConfigName); `hf` (may be null) then receives what was read
// and assumed, and is left empty for our own configs.
Result<ModelConfig> LoadModelConfig(const std::string& path, HfReport* hf = nullptr);
// The config as JSON, every field written (ModelConfigFromJson reads it back equal);
// qkv_bias, qk_norm, attention_bias, attention_sinks, parallel_block, gated_mlp,
// untied_output and fp16_lm_cross_entropy only where true, weight_grads only where set_to_none,
// optimizer_step only where fused, projections only where separate,
// cross_entropy only where torch, rotary only where complex, gqa only where
// repeat, norm only where eager, grad_dtype only where set, tp_comm_overlap
// only where true, tp_backward_overlap only where false,
// tied_output only where true, token_types and the sliding_window fields only
// where set, and the
// MoE fields only for a MoE config, the MLA fields only for an MLA config and
// mtp_layers only where set, so configs without them print as before.
nlohmann::json ToJson(const ModelConfig& c);
// Applies overrides, then checks consistency with ValidateConfig.
Result<ModelConfig> ApplyOverrides(ModelConfig c, const ConfigOverrides& o,
                                   const std::string& source);
// Positive sizes; known family/attention/dtype; heads divide hidden (unless
// head_dim is set); kv_heads divide heads; tp divides heads, kv_heads, ffn_hidden
// (and seq_len with sequence parallelism); the layers split over pp as the
// layout says (traces::PipelineSplitError: pp divides them, or the first and
// last stages' blocks are set and the rest divide evenly); tp_comm_overlap
// only with sequence_parallel; t5 has
// 0 < encoder_layers < layers; only llama, falcon and gemma have kv_heads other
// than heads; only llama has qkv_bias, qk_norm, tied_output,
// attention_bias or attention_sinks; a sliding window only on causal decoders;
// optimizer adam or sgd, precision mixed or pure, optimizer_step megatron or
// fused, grad_dtype "" or a dtype, weight_grads persistent or
// set_to_none, dp >= 1, the layout's zero_stage and dp_shard
// (traces::ValidateLayout), zero_prefetch >= 0, zero_defer_grad_sync not
// with HSDP at stage 2 or 3; cp > 1 only with flash
// attention, outside t5, with the sequence split into 2·cp chunks (of tp
// pieces each under sequence parallelism: traces::SequenceSplitError);
// the MLA and MTP rules (ValidateMla, mla_config.h) and the MoE rules
// (ValidateMoe, moe_config.h).
Status ValidateConfig(const ModelConfig& c, const std::string& source);

// Derived sizes with the defaults resolved (kv_heads 0 -> heads, and so on).
int64_t KvHeads(const ModelConfig& c);
// The query and key width per head (MLA: qk_nope_head_dim + qk_rope_head_dim).
int64_t HeadDim(const ModelConfig& c);
// The value width per head: v_head_dim with MLA, else HeadDim.
int64_t ValueHeadDim(const ModelConfig& c);
int64_t FfnHidden(const ModelConfig& c);
// vocab rounded up to a multiple of 128·tp (Megatron-LM's --make-vocab-size-divisible-by).
int64_t PaddedVocab(const ModelConfig& c);

// Optimizer state per parameter on one rank before ZeRO sharding, in elements of
// OptimizerStateDType: moments (adam 2, sgd 1) plus, for mixed precision with a
// 16-bit dtype, the fp32 master copy (not at ZeRO-3: MasterWeightsAreShards). adam mixed fp16: 3
// fp32 words (12 bytes); adam pure fp16: 2 fp16 (4 bytes); sgd mixed: 2 fp32 (8 bytes); sgd pure: 1
// fp16.
int64_t OptimizerStateWordsPerParam(const ModelConfig& c);
// fp32 master weights: mixed precision with a 16-bit dtype.
bool HasMasterWeights(const ModelConfig& c);
// Where they live at ZeRO-3: the weights' shards themselves, held in fp32
// (PyTorch FSDP2 with a MixedPrecisionPolicy, torchtitan's: the sharded
// parameters are the fp32 ones the optimizer updates, cast to the dtype for
// each all-gather), not a word of the optimizer state. Else in the state.
bool MasterWeightsAreShards(const ModelConfig& c);
// "fp32" for mixed precision and fp32 models, else the config's dtype.
std::string OptimizerStateDType(const ModelConfig& c);
// The weight gradients' dtype (ModelConfig::grad_dtype, "" resolved): the one
// place the rule is decided.
std::string GradDType(const ModelConfig& c);
// The config's layout (tp, cp, pp and its split, dp, ep, zero_stage, dp_shard): the one place
// its shard degrees and groups come from.
traces::Layout LayoutOf(const ModelConfig& c);
// The gradients are reduce-scattered once a step (zero_defer_grad_sync at
// ZeRO 2 or 3): what the trace's header says (traces::Header).
bool DefersGradSync(const ModelConfig& c);
// Ranks the optimizer state is split over: the shard group at ZeRO 1 and
// above (LayoutOf(c).OptimizerShards()), else 1.
int64_t OptimizerStateShards(const ModelConfig& c);
// The keys each query of `layer` (0-based, over the whole model) attends to when
// that is fewer than the sequence: sliding_window where the layer is windowed
// and the window is shorter than seq_len, else 0 (the whole causal sequence).
// Flash attention skips the keys outside it (its FLOPs scale, its saved bytes do
// not change); standard attention computes and saves the full scores and masks
// them, as Hugging Face's eager attention does, so nothing of it changes.
int64_t AttentionWindow(const ModelConfig& c, int64_t layer);
// Whether the output layer is the word embeddings' weight (with pp > 1 the last
// stage keeps its own copy, as Megatron-LM does): gpt, bert, opt, falcon, gemma
// and gemma2 always; t5 unless untied_output; llama where tied_output; the
// others (phi, gptj, neox) never.
bool TiedOutput(const ModelConfig& c);
// Why the model cannot run context-parallel (cp > 1), or "" where it can:
// attention must be flash, the family not t5, no sliding window shorter than
// the sequence, no multi-head latent attention, the model dense. The sequence
// split is the layout's rule (traces::SequenceSplitError).
std::string ContextParallelRefusal(const ModelConfig& c);
// Why the model cannot run at tensor-parallel degree `tp` (>= 1), or "" where
// it can: tp must divide the heads, the key/value heads, ffn_hidden and, in a
// MoE model, the routed and the shared experts' widths, each split over the
// tp ranks. "8 does not divide kv_heads 4". The config's validation and the
// planner's search (sim::PlannerOptions::tp_refusal) both ask it.
std::string TensorParallelRefusal(const ModelConfig& c, int64_t tp);
// Why the stages between the first and the last of `layout`'s pipeline are not
// alike for this model, or "" where they are (or there are fewer than two):
// the simulator and the planner let stage 1 stand for all of them
// (sim/stage_plans.h), which holds only where each holds the same kinds of
// blocks in the same order: encoder or decoder (t5), MoE or dense
// (first_dense_layers, moe_layer_step, dense_layers), windowed or full
// attention; under interleaving (vp > 1) over each stage's model chunks.
// Interleaving an encoder-decoder model (t5) is refused at any pp > 1: its
// encoder's outputs reach chunks past the next. The planner's search skips
// such a layout and refuses it pinned (sim::PlannerOptions::pp_refusal).
std::string PipelineStagesRefusal(const ModelConfig& c, const traces::Layout& layout);

}  // namespace ssdtrain::models

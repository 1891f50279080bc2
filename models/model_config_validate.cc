// ValidateConfig (models/model_config.h): what a model config must hold, each
// class of bad input refused naming the file, the field and what was
// expected. The derived sizes and the config's layout are model_config.cc's.
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "models/mla_config.h"
#include "models/model_config.h"
#include "models/moe_config.h"
#include "traces/fp8.h"
#include "traces/layout.h"

namespace ssdtrain::models {
namespace {

constexpr std::array<std::string_view, 11> kFamilies = {
    "gpt", "bert", "t5", "llama", "phi", "opt", "gptj", "neox", "falcon", "gemma", "gemma2"};
// The families whose attention may have fewer kv heads than query heads.
constexpr std::array<std::string_view, 4> kGroupedQueryFamilies = {"llama", "falcon", "gemma",
                                                                   "gemma2"};
constexpr std::array<std::string_view, 2> kAttentions = {"standard", "flash"};
constexpr std::array<std::string_view, 3> kDTypes = {"fp16", "bf16", "fp32"};
constexpr std::array<std::string_view, 2> kOptimizers = {"adam", "sgd"};
constexpr std::array<std::string_view, 2> kPrecisions = {"mixed", "pure"};
constexpr std::array<std::string_view, 2> kWeightGrads = {"persistent", "set_to_none"};
constexpr std::array<std::string_view, 2> kOptimizerSteps = {"megatron", "fused"};
constexpr std::array<std::string_view, 2> kProjections = {"fused", "separate"};
constexpr std::array<std::string_view, 2> kCrossEntropies = {"vocab_parallel", "torch"};
constexpr std::array<std::string_view, 2> kRotaries = {"fused", "complex"};
constexpr std::array<std::string_view, 2> kGqas = {"native", "repeat"};
constexpr std::array<std::string_view, 2> kNorms = {"fused", "eager"};

template <size_t N>
bool OneOf(const std::array<std::string_view, N>& names, const std::string& v) {
  for (std::string_view n : names) {
    if (n == v) return true;
  }
  return false;
}

template <size_t N>
std::string List(const std::array<std::string_view, N>& names) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += names[i];
  }
  return out;
}

Status Bad(const std::string& source, const std::string& field, const std::string& what) {
  return Status::InvalidArgument(source + ": " + field + ": " + what);
}

std::string Str(int64_t v) { return std::to_string(v); }

// `value` of `field` one of `names`, else refused with them and what each means.
template <size_t N>
Status RequireOneOf(const std::string& source, const std::string& field, const std::string& value,
                    const std::array<std::string_view, N>& names, const std::string& meanings) {
  if (OneOf(names, value)) return Status::Ok();
  return Bad(source, field,
             "unknown value \"" + value + "\", expected " + List(names) + " (" + meanings + ")");
}

// The window's fields (cp with a window: ContextParallelRefusal).
Status ValidateSlidingWindow(const ModelConfig& c, const std::string& source) {
  if (c.sliding_window < 0) {
    return Bad(source, "sliding_window", "expected >= 0 (0: none), got " + Str(c.sliding_window));
  }
  if (c.sliding_window == 0) {
    if (c.sliding_window_period != 1 || c.sliding_window_first_layer != 0) {
      return Bad(
          source,
          c.sliding_window_period != 1 ? "sliding_window_period" : "sliding_window_first_layer",
          "is set but sliding_window is 0 (no window)");
    }
    return Status::Ok();
  }
  if (c.family == "bert" || c.family == "t5") {
    return Bad(source, "sliding_window",
               "is only modelled for causal decoders, not the " + c.family +
                   " family (its attention is bidirectional)");
  }
  if (c.sliding_window_period < 1) {
    return Bad(
        source, "sliding_window_period",
        "expected >= 1 (1: every layer, 2: every other), got " + Str(c.sliding_window_period));
  }
  if (c.sliding_window_first_layer < 0 || c.sliding_window_first_layer >= c.layers) {
    return Bad(source, "sliding_window_first_layer",
               "expected 0 <= first layer < layers (" + Str(c.layers) + "), got " +
                   Str(c.sliding_window_first_layer));
  }
  return Status::Ok();
}

// The named choices (family, attention, dtype, FP8 recipe, optimizer and its
// precision, step and gradients) and the ZeRO settings.
Status ValidateSettings(const ModelConfig& c, const std::string& source) {
  if (c.name.empty()) return Bad(source, "name", "expected a non-empty string");
  if (!OneOf(kFamilies, c.family)) {
    return Bad(source, "family",
               "unknown family \"" + c.family + "\", expected " + List(kFamilies));
  }
  if (!OneOf(kAttentions, c.attention)) {
    return Bad(source, "attention",
               "unknown attention \"" + c.attention + "\", expected " + List(kAttentions));
  }
  if (!c.attention_kernel.empty() && c.attention != "flash") {
    return Bad(source, "attention_kernel",
               "names the kernel flash attention runs as (\"" + c.attention_kernel +
                   "\"), but attention is " + c.attention + "; set attention to flash");
  }
  if (!OneOf(kDTypes, c.dtype)) {
    return Bad(source, "dtype", "unknown dtype \"" + c.dtype + "\", expected " + List(kDTypes));
  }
  if (const std::optional<traces::Fp8Recipe> fp8 = traces::ParseFp8Recipe(c.fp8); !fp8) {
    return Bad(source, "fp8",
               "unknown recipe \"" + c.fp8 + "\", expected " +
                   std::string(traces::kFp8RecipeNames) + " (or off)");
  } else if (*fp8 != traces::Fp8Recipe::kOff && c.dtype == "fp32") {
    return Bad(source, "fp8",
               "FP8 training keeps its weights and the tensors it does not quantize in a "
               "16-bit dtype; got dtype fp32 (use bf16)");
  }
  if (!OneOf(kOptimizers, c.optimizer)) {
    return Bad(source, "optimizer",
               "unknown optimizer \"" + c.optimizer + "\", expected " + List(kOptimizers));
  }
  if (!OneOf(kPrecisions, c.precision)) {
    return Bad(source, "precision",
               "unknown precision \"" + c.precision + "\", expected " + List(kPrecisions) +
                   " (mixed: fp32 master weights; pure: none)");
  }
  SSDTRAIN_RETURN_IF_ERROR(RequireOneOf(
      source, "optimizer_step", c.optimizer_step, kOptimizerSteps,
      "megatron: Megatron-LM's mixed-precision optimizer pass by pass; fused: one pass"));
  SSDTRAIN_RETURN_IF_ERROR(RequireOneOf(source, "projections", c.projections, kProjections,
                                        "fused: Megatron-Core's linear_qkv and linear_fc1; "
                                        "separate: torchtitan's wq, wk, wv, w1 and w3"));
  SSDTRAIN_RETURN_IF_ERROR(
      RequireOneOf(source, "cross_entropy", c.cross_entropy, kCrossEntropies,
                   "vocab_parallel: Megatron's in-place cross-entropy; torch: "
                   "torch.nn.functional.cross_entropy, log_softmax and nll_loss"));
  SSDTRAIN_RETURN_IF_ERROR(RequireOneOf(source, "rotary", c.rotary, kRotaries,
                                        "fused: one kernel over q and k; complex: torchtitan's "
                                        "apply_rotary_emb, fp32 complex numbers in eager PyTorch"));
  SSDTRAIN_RETURN_IF_ERROR(
      RequireOneOf(source, "gqa", c.gqa, kGqas,
                   "native: the attention kernel reads the key/value heads; repeat: torchtitan's "
                   "repeat_kv copies them to every query head first"));
  SSDTRAIN_RETURN_IF_ERROR(RequireOneOf(source, "norm", c.norm, kNorms,
                                        "fused: one op each way; eager: torchtitan's RMSNorm "
                                        "module, each of its steps a kernel"));
  if (!c.grad_dtype.empty() && !OneOf(kDTypes, c.grad_dtype)) {
    return Bad(source, "grad_dtype",
               "unknown dtype \"" + c.grad_dtype + "\", expected " + List(kDTypes) +
                   " (or leave it out: fp32 for bf16 with fp32 master weights, else the dtype)");
  }
  SSDTRAIN_RETURN_IF_ERROR(
      RequireOneOf(source, "weight_grads", c.weight_grads, kWeightGrads,
                   "persistent: one grad buffer all step; set_to_none: allocated in backward"));
  if (c.zero_stage < 0 || c.zero_stage > 3) {
    return Bad(source, "zero_stage",
               "expected 0, 1, 2 or 3 (1: the optimizer state sharded over dp; 2: the gradients "
               "too; 3: the weights too), got " +
                   Str(c.zero_stage));
  }
  if (c.zero_prefetch < 0) {
    return Bad(
        source, "zero_prefetch",
        "expected a non-negative integer (the layers gathered ahead), got " + Str(c.zero_prefetch));
  }
  return Status::Ok();
}

// The model's dimensions: positive where they must be, non-negative where 0
// means the default, heads dividing hidden and kv_heads dividing heads.
Status ValidateDims(const ModelConfig& c, const std::string& source) {
  const std::pair<const char*, int64_t> positive[] = {
      {"hidden", c.hidden}, {"heads", c.heads},     {"layers", c.layers},
      {"vocab", c.vocab},   {"seq_len", c.seq_len}, {"micro_batch", c.micro_batch}};
  for (const auto& [field, value] : positive) {
    if (value <= 0) return Bad(source, field, "expected a positive integer, got " + Str(value));
  }
  const std::pair<const char*, int64_t> non_negative[] = {{"kv_heads", c.kv_heads},
                                                          {"head_dim", c.head_dim},
                                                          {"encoder_layers", c.encoder_layers},
                                                          {"token_types", c.token_types},
                                                          {"ffn_hidden", c.ffn_hidden},
                                                          {"sliding_window", c.sliding_window}};
  for (const auto& [field, value] : non_negative) {
    if (value < 0) {
      return Bad(source, field,
                 "expected a non-negative integer (0 means the default), got " + Str(value));
    }
  }
  if (c.head_dim == 0 && !IsMla(c) && c.hidden % c.heads != 0) {
    return Bad(source, "heads", Str(c.heads) + " does not divide hidden " + Str(c.hidden));
  }
  const int64_t kv = KvHeads(c);
  if (c.heads % kv != 0) {
    return Bad(source, "kv_heads", Str(kv) + " does not divide heads " + Str(c.heads));
  }
  if (kv != c.heads && !OneOf(kGroupedQueryFamilies, c.family)) {
    return Bad(source, "kv_heads",
               "grouped-query attention (kv_heads " + Str(kv) + " != heads " + Str(c.heads) +
                   ") is only modelled for the " + List(kGroupedQueryFamilies) + " families, not " +
                   c.family);
  }
  return Status::Ok();
}

// The layout the config states: its degrees, HSDP, deferred gradient sync,
// and the model splitting by tp, cp (with sequence parallelism) and pp.
Status ValidateConfigLayout(const ModelConfig& c, const std::string& source) {
  const std::pair<const char*, int64_t> positive[] = {
      {"tp", c.tp}, {"pp", c.pp}, {"dp", c.dp}, {"cp", c.cp}};
  for (const auto& [field, value] : positive) {
    if (value <= 0) return Bad(source, field, "expected a positive integer, got " + Str(value));
  }
  if (c.dp_shard != 0) {  // the rest of the layout's rules are the planner's and the plan's
    traces::Layout shard;
    shard.dp = c.dp;
    shard.cp = std::max<int64_t>(1, c.cp);
    shard.ep = std::max<int64_t>(1, c.ep);
    shard.zero_stage = c.zero_stage;
    shard.dp_shard = c.dp_shard;
    SSDTRAIN_RETURN_IF_ERROR(traces::ValidateLayout(shard, source));
  }
  if (DefersGradSync(c) && c.dp_shard != 0 && c.dp_shard < c.dp) {
    return Bad(source, "zero_defer_grad_sync",
               "not modelled with HSDP (dp_shard " + Str(c.dp_shard) + " < dp " + Str(c.dp) +
                   "): the replicas' all-reduce of the shards would wait for the deferred "
                   "reduce-scatters; drop one of the two");
  }
  if (const std::string why = TensorParallelRefusal(c, c.tp); !why.empty()) {
    return Bad(source, "tp", why);
  }
  if (c.cp > 1) {
    if (const std::string why = ContextParallelRefusal(c); !why.empty()) {
      return Bad(source, "cp", Str(c.cp) + ": " + why);
    }
    traces::Layout split;
    split.tp = c.tp;
    split.cp = c.cp;
    const std::string why =
        traces::SequenceSplitError(split, c.seq_len, c.sequence_parallel && c.tp > 1);
    if (!why.empty()) return Bad(source, "seq_len", why);
  }
  if (c.tp_comm_overlap && !c.sequence_parallel) {
    return Bad(source, "tp_comm_overlap",
               "true needs sequence_parallel: Transformer Engine's userbuffers overlap the "
               "sequence-parallel all-gathers and reduce-scatters with the GEMMs beside them");
  }
  if (c.sequence_parallel && c.tp > 1 && c.seq_len % c.tp != 0) {
    return Bad(source, "seq_len",
               Str(c.seq_len) + " is not divisible by tp " + Str(c.tp) +
                   " (sequence parallelism splits the sequence across tensor-parallel ranks)");
  }
  if (const auto split = traces::PipelineSplitError(LayoutOf(c), c.layers)) {
    return Bad(source, split->field, split->why);
  }
  return Status::Ok();
}

// What only some families model: t5's encoder and gated MLP, BERT's token
// types, Llama's biases, norms, tied output and sinks; parallel blocks.
Status ValidateFamilyFeatures(const ModelConfig& c, const std::string& source) {
  if (c.family == "t5") {
    if (c.encoder_layers <= 0 || c.encoder_layers >= c.layers) {
      return Bad(source, "encoder_layers",
                 "t5 needs 0 < encoder_layers < layers (" + Str(c.layers) + "), got " +
                     Str(c.encoder_layers));
    }
  } else if (c.encoder_layers != 0) {
    return Bad(
        source, "encoder_layers",
        "only the t5 family has encoder_layers, got " + Str(c.encoder_layers) + " for " + c.family);
  }
  if (c.family == "gemma2" && c.parallel_block) {
    return Bad(source, "parallel_block",
               "is not modelled for gemma2 (each branch has its own pre- and post-norm)");
  }
  if (c.family == "t5" && c.parallel_block) {
    return Bad(source, "parallel_block",
               "is not modelled for t5 (its decoder blocks have cross-attention)");
  }
  if (c.family != "bert" && c.token_types != 0) {
    return Bad(source, "token_types", "is only modelled for the bert family, not " + c.family);
  }
  if (c.family != "t5" && (c.gated_mlp || c.untied_output)) {
    return Bad(source, c.gated_mlp ? "gated_mlp" : "untied_output",
               "is only modelled for the t5 family, not " + c.family);
  }
  const std::pair<const char*, bool> llama_only[] = {{"qkv_bias", c.qkv_bias},
                                                     {"qk_norm", c.qk_norm},
                                                     {"tied_output", c.tied_output},
                                                     {"attention_bias", c.attention_bias},
                                                     {"attention_sinks", c.attention_sinks}};
  for (const auto& [field, set] : llama_only) {
    if (set && c.family != "llama") {
      return Bad(source, field, "is only modelled for the llama family, not " + c.family);
    }
  }
  // torchtitan's eager block kernels: the llama block's own rotary and attention.
  const auto eager_kernel = [&](const char* field, const std::string& value, bool set) -> Status {
    if (!set) return Status::Ok();
    if (c.family != "llama") {
      return Bad(source, field, value + " is only modelled for the llama family, not " + c.family);
    }
    if (c.kv_lora_rank > 0) {
      return Bad(source, field,
                 value +
                     " is not modelled with multi-head latent attention (kv_lora_rank set: "
                     "its rotary and heads are the latent attention's own)");
    }
    return Status::Ok();
  };
  SSDTRAIN_RETURN_IF_ERROR(eager_kernel("rotary", c.rotary, c.rotary != "fused"));
  SSDTRAIN_RETURN_IF_ERROR(eager_kernel("gqa", c.gqa, c.gqa != "native"));
  SSDTRAIN_RETURN_IF_ERROR(eager_kernel("norm", c.norm, c.norm != "fused"));
  if (c.norm == "eager" && c.qk_norm) {
    return Bad(source, "norm",
               "eager is not modelled with qk_norm (the per-head norms of q and k run fused)");
  }
  if (c.projections == "separate") {
    if (c.family != "llama") {
      return Bad(source, "projections",
                 "separate is only modelled for the llama family, not " + c.family);
    }
    if (c.kv_lora_rank > 0) {
      return Bad(source, "projections",
                 "separate is not modelled with multi-head latent attention (kv_lora_rank set)");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateConfig(const ModelConfig& c, const std::string& source) {
  SSDTRAIN_RETURN_IF_ERROR(ValidateSettings(c, source));
  SSDTRAIN_RETURN_IF_ERROR(ValidateDims(c, source));
  SSDTRAIN_RETURN_IF_ERROR(ValidateConfigLayout(c, source));
  SSDTRAIN_RETURN_IF_ERROR(ValidateFamilyFeatures(c, source));
  SSDTRAIN_RETURN_IF_ERROR(ValidateSlidingWindow(c, source));
  SSDTRAIN_RETURN_IF_ERROR(ValidateMla(c, source));
  SSDTRAIN_RETURN_IF_ERROR(ValidateMoe(c, source));
  const std::optional<traces::Fp8Recipe> recipe = traces::ParseFp8Recipe(c.fp8);
  if (const auto u =
          traces::Unmodelled(LayoutOf(c), recipe && *recipe != traces::Fp8Recipe::kOff)) {
    return Bad(source, u->field, u->why);
  }
  return Status::Ok();
}

}  // namespace ssdtrain::models

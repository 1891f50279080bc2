// A model config's derived sizes, its layout and its overrides (models/model_config.h);
// what a config must hold is model_config_validate.cc's.
#include "models/model_config.h"

#include <string>

#include "models/mla_config.h"
#include "traces/fp8.h"

namespace ssdtrain::models {
namespace {

// Adam keeps two moments per parameter; momentum SGD one buffer (Megatron-LM's
// --optimizer sgd runs torch.optim.SGD with --sgd-momentum, 0.9 by default).
constexpr int64_t kAdamMoments = 2;
constexpr int64_t kSgdMoments = 1;
// Megatron-LM pads the vocabulary to a multiple of this times tp (--make-vocab-size-divisible-by).
constexpr int64_t kVocabPadding = 128;

bool Windowed(const ModelConfig& c, int64_t layer) {
  return c.sliding_window > 0 && layer >= c.sliding_window_first_layer &&
         (layer - c.sliding_window_first_layer) % c.sliding_window_period == 0;
}
}  // namespace

int64_t AttentionWindow(const ModelConfig& c, int64_t layer) {
  return Windowed(c, layer) && c.sliding_window < c.seq_len ? c.sliding_window : 0;
}

bool TiedOutput(const ModelConfig& c) {
  if (c.family == "t5") return !c.untied_output;
  if (c.family == "llama") return c.tied_output;
  return c.family == "gpt" || c.family == "bert" || c.family == "opt" || c.family == "falcon" ||
         c.family == "gemma" || c.family == "gemma2";
}

int64_t KvHeads(const ModelConfig& c) { return c.kv_heads == 0 ? c.heads : c.kv_heads; }
int64_t HeadDim(const ModelConfig& c) {
  if (IsMla(c)) return c.qk_nope_head_dim + c.qk_rope_head_dim;
  return c.head_dim != 0 ? c.head_dim : (c.heads > 0 ? c.hidden / c.heads : 0);
}
int64_t ValueHeadDim(const ModelConfig& c) { return IsMla(c) ? c.v_head_dim : HeadDim(c); }
int64_t FfnHidden(const ModelConfig& c) { return c.ffn_hidden == 0 ? 4 * c.hidden : c.ffn_hidden; }
int64_t PaddedVocab(const ModelConfig& c) {
  const int64_t multiple = kVocabPadding * c.tp;
  return (c.vocab + multiple - 1) / multiple * multiple;
}

int64_t OptimizerStateWordsPerParam(const ModelConfig& c) {
  const int64_t moments = c.optimizer == "sgd" ? kSgdMoments : kAdamMoments;
  return moments + (HasMasterWeights(c) && !MasterWeightsAreShards(c) ? 1 : 0);
}
bool HasMasterWeights(const ModelConfig& c) { return c.precision == "mixed" && c.dtype != "fp32"; }
bool MasterWeightsAreShards(const ModelConfig& c) {
  return c.zero_stage >= 3 && HasMasterWeights(c);
}
std::string OptimizerStateDType(const ModelConfig& c) {
  return c.precision == "mixed" ? "fp32" : c.dtype;
}
std::string GradDType(const ModelConfig& c) {
  if (!c.grad_dtype.empty()) return c.grad_dtype;
  return c.dtype == "bf16" && HasMasterWeights(c) ? "fp32" : c.dtype;
}
traces::Layout LayoutOf(const ModelConfig& c) {
  traces::Layout l;
  l.tp = c.tp;
  l.cp = c.cp;
  l.pp = c.pp;
  l.pp_first_layers = c.pp_first_layers;
  l.pp_last_layers = c.pp_last_layers;
  l.dp = c.dp;
  l.ep = c.ep;
  l.zero_stage = c.zero_stage;
  l.dp_shard = c.dp_shard;
  return l;
}
int64_t OptimizerStateShards(const ModelConfig& c) { return LayoutOf(c).OptimizerShards(); }
bool DefersGradSync(const ModelConfig& c) { return c.zero_defer_grad_sync && c.zero_stage >= 2; }

Result<ModelConfig> ApplyOverrides(ModelConfig c, const ConfigOverrides& o,
                                   const std::string& source) {
  if (o.micro_batch) c.micro_batch = *o.micro_batch;
  if (o.seq_len) c.seq_len = *o.seq_len;
  if (o.tp) c.tp = *o.tp;
  if (o.pp) c.pp = *o.pp;
  if (o.pp_first_layers) c.pp_first_layers = *o.pp_first_layers;
  if (o.pp_last_layers) c.pp_last_layers = *o.pp_last_layers;
  if (o.cp) c.cp = *o.cp;
  if (o.dp) c.dp = *o.dp;
  if (o.zero_stage) c.zero_stage = *o.zero_stage;
  if (o.dp_shard) c.dp_shard = *o.dp_shard;
  if (o.ep) c.ep = *o.ep;
  if (o.zero_defer_grad_sync) c.zero_defer_grad_sync = *o.zero_defer_grad_sync;
  if (o.sequence_parallel) c.sequence_parallel = *o.sequence_parallel;
  if (o.tp_comm_overlap) c.tp_comm_overlap = *o.tp_comm_overlap;
  if (o.tp_backward_overlap) c.tp_backward_overlap = *o.tp_backward_overlap;
  if (o.attention) c.attention = *o.attention;
  if (o.attention_kernel) c.attention_kernel = *o.attention_kernel;
  if (o.dtype) c.dtype = *o.dtype;
  if (o.fp8) c.fp8 = traces::Fp8Name(*o.fp8);
  if (o.projections) c.projections = *o.projections;
  if (o.rotary) c.rotary = *o.rotary;
  if (o.gqa) c.gqa = *o.gqa;
  if (o.norm) c.norm = *o.norm;
  if (o.grad_dtype) c.grad_dtype = *o.grad_dtype;
  // Messages name the overrides too: the field at fault may come from a flag.
  std::string flags;
  auto add = [&flags](const std::string& flag, const std::string& value) {
    flags += (flags.empty() ? " with " : ", ") + flag + (value.empty() ? "" : " " + value);
  };
  if (o.micro_batch) add("--micro-batch", std::to_string(*o.micro_batch));
  if (o.seq_len) add("--seq-len", std::to_string(*o.seq_len));
  if (o.tp) add("--tp", std::to_string(*o.tp));
  if (o.pp) add("--pp", std::to_string(*o.pp));
  if (o.pp_first_layers.value_or(0) != 0) {
    add("--pp-first-layers", std::to_string(*o.pp_first_layers));
  }
  if (o.pp_last_layers.value_or(0) != 0) add("--pp-last-layers", std::to_string(*o.pp_last_layers));
  if (o.cp) add("--cp", std::to_string(*o.cp));
  if (o.dp) add("--dp", std::to_string(*o.dp));
  if (o.zero_stage) add("--zero-stage", std::to_string(*o.zero_stage));
  if (o.dp_shard) add("--dp-shard", std::to_string(*o.dp_shard));
  if (o.ep) add("--ep", std::to_string(*o.ep));
  if (o.zero_defer_grad_sync && *o.zero_defer_grad_sync) add("--defer-grad-sync", "");
  if (o.sequence_parallel && *o.sequence_parallel) add("--sequence-parallel", "");
  if (o.tp_comm_overlap && *o.tp_comm_overlap) add("--tp-comm-overlap", "");
  if (o.tp_backward_overlap && !*o.tp_backward_overlap) add("--no-tp-backward-overlap", "");
  if (o.attention) add("--attention", *o.attention);
  if (o.attention_kernel) add("--attention-kernel", *o.attention_kernel);
  if (o.dtype) add("--dtype", *o.dtype);
  if (o.fp8) add("--fp8", *o.fp8);
  if (o.projections) add("--projections", *o.projections);
  if (o.rotary) add("--rotary", *o.rotary);
  if (o.gqa) add("--gqa", *o.gqa);
  if (o.norm) add("--norm", *o.norm);
  if (o.grad_dtype) add("--grad-dtype", *o.grad_dtype);
  SSDTRAIN_RETURN_IF_ERROR(ValidateConfig(c, source + flags));
  return c;
}

}  // namespace ssdtrain::models

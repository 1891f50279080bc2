#include "models/build_trace.h"

#include "models/detail/stacks.h"

namespace ssdtrain::models {

Result<traces::Trace> BuildTrace(const ModelConfig& config, int64_t stage) {
  const std::string source = "model " + config.name;
  SSDTRAIN_RETURN_IF_ERROR(ValidateConfig(config, source));
  if (stage < 0 || stage >= config.pp) {
    return Status::InvalidArgument(source + ": stage: " + std::to_string(stage) +
                                   " is out of range for pp " + std::to_string(config.pp) +
                                   " (expected 0 <= stage < pp)");
  }
  traces::Header h;
  h.model = config.name;
  h.family = config.family;
  h.hidden = config.hidden;
  h.heads = config.heads;
  h.kv_heads = KvHeads(config);
  h.layers = config.layers;
  h.ffn_hidden = FfnHidden(config);
  h.vocab = config.vocab;
  h.seq_len = config.seq_len;
  h.micro_batch = config.micro_batch;
  h.tp = config.tp;
  h.sequence_parallel = config.sequence_parallel && config.tp > 1;
  h.tp_comm_overlap = h.sequence_parallel && config.tp_comm_overlap;
  h.tp_backward_overlap = config.tp > 1 && config.tp_backward_overlap;
  h.cp = config.cp;
  h.pp = config.pp;
  h.ep = config.ep;
  h.stage = stage;
  const traces::StageBlocks blocks = traces::BlocksOfStage(LayoutOf(config), config.layers, stage);
  h.stage_layers = blocks.count;
  h.first_layer = blocks.first;
  h.pp_first_layers = config.pp_first_layers;
  h.pp_last_layers = config.pp_last_layers;
  h.dtype = config.dtype;
  h.attention = config.attention;
  h.attention_kernel = config.attention_kernel;
  h.projections = config.projections;
  h.block_kernels = traces::BlockKernels{config.rotary == "fused" ? "" : config.rotary,
                                         config.gqa == "native" ? "" : config.gqa,
                                         config.norm == "fused" ? "" : config.norm};
  h.grad_dtype = config.grad_dtype;
  h.fp8 = config.fp8;
  h.weight_grads = config.weight_grads;
  h.zero_stage = config.zero_stage;
  h.zero_shards = LayoutOf(config).OptimizerShards();
  h.zero_defer_grad_sync = DefersGradSync(config);
  if (config.family == "t5") return detail::BuildEncoderDecoder(config, h);
  return detail::BuildSingleStack(config, h);
}

Result<int64_t> ParameterCount(const ModelConfig& config) {
  ModelConfig whole = config;
  whole.tp = 1;
  whole.cp = 1;
  whole.pp = 1;
  whole.pp_first_layers = 0;
  whole.pp_last_layers = 0;
  whole.ep = 1;          // every expert
  whole.zero_stage = 0;  // every parameter, unsharded
  whole.dp_shard = 0;
  whole.sequence_parallel = false;
  whole.tp_comm_overlap = false;
  SSDTRAIN_ASSIGN_OR_RETURN(traces::Trace trace, BuildTrace(whole, 0));
  int64_t params = 0;
  for (const traces::Tensor& t : trace.tensors) {
    if (t.kind != traces::TensorKind::kWeight || t.alias_of) continue;
    int64_t elements = 1;
    for (int64_t d : t.shape) elements *= d;
    params += elements;
  }
  return params;
}

}  // namespace ssdtrain::models

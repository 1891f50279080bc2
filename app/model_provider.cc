#include "app/model_provider.h"

#include <utility>

#include "models/build_trace.h"

namespace ssdtrain::app {

models::ConfigOverrides OverridesOf(const sim::TraceShape& s) {
  models::ConfigOverrides ov;
  ov.micro_batch = s.micro_batch;
  ov.tp = s.tp;
  ov.pp = s.pp;
  ov.pp_first_layers = s.pp_first_layers;  // the layout's split, not the config's
  ov.pp_last_layers = s.pp_last_layers;
  ov.dp = s.dp;
  ov.zero_stage = s.zero_stage;
  if (s.dp_shard != 0) ov.dp_shard = s.dp_shard;
  if (s.ep != 1) ov.ep = s.ep;
  if (s.cp != 1) ov.cp = s.cp;
  return ov;
}

models::ConfigOverrides PlanOverrides(const traces::Plan& plan, const models::ModelConfig& config) {
  models::ConfigOverrides ov = OverridesOf(sim::TraceShape::Of(plan, 0));
  if (plan.zero_defer_grad_sync) ov.zero_defer_grad_sync = true;
  if (!plan.attention.empty()) ov.attention = plan.attention;
  if (!plan.projections.empty()) ov.projections = plan.projections;
  if (!plan.block_kernels.rotary.empty()) ov.rotary = plan.block_kernels.rotary;
  if (!plan.block_kernels.gqa.empty()) ov.gqa = plan.block_kernels.gqa;
  if (!plan.block_kernels.norm.empty()) ov.norm = plan.block_kernels.norm;
  if (!plan.grad_dtype.empty()) ov.grad_dtype = plan.grad_dtype;
  if (plan.sequence_parallel) ov.sequence_parallel = true;
  if (plan.tp_comm_overlap) ov.tp_comm_overlap = true;
  // A plan records the asynchronous tp backward where tp > 1; one without it
  // ran the collectives in order (at tp 1 there are none).
  if (plan.tp > 1) ov.tp_backward_overlap = plan.tp_backward_overlap;
  if (!plan.attention_kernel.empty()) ov.attention_kernel = plan.attention_kernel;
  if (!plan.fp8.empty() || !config.fp8.empty()) ov.fp8 = plan.fp8.empty() ? "off" : plan.fp8;
  if (plan.seq_len > 0) ov.seq_len = plan.seq_len;
  return ov;
}

sim::TraceProvider ModelTraceProvider(models::ModelConfig base, std::string path) {
  return [base = std::move(base),
          path = std::move(path)](const sim::TraceShape& s) -> Result<traces::Trace> {
    SSDTRAIN_ASSIGN_OR_RETURN(models::ModelConfig c,
                              models::ApplyOverrides(base, OverridesOf(s), path));
    return models::BuildTrace(c, s.stage);
  };
}

void SetModelOptions(const models::ModelConfig& c, sim::PlannerOptions* po) {
  po->layers = c.layers;
  po->heads = c.heads;
  po->experts = c.experts;
  po->seq_len = c.seq_len;
  po->sequence_parallel = c.sequence_parallel && c.tp > 1;
  po->cp_refusal = models::ContextParallelRefusal(c);
  po->tp_refusal = [c](int64_t tp) { return models::TensorParallelRefusal(c, tp); };
  po->pp_refusal = [c](const traces::Layout& l) { return models::PipelineStagesRefusal(c, l); };
  po->fp8 = c.fp8;
  po->separate_projections = c.projections == "separate";
}

}  // namespace ssdtrain::app

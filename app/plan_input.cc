// What `ssdtrain plan` plans from (app/plan_input.h): a captured trace at its
// own shape, or a model config at every layout, and the other stages' plans.
#include "app/plan_input.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string_view>

#include "app/command.h"
#include "app/model_provider.h"
#include "app/self_path.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "traces/fp8.h"
#include "traces/io.h"

namespace ssdtrain::app {
namespace {

// A layout flag given with --trace against the trace header's field: 0 (not
// given) takes the trace's value; another value is refused, naming both.
Status CheckTraceField(std::string_view flag, int64_t given, std::string_view field,
                       std::string_view field_name, int64_t traced, const std::string& path) {
  if (given == 0 || given == traced) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("{} {} contradicts the trace {} (captured at {} {}: header.{}); a trace is "
                  "planned at its own shape: leave {} out",
                  flag, given, path, field_name, traced, field, flag));
}

// `plan --trace`: the trace's shape (micro-batch, sequence, tp, pp) as the
// defaults of the flags, and its GPU count, tp·pp (·dp where --dp is given),
// as --gpus's; --gpus may add data parallelism (a multiple of tp·pp), since
// a trace is one data-parallel replica's and its header holds no dp.
Status TakeTraceShape(const traces::Header& h, const std::string& path, PlanCmdOptions& o) {
  SSDTRAIN_RETURN_IF_ERROR(
      CheckTraceField("--seq-len", o.seq_len, "seq_len", "sequence length", h.seq_len, path));
  SSDTRAIN_RETURN_IF_ERROR(CheckTraceField("--micro-batch", o.micro_batch, "micro_batch",
                                           "micro-batch", h.micro_batch, path));
  SSDTRAIN_RETURN_IF_ERROR(CheckTraceField("--tp", o.tp, "tp", "tp", h.tp, path));
  SSDTRAIN_RETURN_IF_ERROR(CheckTraceField("--pp", o.pp, "pp", "pp", h.pp, path));
  SSDTRAIN_RETURN_IF_ERROR(CheckTraceField("--ep", o.ep, "ep", "ep", h.ep, path));
  SSDTRAIN_RETURN_IF_ERROR(CheckTraceField("--cp", o.cp, "cp", "cp", h.cp, path));
  if (o.sequence_parallel && !h.sequence_parallel) {
    return Status::InvalidArgument(
        fmt::format("--sequence-parallel contradicts the trace {} (built without it: "
                    "header.sequence_parallel); rebuild it with ssdtrain trace "
                    "--sequence-parallel, or leave the flag out",
                    path));
  }
  if (o.tp_comm_overlap && !h.tp_comm_overlap) {
    return Status::InvalidArgument(
        fmt::format("--tp-comm-overlap contradicts the trace {} (built without it: "
                    "header.tp_comm_overlap); rebuild it with ssdtrain trace "
                    "--sequence-parallel --tp-comm-overlap, or leave the flag out",
                    path));
  }
  if (o.no_tp_backward_overlap && h.tp_backward_overlap) {
    return Status::InvalidArgument(
        fmt::format("--no-tp-backward-overlap contradicts the trace {} (built with the "
                    "asynchronous tp backward: header.tp_backward_overlap); rebuild it with "
                    "ssdtrain trace --no-tp-backward-overlap, or leave the flag out",
                    path));
  }
  if (!o.fp8.empty() && traces::Fp8Name(o.fp8) != h.fp8) {
    return Status::InvalidArgument(
        fmt::format("--fp8 {} contradicts the trace {} (built {}: header.fp8); rebuild it with "
                    "ssdtrain trace --fp8 {}, or leave the flag out",
                    o.fp8, path, h.fp8.empty() ? "without FP8" : "with fp8 " + h.fp8, o.fp8));
  }
  if (!o.attention_kernel.empty() && o.attention_kernel != h.attention_kernel) {
    return Status::InvalidArgument(fmt::format(
        "--attention-kernel {} contradicts the trace {} ({}: header.attention_kernel); rebuild "
        "it with ssdtrain trace --attention flash --attention-kernel {}, or leave the flag out",
        o.attention_kernel, path,
        h.attention_kernel.empty() ? "built without one" : "built for " + h.attention_kernel,
        o.attention_kernel));
  }
  if (!o.attention.empty() && o.attention != h.attention) {
    return Status::InvalidArgument(
        fmt::format("--attention {} contradicts the trace {} (built with {} attention: "
                    "header.attention); rebuild it with ssdtrain trace --attention {}, or leave "
                    "the flag out",
                    o.attention, path, h.attention, o.attention));
  }
  if (!o.projections.empty() && o.projections != h.projections) {
    return Status::InvalidArgument(
        fmt::format("--projections {} contradicts the trace {} (built with {} projections: "
                    "header.projections); rebuild it with ssdtrain trace --projections {}, or "
                    "leave the flag out",
                    o.projections, path, h.projections, o.projections));
  }
  for (const traces::BlockKernel& k : traces::kBlockKernels) {
    const std::string& flag = o.block_kernels.*k.member;
    if (flag.empty()) continue;
    const std::optional<std::string> set = traces::ParseBlockKernel(k, flag);
    if (set && *set == h.block_kernels.*k.member) continue;
    return Status::InvalidArgument(fmt::format(
        "--{} {} contradicts the trace {} (built with {} {}: header.{}); rebuild it with "
        "ssdtrain trace --{} {}, or leave the flag out",
        k.field, flag, path, k.field, traces::KernelValue(h.block_kernels, k), k.field, k.field,
        flag));
  }
  if (!o.grad_dtype.empty() && o.grad_dtype != h.grad_dtype) {
    return Status::InvalidArgument(fmt::format(
        "--grad-dtype {} contradicts the trace {} (built with {}: header.grad_dtype); rebuild "
        "it with ssdtrain trace --grad-dtype {}, or leave the flag out",
        o.grad_dtype, path,
        h.grad_dtype.empty() ? std::string("the config's default gradient dtype")
                             : "grad_dtype " + h.grad_dtype,
        o.grad_dtype));
  }
  if (o.defer_grad_sync && !h.zero_defer_grad_sync) {
    return Status::InvalidArgument(
        fmt::format("--defer-grad-sync contradicts the trace {} (built without it: "
                    "header.zero_defer_grad_sync is false); rebuild it with ssdtrain trace "
                    "--defer-grad-sync, or leave the flag out",
                    path));
  }
  const int64_t replica = h.tp * h.cp * h.pp;
  if (o.gpus > 0 && o.gpus % replica != 0) {
    return Status::InvalidArgument(
        fmt::format("--gpus {} contradicts the trace {} (captured at tp {} and pp {}{}: header.tp, "
                    "header.pp{}), which plans on a multiple of {} GPU(s)",
                    o.gpus, path, h.tp, h.pp, h.cp > 1 ? fmt::format(" at cp {}", h.cp) : "",
                    h.cp > 1 ? ", header.cp" : "", replica));
  }
  if (o.gpus == 0) o.gpus = replica * std::max<int64_t>(o.dp, 1);
  // The trace's optimizer state is as it was built: --zero-stage says how
  // (ssdtrain trace --dp --zero-stage); the search cannot rebuild it.
  if (o.zero_stage < 0) o.zero_stage = h.zero_stage;
  o.seq_len = h.seq_len;
  o.micro_batch = h.micro_batch;
  o.tp = h.tp;
  o.cp = h.cp;
  o.pp = h.pp;
  if (h.ep > 1) o.ep = h.ep;  // ep 1 stays unpinned: a dense search, its pins as they were
  return Status::Ok();
}

// A trace is one stage of its pipeline: it stands for every stage the planner
// asks for (as one trace does in sim::Simulate), so the plan holds its memory
// as the first stage's (pp micro-batches in flight under 1F1B), never less
// than its own stage holds.
sim::TraceProvider OneStageProvider(std::shared_ptr<const traces::Trace> trace,
                                    const std::string& path) {
  return [trace, path](const sim::TraceShape& s) -> Result<traces::Trace> {
    const traces::Header& th = trace->header;
    if (s.micro_batch != th.micro_batch || s.tp != th.tp || s.pp != th.pp || s.ep != th.ep ||
        s.cp != th.cp) {
      return Status::InvalidArgument(fmt::format(
          "{}: a captured trace has one shape (micro-batch {}, tp {}, cp {}, pp {}, ep {}); the "
          "planner asked for micro-batch {}, tp {}, cp {}, pp {}, ep {}",
          path, th.micro_batch, th.tp, th.cp, th.pp, th.ep, s.micro_batch, s.tp, s.cp, s.pp, s.ep));
    }
    return *trace;
  };
}

// Stage `stage`'s trace at the plan's layout.
sim::TraceShape ShapeOf(const traces::Plan& plan, int64_t stage) {
  return sim::TraceShape::Of(plan, stage);
}

}  // namespace

Result<PlanInput> TraceInput(PlanCmdOptions& o) {
  SSDTRAIN_ASSIGN_OR_RETURN(traces::Trace trace, ReadUserTrace("plan", o.trace));
  const traces::Header& h = trace.header;
  SSDTRAIN_RETURN_IF_ERROR(TakeTraceShape(h, o.trace, o));
  PlanInput in;
  in.name = h.model;
  in.layers = h.layers;
  in.heads = h.heads;
  // A trace records its ep, not its experts' count, which ep divides: it
  // stands for that count in the planner's checks of the (pinned) ep.
  in.experts = h.ep > 1 ? h.ep : 0;
  in.seq_len = h.seq_len;
  in.fp8 = h.fp8;
  in.attention_kernel = h.attention_kernel;
  in.separate_projections = h.projections == "separate";
  in.sequence_parallel = h.sequence_parallel;
  in.cp_refusal = "a captured trace is planned at its own cp";  // TakeTraceShape pins it
  in.stage = h.stage;
  auto shared = std::make_shared<const traces::Trace>(std::move(trace));
  in.provider = OneStageProvider(shared, o.trace);
  in.stage0 = [shared](const traces::Plan&) -> Result<traces::Trace> { return *shared; };
  in.trace_command = [](const traces::Plan&) { return std::string(); };
  in.trace_path = o.trace;
  return in;
}

Result<PlanInput> ModelInput(const PlanCmdOptions& o) {
  Result<models::ModelConfig> config = models::LoadModelConfig(o.model);
  if (!config.ok()) return config.status();
  if (o.seq_len > 0 || o.defer_grad_sync || !o.attention.empty() || !o.fp8.empty() ||
      o.sequence_parallel || o.tp_comm_overlap || o.no_tp_backward_overlap ||
      !o.projections.empty() || !o.attention_kernel.empty() ||
      o.block_kernels != traces::BlockKernels{} || !o.grad_dtype.empty()) {
    models::ConfigOverrides ov;
    if (o.sequence_parallel) ov.sequence_parallel = true;
    if (o.tp_comm_overlap) ov.tp_comm_overlap = true;
    if (o.no_tp_backward_overlap) ov.tp_backward_overlap = false;
    if (o.seq_len > 0) ov.seq_len = o.seq_len;
    if (o.defer_grad_sync) ov.zero_defer_grad_sync = true;
    if (!o.attention.empty()) ov.attention = o.attention;
    if (!o.attention_kernel.empty()) ov.attention_kernel = o.attention_kernel;
    if (!o.projections.empty()) ov.projections = o.projections;
    if (!o.block_kernels.rotary.empty()) ov.rotary = o.block_kernels.rotary;
    if (!o.block_kernels.gqa.empty()) ov.gqa = o.block_kernels.gqa;
    if (!o.block_kernels.norm.empty()) ov.norm = o.block_kernels.norm;
    if (!o.grad_dtype.empty()) ov.grad_dtype = o.grad_dtype;
    // Separate projections are modelled at tp 1: a config's own tp (a default
    // the search overrides anyway) is taken as 1; a pinned --tp above is refused.
    if (o.projections == "separate") ov.tp = o.tp > 0 ? o.tp : 1;
    if (!o.fp8.empty()) ov.fp8 = o.fp8;
    config = models::ApplyOverrides(*config, ov, o.model);
    if (!config.ok()) return config.status();
  }
  const models::ModelConfig base = *config;
  const std::string model_path = o.model;
  PlanInput in;
  in.name = base.name;
  in.layers = base.layers;
  in.heads = base.heads;
  in.experts = base.experts;
  in.seq_len = base.seq_len;
  in.sequence_parallel = base.sequence_parallel && base.tp > 1;
  in.cp_refusal = models::ContextParallelRefusal(base);
  in.tp_refusal = [base](int64_t tp) { return models::TensorParallelRefusal(base, tp); };
  in.pp_refusal = [base](const traces::Layout& l) {
    return models::PipelineStagesRefusal(base, l);
  };
  in.fp8 = base.fp8;
  in.attention_kernel = base.attention_kernel;
  in.separate_projections = base.projections == "separate";
  in.config = ConfigLayout{model_path, base.micro_batch, base.tp, base.pp,
                           base.dp,    base.zero_stage,  base.ep};
  in.provider = ModelTraceProvider(base, model_path);
  in.stage0 = [provider = in.provider](const traces::Plan& plan) -> Result<traces::Trace> {
    return provider(ShapeOf(plan, 0));
  };
  in.trace_command = [base, model_path, attention = o.attention, fp8 = o.fp8,
                      projections = o.projections, kernels = o.block_kernels,
                      grad_dtype = o.grad_dtype,
                      kernel = o.attention_kernel](const traces::Plan& plan) {
    std::string command =
        fmt::format("{} trace --model {} --micro-batch {} --seq-len {} --tp {} --pp {}",
                    SelfCommand(), model_path, plan.micro_batch, base.seq_len, plan.tp, plan.pp);
    if (plan.pp_first_layers != 0) {
      command += fmt::format(" --pp-first-layers {}", plan.pp_first_layers);
    }
    if (plan.pp_last_layers != 0)
      command += fmt::format(" --pp-last-layers {}", plan.pp_last_layers);
    if (!attention.empty()) command += " --attention " + attention;
    if (!kernel.empty()) command += " --attention-kernel " + kernel;
    if (!projections.empty()) command += " --projections " + projections;
    for (const traces::BlockKernel& k : traces::kBlockKernels) {
      if (!(kernels.*k.member).empty()) {
        command += fmt::format(" --{} {}", k.field, kernels.*k.member);
      }
    }
    if (!grad_dtype.empty()) command += " --grad-dtype " + grad_dtype;
    if (!fp8.empty()) command += " --fp8 " + fp8;
    if (base.sequence_parallel && plan.tp > 1) command += " --sequence-parallel";
    if (plan.tp_comm_overlap) command += " --tp-comm-overlap";
    if (plan.tp > 1 && !plan.tp_backward_overlap) command += " --no-tp-backward-overlap";
    if (plan.cp != 1) command += fmt::format(" --cp {}", plan.cp);
    if (plan.zero_stage != 0) {
      command += fmt::format(" --dp {} --zero-stage {}", plan.dp, plan.zero_stage);
      if (plan.dp_shard != 0) command += fmt::format(" --dp-shard {}", plan.dp_shard);
      if (plan.zero_defer_grad_sync) command += " --defer-grad-sync";
    } else if (plan.ep != 1) {
      command += fmt::format(" --dp {}", plan.dp);
    }
    if (plan.ep != 1) command += fmt::format(" --ep {}", plan.ep);
    return command;
  };
  return in;
}

Status AttachStagePlans(const PlanInput& in, const sim::PlannerResult& r, traces::Plan& plan) {
  nlohmann::json stages = nlohmann::json::array();
  for (int64_t k = 1; k < plan.pp; ++k) {
    std::optional<traces::Plan> stage_plan;
    for (const auto& [stage, p] : r.stage_plans) {
      if (stage == k) stage_plan = p;
    }
    if (!stage_plan) {
      if (r.stage_plans.empty()) {
        return Status::Internal("the planner returned no plan for stage " + std::to_string(k));
      }
      // A middle stage runs stage 1's plan, which holds more micro-batches
      // than it does (sim/stage_plans.h).
      SSDTRAIN_ASSIGN_OR_RETURN(traces::Trace t, in.provider(ShapeOf(plan, k)));
      Result<traces::Plan> retargeted = sim::RetargetPlan(r.stage_plans.front().second, t);
      if (!retargeted.ok()) return retargeted.status().WithPrefix("stage " + std::to_string(k));
      stage_plan = std::move(*retargeted);
    }
    stage_plan->extra = nlohmann::json::object();
    stage_plan->prediction.reset();
    stage_plan->storage = plan.storage;
    stages.push_back({{"stage", k}, {"plan", traces::ToJson(*stage_plan)}});
  }
  plan.extra["stage_plans"] = stages;
  return Status::Ok();
}

}  // namespace ssdtrain::app

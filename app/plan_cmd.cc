// ssdtrain plan: model + hardware -> the best layout and offload plan, with a prediction.
#include <fmt/format.h>

#include <iostream>

#include "app/command.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/planner.h"
#include "sim/simulate.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/timeline.h"

namespace ssdtrain::app {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct PlanCmdOptions {
  std::string model, hardware, output, timeline, policy = "auto";
  int64_t gpus = 1;
  double memory_budget_GiB = 0;
  int64_t micro_batch = 0;
  int64_t global_batch = 0;
  bool rok = false;
};

int RunPlan(const PlanCmdOptions& o) {
  Result<models::ModelConfig> config = models::LoadModelConfig(o.model);
  if (!config.ok()) return ReportError("plan", config.status());
  Result<sim::HardwareOptions> hw = sim::LoadHardware(o.hardware);
  if (!hw.ok()) return ReportError("plan", hw.status());
  if (o.memory_budget_GiB < 0) {
    return ReportError("plan", Status::InvalidArgument("--memory-budget: must be >= 0 GiB"));
  }
  const models::ModelConfig base = *config;
  std::string model_path = o.model;
  sim::TraceProvider provider = [base, model_path](int64_t mb, int64_t tp, int64_t pp,
                                                   int64_t stage) -> Result<traces::Trace> {
    models::ConfigOverrides ov;
    ov.micro_batch = mb;
    ov.tp = tp;
    ov.pp = pp;
    SSDTRAIN_ASSIGN_OR_RETURN(models::ModelConfig c, models::ApplyOverrides(base, ov, model_path));
    return models::BuildTrace(c, stage);
  };
  sim::PlannerOptions po;
  po.gpus = o.gpus;
  po.policy = o.policy;
  po.memory_budget_bytes = static_cast<int64_t>(o.memory_budget_GiB * kGiB);
  if (o.micro_batch > 0) po.micro_batch = o.micro_batch;
  po.global_batch = o.global_batch;
  po.layers = base.layers;
  po.heads = base.heads;
  po.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  Result<sim::PlannerResult> r = sim::SearchPlan(provider, *hw, po);
  if (!r.ok()) return ReportError("plan", r.status());
  if (!r->fits) {
    std::cerr << fmt::format(
        "ssdtrain plan: error: {} does not fit on {} under any policy: the best plan still "
        "needs {:.2f} GiB more than the {:.2f} GiB budget per GPU\n",
        base.name, hw->name, static_cast<double>(r->over_budget_bytes) / kGiB,
        static_cast<double>(po.memory_budget_bytes > 0 ? po.memory_budget_bytes
                                                       : sim::GpuMemoryBytes(*hw)) /
            kGiB);
    return 1;
  }
  traces::Plan plan = r->plan;
  plan.extra["search"] = {{"layouts", r->layouts},
                          {"simulated_layouts", r->simulated_layouts},
                          {"simulations", r->simulations},
                          {"hardware", hw->name}};
  plan.extra["rok"] = r->rok;
  plan.extra["prediction_details"] = sim::PredictionToJson(r->prediction)["details"];
  Status w = traces::WritePlan(plan, o.output);
  if (!w.ok()) return ReportError("plan", w);
  const traces::StepMetrics& m = r->prediction.metrics;
  std::cout << fmt::format(
      "{} on {} x {}: policy {} micro-batch {} tp {} pp {} dp {} ({} micro-batches): step {:.1f} "
      "ms, {:.0f} tokens/s, {:.1f} TFLOP/s per GPU, peak {:.2f} GiB (activations {:.2f} GiB), "
      "SSD writes {:.2f} GB/step\n",
      base.name, o.gpus, hw->name, plan.policy, plan.micro_batch, plan.tp, plan.pp, plan.dp,
      plan.num_micro_batches, static_cast<double>(m.step_time_ns) / 1e6, m.tokens_per_s,
      m.tflops_per_gpu, static_cast<double>(m.peak_gpu_bytes) / kGiB,
      static_cast<double>(m.peak_activation_bytes) / kGiB,
      static_cast<double>(m.ssd_bytes_written) / 1e9);
  if (o.rok) {
    std::cout << "recompute-offload-keep curve (best layout):\n";
    std::cout << fmt::format("{:>20} {:>14} {:>16} {:>12}\n", "policy", "peak GiB",
                             "activations GiB", "step ms");
    for (const auto& e : r->rok) {
      std::cout << fmt::format(
          "{:>20} {:>14.2f} {:>16.2f} {:>12.1f}\n", e["policy"].get<std::string>(),
          e["peak_gpu_bytes"].get<double>() / kGiB, e["peak_activation_bytes"].get<double>() / kGiB,
          e["step_time_ns"].get<double>() / 1e6);
    }
  }
  if (!o.timeline.empty()) {
    models::ConfigOverrides ov;
    ov.micro_batch = plan.micro_batch;
    ov.tp = plan.tp;
    ov.pp = plan.pp;
    Result<models::ModelConfig> c = models::ApplyOverrides(base, ov, o.model);
    if (!c.ok()) return ReportError("plan", c.status());
    Result<traces::Trace> t = models::BuildTrace(*c, 0);
    if (!t.ok()) return ReportError("plan", t.status());
    Result<sim::Prediction> p = sim::Simulate(*t, plan, *hw);
    if (!p.ok()) return ReportError("plan", p.status());
    w = traces::WriteJsonFile(traces::ToChromeTrace(p->timeline, "ssdtrain plan"), o.timeline);
    if (!w.ok()) return ReportError("plan", w);
  }
  return 0;
}

}  // namespace

Verb AddPlanCommand(CLI::App& app) {
  auto o = std::make_shared<PlanCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Search micro-batch, pipeline and tensor parallelism and an offload policy");
  cmd->add_option("--model", o->model, "model config (configs/models/*.json)")->required();
  cmd->add_option("--hardware", o->hardware, "hardware config (configs/hardware/*.json)")
      ->required();
  cmd->add_option("--gpus", o->gpus, "GPUs in total")->check(CLI::PositiveNumber);
  cmd->add_option("--policy", o->policy,
                  "keep, recompute-full, recompute-selective, offload-host, offload-ssd, "
                  "ssdtrain, optimal or auto")
      ->check(CLI::IsMember({"keep", "recompute-full", "recompute-selective", "offload-host",
                             "offload-ssd", "ssdtrain", "optimal", "auto"}));
  cmd->add_option("--memory-budget", o->memory_budget_GiB,
                  "GPU memory budget in GiB (default: "
                  "the GPU's capacity)");
  cmd->add_option("--micro-batch", o->micro_batch, "fix the micro-batch size");
  cmd->add_option("--global-batch", o->global_batch, "sequences per step");
  cmd->add_option("-o,--output", o->output, "plan JSON to write")->required();
  cmd->add_option("--timeline", o->timeline, "Chrome/Perfetto trace of the predicted step");
  cmd->add_flag("--rok", o->rok, "print the recompute-offload-keep curve");
  return Verb{cmd, [o] { return RunPlan(*o); }};
}

}  // namespace ssdtrain::app

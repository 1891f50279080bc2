// ssdtrain plan: model + hardware -> the best layout and offload plan, with a prediction.
#include <fmt/format.h>

#include <iostream>
#include <string>
#include <vector>

#include "app/cli_errors.h"
#include "app/command.h"
#include "app/outputs.h"
#include "app/plan_budget.h"
#include "app/plan_compare.h"
#include "app/plan_input.h"
#include "app/plan_report.h"
#include "app/plan_schedule.h"
#include "app/self_path.h"
#include "sim/fit.h"
#include "sim/hardware.h"
#include "sim/planner.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/timeline.h"

namespace ssdtrain::app {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// " (rank r runs stage r / (tp x dp), replica (r / tp) % dp, shard r % tp)":
// the layout's rank order (traces/layout.h), its cp index where cp > 1, its
// expert rank where ep > 1.
std::string RankOrder(const traces::Plan& plan) {
  if (plan.cp <= 1) {
    return fmt::format(" (rank r runs stage r / (tp x dp), replica (r / tp) % dp, shard r % tp{})",
                       plan.ep > 1 ? ", expert rank (r / tp) % dp % ep" : "");
  }
  return fmt::format(
      " (rank r runs stage r / (tp x cp x dp), replica (r / (tp x cp)) % dp, context rank "
      "(r / tp) % cp, shard r % tp{})",
      plan.ep > 1 ? ", expert rank (r / tp) % (cp x dp) % ep" : "");
}

// The flags that need the hardware or one another, checked before the search.
Status CheckPlanFlags(const PlanCmdOptions& o, const PlanInput& in,
                      const sim::HardwareOptions& hw) {
  if (Status s = sim::CheckPrecision(hw, in.fp8); !s.ok()) {
    return s.WithPrefix(o.hardware + " with fp8 " + in.fp8);
  }
  if (Status s = sim::CheckAttentionKernel(hw, in.attention_kernel); !s.ok()) {
    return s.WithPrefix(o.hardware);
  }
  if (o.memory_budget_GiB < 0) {
    return Status::InvalidArgument("--memory-budget: must be >= 0 GiB");
  }
  SSDTRAIN_RETURN_IF_ERROR(CheckMemoryBudget(o.memory_budget_GiB, hw, o.hardware));
  SSDTRAIN_RETURN_IF_ERROR(CheckCompareFlags(o.compare, o.policy, o.compare_json));
  if (o.defer_grad_sync && o.zero_stage >= 0 && o.zero_stage < 2) {
    return Status::InvalidArgument("--defer-grad-sync applies to --zero-stage 2 or 3 (at " +
                                   std::to_string(o.zero_stage) +
                                   " the gradients are exchanged once a step already)");
  }
  if (o.defer_grad_sync && o.dp_shard > 0) {
    return Status::InvalidArgument(
        "--defer-grad-sync with --dp-shard: deferred gradient sync is not modelled with HSDP; "
        "drop one of the two");
  }
  return Status::Ok();
}

// The search's options: the pinned flags, and what the model (or trace) says.
sim::PlannerOptions SearchOptions(const PlanCmdOptions& o, const PlanInput& in) {
  sim::PlannerOptions po;
  po.gpus = o.gpus;
  po.policy = o.policy;
  po.memory_budget_bytes = static_cast<int64_t>(o.memory_budget_GiB * kGiB);
  if (o.micro_batch > 0) po.micro_batch = o.micro_batch;
  po.global_batch = o.global_batch;
  if (o.tp > 0) po.tp = o.tp;
  if (o.pp > 0) po.pp = o.pp;
  if (o.pp_first_layers > 0) po.pp_first_layers = o.pp_first_layers;
  if (o.pp_last_layers > 0) po.pp_last_layers = o.pp_last_layers;
  if (o.dp > 0) po.dp = o.dp;
  if (o.num_micro_batches > 0) po.num_micro_batches = o.num_micro_batches;
  if (o.zero_stage >= 0) po.zero_stage = o.zero_stage;
  if (o.dp_shard > 0) po.dp_shard = o.dp_shard;
  if (o.ep != 0) po.ep = o.ep;  // CheckPins refuses a negative one, naming --ep
  po.experts = in.experts;
  if (o.cp != 0) po.cp = o.cp;
  po.seq_len = in.seq_len;
  po.sequence_parallel = in.sequence_parallel;
  po.cp_refusal = in.cp_refusal;
  po.tp_refusal = in.tp_refusal;
  po.pp_refusal = in.pp_refusal;
  po.fp8 = in.fp8;
  po.separate_projections = in.separate_projections;
  if (!o.schedule.empty()) {
    po.schedule = o.schedule;
  } else if (!o.trace.empty()) {
    // A trace is planned at its own shape, to replay: 1F1B, unless --schedule
    // asks for interleaved.
    po.schedule = "1f1b";
  }
  if (o.virtual_stages > 0) po.virtual_stages = o.virtual_stages;
  po.ddp = o.ddp;
  po.allow_host_offload = !o.no_host_offload;
  po.recompute_modules = o.recompute_modules;
  po.recompute_every = o.recompute_every;
  po.offload_modules = o.offload_modules;
  po.layers = in.layers;
  po.heads = in.heads;
  po.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  po.record_timeline = !o.timeline.empty();
  return po;
}

// Why nothing fits, on stderr: the static state alone, a shortfall of a plan
// that fits the GPU, or the lowest-memory plan's excess.
void ReportNoFit(const PlanCmdOptions& o, const PlanInput& in, const sim::HardwareOptions& hw,
                 const sim::PlannerOptions& po, const sim::PlannerResult& r) {
  const double budget_GiB =
      static_cast<double>(po.memory_budget_bytes > 0 ? po.memory_budget_bytes
                                                     : sim::GpuMemoryBytes(hw)) /
      kGiB;
  if (r.simulations == 0) {
    std::cerr << fmt::format(
        "ssdtrain plan: error: {} does not fit on {} GPUs of {}: the weights, gradients and "
        "optimizer state alone need {:.3f} GiB per GPU at the best layout, {:.3f} GiB more than "
        "the {:.3f} GiB budget\n",
        in.name, o.gpus, hw.name, budget_GiB + static_cast<double>(r.over_budget_bytes) / kGiB,
        static_cast<double>(r.over_budget_bytes) / kGiB, budget_GiB);
    return;
  }
  if (r.over_budget_bytes == 0 && !r.shortfall.empty()) {
    std::cerr << fmt::format(
        "ssdtrain plan: error: {} does not run on {} GPUs of {} under any policy: the "
        "lowest-memory plan found ({}, micro-batch {}, tp {}, pp {}, {} micro-batches) fits "
        "the GPU, but {}\n",
        in.name, o.gpus, hw.name, r.plan.policy, r.plan.micro_batch, r.plan.tp, r.plan.pp,
        r.plan.num_micro_batches, r.shortfall);
    return;
  }
  const sim::Prediction::StagePeak& worst = sim::WorstStage(r.prediction);
  std::cerr << fmt::format(
      "ssdtrain plan: error: {} does not fit on {} GPUs of {} under any policy: the "
      "lowest-memory plan found ({}, micro-batch {}, tp {}, pp {}{}) needs {:.3f} GiB per GPU "
      "on stage {}, which holds {}{} at once, {:.3f} GiB more than the {:.3f} GiB budget\n",
      in.name, o.gpus, hw.name, r.plan.policy, r.plan.micro_batch, r.plan.tp, r.plan.pp,
      r.plan.zero_stage != 0 ? "," + ZeroText(r.plan) : "",
      static_cast<double>(r.prediction.metrics.peak_gpu_bytes) / kGiB, worst.stage,
      InFlightText(worst.in_flight, r.prediction.virtual_stages),
      r.prediction.virtual_stages > 1 ? "" : " micro-batch(es)",
      static_cast<double>(r.over_budget_bytes) / kGiB, budget_GiB);
}

// The plan as written: its drives, its stages' plans, the search's counts and
// the prediction's report.
Result<traces::Plan> PlanToWrite(const PlanCmdOptions& o, const PlanInput& in,
                                 const sim::HardwareOptions& hw, const sim::PlannerResult& r,
                                 traces::StepReport* report) {
  traces::Plan plan = r.plan;
  // The drives it was planned for (a replay stripes over them as predicted).
  plan.storage = sim::DriveLayoutOf(hw);
  if (plan.pp > 1) SSDTRAIN_RETURN_IF_ERROR(AttachStagePlans(in, r, plan));
  SSDTRAIN_ASSIGN_OR_RETURN(traces::Trace stage0, in.stage0(plan));
  *report = sim::PredictionReport(r.prediction, stage0, plan, hw);
  plan.extra["search"] = {{"layouts", r.layouts},
                          {"simulated_layouts", r.simulated_layouts},
                          {"simulations", r.simulations},
                          {"hardware", hw.name}};
  plan.extra["rok"] = r.rok;
  if (plan.policy == "recompute-full" && o.recompute_every > 1) {
    plan.extra["recompute_every"] = o.recompute_every;
  }
  plan.extra["prediction_report"] = traces::ToJson(*report);
  return plan;
}

// The plan's summary line, its batch and budget, and the verdicts.
void PrintPlanned(const PlanCmdOptions& o, const PlanInput& in, const sim::HardwareOptions& hw,
                  const sim::PlannerOptions& po, const sim::PlannerResult& r,
                  const traces::Plan& plan) {
  const bool every = plan.policy == "recompute-full" && o.recompute_every > 1;
  const traces::StepMetrics& m = r.prediction.metrics;
  std::cout << fmt::format(
      "{} on {} x {}: policy {} micro-batch {} tp {}{}{} pp {}{} dp {}{}{}{} ({} micro-batches{}): "
      "step "
      "{:.1f} ms, {:.0f} tokens/s, {:.3g} TFLOP/s per GPU, peak {:.2f} GiB (activations {:.2f} "
      "GiB), SSD writes {:.2f} GiB/step\n",
      in.name, o.gpus, hw.name,
      every ? fmt::format("{} (one block in {})", plan.policy, o.recompute_every) : plan.policy,
      plan.micro_batch, plan.tp,
      plan.tp > 1 && !plan.tp_backward_overlap ? " (tp backward collectives in order)" : "",
      plan.cp > 1 ? fmt::format(" cp {}", plan.cp) : "", plan.pp, SplitText(plan, in.layers),
      plan.dp, in.experts > 0 ? fmt::format(" ep {}", plan.ep) : "", ZeroText(plan),
      plan.ddp == "local" ? " local DDP" : "", plan.num_micro_batches,
      ScheduleText(plan, in.layers), static_cast<double>(m.step_time_ns) / 1e6, m.tokens_per_s,
      m.tflops_per_gpu, static_cast<double>(m.peak_gpu_bytes) / kGiB,
      static_cast<double>(m.peak_activation_bytes) / kGiB,
      static_cast<double>(m.ssd_bytes_written) / kGiB);
  std::cout << fmt::format("global batch {} sequences; ",
                           plan.micro_batch * plan.num_micro_batches * plan.dp)
            << BudgetText(plan.memory_budget_bytes, po.memory_budget_bytes > 0, hw) << "\n";
  if (in.config) std::cout << OverriddenConfigNote(*in.config, plan, po);
  std::cout << ScheduleVerdict(r);
  std::cout << SsdVerdict(r.prediction);
  if (o.rok) PrintRok(plan.extra["rok"], plan.memory_budget_bytes, std::cout);
}

// How to build the plan's trace and replay it, and what the hardware config
// leaves out of a replay on this machine.
void PrintReplayHints(const PlanCmdOptions& o, const PlanInput& in, const sim::HardwareOptions& hw,
                      const traces::Plan& plan) {
  const std::string make_trace = in.trace_command(plan);
  if (make_trace.empty()) {
    std::cout << fmt::format("trace for this plan: {} (captured)\n", in.trace_path);
  } else {
    std::cout << "trace for this plan: " << make_trace << "\n";
  }
  // One rank per GPU of the layout (traces/layout.h: tp fastest, then cp, dp, pp).
  const int64_t n_ranks = traces::PlanLayout(plan).world();
  const std::string ranks = n_ranks > 1 ? fmt::format("mpirun -np {} ", n_ranks) : "";
  if (!o.model.empty()) {
    // Each rank builds its own shard's trace from the model config.
    std::cout << fmt::format(
        "replay this plan: {}{} replay --model {} --plan {} --dir OFFLOAD_DIR -o "
        "run.json{}\n",
        ranks, SelfCommand(), o.model, o.output, n_ranks > 1 ? RankOrder(plan) : "");
  } else {
    std::cout << CapturedReplayLines(in, plan, o.output);
  }
  // A preset leaves the executor's GEMM workspace out of the plan's memory
  // (sim::GpuOptions::replay_workspace); a config `calibrate` writes counts it.
  if (!hw.gpu.replay_workspace) {
    std::cout << fmt::format(
        "note: {} is not calibrated (no gpu.replay_workspace), so this plan leaves out the "
        "replay's GEMM workspace and a replay may find it over its budget; to replay on this "
        "machine, run `{} calibrate --dir OFFLOAD_DIR -o hw.json` first and plan with "
        "--hardware hw.json\n",
        o.hardware, SelfCommand());
  }
  // A config measured by one process predicts ranks that each had a machine
  // of their own; ranks that share this one (cores, disk) run slower.
  if (n_ranks > 1 && hw.calibrated_ranks > 0 && hw.calibrated_ranks != n_ranks) {
    std::cout << fmt::format(
        "note: {} was calibrated on {} rank{} at once; where the {} ranks share that machine, "
        "calibrate them as they will run (mpirun -np {} ssdtrain calibrate ...) and plan again\n",
        o.hardware, hw.calibrated_ranks, hw.calibrated_ranks == 1 ? "" : "s", n_ranks, n_ranks);
  }
}

}  // namespace

int RunPlan(PlanCmdOptions o) {
  if (!o.model.empty() && o.trace.empty() && traces::IsTraceFile(o.model)) {
    // A trace (ssdtrain's, Chakra, a PyTorch execution trace) given as the model.
    std::cerr << "ssdtrain plan: --model " << o.model << " is a trace: planned as --trace\n";
    o.trace = std::move(o.model);
    o.model.clear();
  }
  if (o.model.empty() == o.trace.empty()) {
    return ReportError(
        "plan", Status::InvalidArgument("give exactly one of --model (a config) and --trace (a "
                                        "captured trace)"));
  }
  Outputs outputs;  // checked before the search, written together after it
  outputs.Add("-o", o.output);
  outputs.Add("--timeline", o.timeline);
  outputs.Add("--prediction", o.prediction);
  outputs.Add("--json", o.compare_json);
  if (Status s = outputs.Check(); !s.ok()) return ReportError("plan", s);
  Result<PlanInput> input = o.trace.empty() ? ModelInput(o) : TraceInput(o);
  if (!input.ok()) return ReportError("plan", input.status());
  if (o.gpus == 0) o.gpus = 1;
  const PlanInput& in = *input;
  Result<sim::HardwareOptions> hw = sim::LoadHardware(o.hardware);
  if (!hw.ok()) return ReportError("plan", hw.status());
  for (const std::string& note : hw->notes) std::cerr << "plan: note: " << note << "\n";
  if (Status s = CheckPlanFlags(o, in, *hw); !s.ok()) return ReportError("plan", s);
  const sim::PlannerOptions po = SearchOptions(o, in);
  nlohmann::json comparison;  // --json
  Result<sim::PlannerResult> r =
      o.compare ? CompareAndChoose(in.name, in.provider, *hw, po, &comparison, std::cout)
                : sim::SearchPlan(in.provider, *hw, po);
  if (!r.ok()) return ReportError("plan", r.status());
  if (!r->fits) {
    ReportNoFit(o, in, *hw, po, *r);
    return 1;
  }
  traces::StepReport report;
  Result<traces::Plan> plan = PlanToWrite(o, in, *hw, *r, &report);
  if (!plan.ok()) return ReportError("plan", plan.status());
  outputs.Set("-o", traces::ToJson(*plan));
  outputs.Set("--prediction", traces::ToJson(report));
  if (o.compare) outputs.Set("--json", std::move(comparison));
  if (!o.timeline.empty()) {
    outputs.Set("--timeline", traces::ToChromeTrace(r->prediction.timeline, "ssdtrain plan"));
  }
  if (Status w = outputs.Commit(); !w.ok()) return ReportError("plan", w);
  PrintPlanned(o, in, *hw, po, *r, *plan);
  PrintReplayHints(o, in, *hw, *plan);
  return 0;
}

}  // namespace ssdtrain::app

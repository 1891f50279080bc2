// ssdtrain plan: model + hardware -> the best layout and offload plan, with a prediction.
#include <fmt/format.h>

#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include "app/cli_errors.h"
#include "app/command.h"
#include "app/outputs.h"
#include "app/plan_budget.h"
#include "app/plan_compare.h"
#include "app/plan_schedule.h"
#include "app/self_path.h"
#include "models/build_trace.h"
#include "models/hf_config.h"
#include "models/model_config.h"
#include "sim/fit.h"
#include "sim/hardware.h"
#include "sim/planner.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/stage_plans.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/timeline.h"

namespace ssdtrain::app {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct PlanCmdOptions {
  std::string model, trace, hardware, output, timeline, policy = "auto";
  int64_t gpus = 0;  // 0: 1 from --model; from --trace, its tp·pp (TakeTraceShape)
  double memory_budget_GiB = 0;
  std::string prediction;
  int64_t micro_batch = 0;
  int64_t seq_len = 0;
  int64_t global_batch = 0;
  // Pins: 0 (or empty) leaves that part of the layout to the search.
  int64_t tp = 0, pp = 0, dp = 0, num_micro_batches = 0;
  int64_t zero_stage = -1;  // -1: weigh 0 and 1 (--model); with --trace, 0
  std::string schedule;
  int64_t virtual_stages = 0;  // 0: searched (with --schedule interleaved)
  bool rok = false;
  bool compare = false;      // every policy at one global batch (app/plan_compare.h)
  std::string compare_json;  // --json: the comparison as JSON
  bool no_host_offload = false;
};

// The search's input: a model config (every layout the planner tries is built
// from it), or a captured trace (ssdtrain.capture), which exists at one shape
// only, so the search is pinned to it.
struct PlanInput {
  std::string name;
  int64_t layers = 0, heads = 0;
  sim::TraceProvider provider;
  std::function<Result<traces::Trace>(const traces::Plan&)> stage0;
  // The command that builds the plan's (stage 0) trace; empty for a captured trace.
  std::function<std::string(const traces::Plan&)> trace_command;
  std::string trace_path;  // captured: the trace itself; else empty
  int64_t stage = 0;       // captured: the trace's pipeline stage
  // --model: the layout its config states, which the search may override.
  std::optional<ConfigLayout> config;
};

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
  const int64_t replica = h.tp * h.pp;
  if (o.gpus > 0 && o.gpus % replica != 0) {
    return Status::InvalidArgument(fmt::format(
        "--gpus {} contradicts the trace {} (captured at tp {} and pp {}: header.tp, header.pp), "
        "which plans on a multiple of {} GPU(s)",
        o.gpus, path, h.tp, h.pp, replica));
  }
  if (o.gpus == 0) o.gpus = replica * std::max<int64_t>(o.dp, 1);
  // The trace's optimizer state is as it was built: --zero-stage says how
  // (ssdtrain trace --dp --zero-stage); the search cannot rebuild it.
  if (o.zero_stage < 0) o.zero_stage = 0;
  o.seq_len = h.seq_len;
  o.micro_batch = h.micro_batch;
  o.tp = h.tp;
  o.pp = h.pp;
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
    if (s.micro_batch != th.micro_batch || s.tp != th.tp || s.pp != th.pp) {
      return Status::InvalidArgument(fmt::format(
          "{}: a captured trace has one shape (micro-batch {}, tp {}, pp {}); the planner asked "
          "for micro-batch {}, tp {}, pp {}",
          path, th.micro_batch, th.tp, th.pp, s.micro_batch, s.tp, s.pp));
    }
    return *trace;
  };
}

// Reads the trace and sets `o`'s shape and GPU count from it (TakeTraceShape).
Result<PlanInput> TraceInput(PlanCmdOptions& o) {
  SSDTRAIN_ASSIGN_OR_RETURN(traces::Trace trace, traces::ReadTrace(o.trace));
  const traces::Header& h = trace.header;
  SSDTRAIN_RETURN_IF_ERROR(TakeTraceShape(h, o.trace, o));
  PlanInput in;
  in.name = h.model;
  in.layers = h.layers;
  in.heads = h.heads;
  in.stage = h.stage;
  auto shared = std::make_shared<const traces::Trace>(std::move(trace));
  in.provider = OneStageProvider(shared, o.trace);
  in.stage0 = [shared](const traces::Plan&) -> Result<traces::Trace> { return *shared; };
  in.trace_command = [](const traces::Plan&) { return std::string(); };
  in.trace_path = o.trace;
  return in;
}

// Stage `stage`'s trace at the plan's layout.
sim::TraceShape ShapeOf(const traces::Plan& plan, int64_t stage) {
  return sim::TraceShape{plan.micro_batch, plan.tp, plan.pp, stage, plan.dp, plan.zero_stage};
}

// The config overrides that build a trace of `s` (sim::TraceShape).
models::ConfigOverrides OverridesOf(const sim::TraceShape& s) {
  models::ConfigOverrides ov;
  ov.micro_batch = s.micro_batch;
  ov.tp = s.tp;
  ov.pp = s.pp;
  ov.dp = s.dp;
  ov.zero_stage = s.zero_stage;
  return ov;
}

Result<PlanInput> ModelInput(const PlanCmdOptions& o) {
  Result<models::ModelConfig> config = models::LoadModelConfig(o.model);
  if (!config.ok()) return config.status();
  if (o.seq_len > 0) {
    models::ConfigOverrides ov;
    ov.seq_len = o.seq_len;
    config = models::ApplyOverrides(*config, ov, o.model);
    if (!config.ok()) return config.status();
  }
  const models::ModelConfig base = *config;
  const std::string model_path = o.model;
  PlanInput in;
  in.name = base.name;
  in.layers = base.layers;
  in.heads = base.heads;
  in.config =
      ConfigLayout{model_path, base.micro_batch, base.tp, base.pp, base.dp, base.zero_stage};
  in.provider = [base, model_path](const sim::TraceShape& s) -> Result<traces::Trace> {
    SSDTRAIN_ASSIGN_OR_RETURN(models::ModelConfig c,
                              models::ApplyOverrides(base, OverridesOf(s), model_path));
    return models::BuildTrace(c, s.stage);
  };
  in.stage0 = [provider = in.provider](const traces::Plan& plan) -> Result<traces::Trace> {
    return provider(ShapeOf(plan, 0));
  };
  in.trace_command = [base, model_path](const traces::Plan& plan) {
    std::string command =
        fmt::format("{} trace --model {} --micro-batch {} --seq-len {} --tp {} --pp {}",
                    SelfCommand(), model_path, plan.micro_batch, base.seq_len, plan.tp, plan.pp);
    if (plan.zero_stage != 0) {
      command += fmt::format(" --dp {} --zero-stage {}", plan.dp, plan.zero_stage);
    }
    return command;
  };
  return in;
}

// How to replay a plan made from --trace. The trace is one stage: with pp > 1
// it replays alone (`replay --trace` across pipeline ranks is refused, each
// rank needing its own stage's trace), and it stood for every stage in the
// search (OneStageProvider); with pp = 1, its dp ranks replay it at once.
std::string CapturedReplayLines(const PlanInput& in, const traces::Plan& plan,
                                const std::string& plan_path) {
  const std::string replay =
      fmt::format("{} replay --trace {} --plan {} --dir OFFLOAD_DIR -o run.json", SelfCommand(),
                  in.trace_path, plan_path);
  if (plan.pp == 1) {
    // Megatron-LM's ranks (exec/step_sync.h): every tensor-parallel shard of every replica.
    const int64_t n_ranks = std::max<int64_t>(plan.tp, 1) * plan.dp;
    const std::string ranks = n_ranks > 1 ? fmt::format("mpirun -np {} ", n_ranks) : "";
    return fmt::format("replay this plan: {}{}\n", ranks, replay);
  }
  return fmt::format(
      "replay this plan: {} --single-rank (stage {} of {} alone; every stage replays from "
      "--model)\n"
      "note: {} is stage {} of {} and stood for every stage, so the plan holds its memory as "
      "the first stage's, which holds the most micro-batches in flight\n",
      replay, in.stage, plan.pp, in.trace_path, in.stage, plan.pp);
}

// With pp > 1, the plan of every other stage goes into the plan file
// (extra.stage_plans: [{stage, plan}]): the planner's own for stage 1 and the
// last stage, and for stages between them the policy of its stage 1 applied
// to each stage's trace, eviction points placed alike (the simulator lets
// stage 1 stand for them). Each
// rank of `mpirun ... ssdtrain replay` replays its stage's.
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
    stages.push_back({{"stage", k}, {"plan", traces::ToJson(*stage_plan)}});
  }
  plan.extra["stage_plans"] = stages;
  return Status::Ok();
}

// What offloading asks of the SSD against what it gives, for the stage that
// would need the most write bandwidth, and why a plan writes nothing there.
std::string SsdVerdict(const sim::Prediction& p) {
  if (p.stage_peaks.empty()) return "";
  const sim::Prediction::StagePeak* need = &p.stage_peaks.front();
  for (const auto& s : p.stage_peaks) {
    if (s.required_write_GBps > need->required_write_GBps) need = &s;
  }
  if (need->offloadable_bytes == 0) return "SSD: the model has no activation a plan may offload\n";
  // Sizes in GiB, as the headline's; drive rates in GB/s, as drives are rated,
  // said once in bytes so that the two are not read as one family.
  std::string line = fmt::format(
      "SSD: offloading stage {}'s saved activations ({:.2f} GiB per micro-batch, {} held at once) "
      "behind its {:.1f} ms of forward compute needs {:.1f} GB/s (1e9 B/s) of writes per GPU; its "
      "drives write {:.1f} GB/s",
      need->stage, static_cast<double>(need->offloadable_bytes) / kGiB,
      InFlightText(need->in_flight, p.virtual_stages),
      static_cast<double>(need->forward_compute_ns) / 1e6, need->required_write_GBps,
      p.array_write_GBps);
  if (p.metrics.ssd_bytes_written > 0) {
    return line + fmt::format("; this plan writes {:.2f} GiB/step\n",
                              static_cast<double>(p.metrics.ssd_bytes_written) / kGiB);
  }
  if (need->required_write_GBps > p.array_write_GBps) {
    return line + fmt::format(
                      ": offload cannot hide behind compute ({:.1f}x the drives' rate), so this "
                      "plan writes nothing to the SSD\n",
                      need->required_write_GBps / std::max(1e-9, p.array_write_GBps));
  }
  return line + ": the drives keep pace, but the fastest plan that fits writes nothing to them\n";
}

// Bytes over a budget, in GiB, or in MiB below a tenth of one (so that a small
// excess does not print as 0.00 GiB).
std::string OverBudgetText(int64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const double b = static_cast<double>(bytes);
  return b >= 0.1 * kGiB ? fmt::format("{:.2f} GiB", b / kGiB)
                         : fmt::format("{:.1f} MiB", b / kMiB);
}

// The --rok table: one row per policy at the best layout (the planner's
// points, each judged by sim::FitsBudget); a row over the budget says by how much.
void PrintRok(const nlohmann::json& rok, int64_t budget_bytes, std::ostream& out) {
  out << fmt::format("recompute-offload-keep curve (best layout; budget {:.2f} GiB per GPU):\n",
                     static_cast<double>(budget_bytes) / kGiB);
  out << fmt::format("{:>20} {:>14} {:>16} {:>12}  {}\n", "policy", "peak GiB", "activations GiB",
                     "step ms", "fits");
  for (const nlohmann::json& e : rok) {
    const std::string fits =
        e.at("fits").get<bool>()
            ? "yes"
            : "no: " + OverBudgetText(e.at("over_budget_bytes").get<int64_t>()) + " over budget";
    out << fmt::format("{:>20} {:>14.2f} {:>16.2f} {:>12.1f}  {}\n",
                       e.at("policy").get<std::string>(),
                       e.at("peak_gpu_bytes").get<double>() / kGiB,
                       e.at("peak_activation_bytes").get<double>() / kGiB,
                       e.at("step_time_ns").get<double>() / 1e6, fits);
  }
}

int RunPlan(PlanCmdOptions o) {
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
  if (o.memory_budget_GiB < 0) {
    return ReportError("plan", Status::InvalidArgument("--memory-budget: must be >= 0 GiB"));
  }
  Status budget_ok = CheckMemoryBudget(o.memory_budget_GiB, *hw, o.hardware);
  if (!budget_ok.ok()) return ReportError("plan", budget_ok);
  Status flags_ok = CheckCompareFlags(o.compare, o.policy, o.compare_json);
  if (!flags_ok.ok()) return ReportError("plan", flags_ok);
  sim::PlannerOptions po;
  po.gpus = o.gpus;
  po.policy = o.policy;
  po.memory_budget_bytes = static_cast<int64_t>(o.memory_budget_GiB * kGiB);
  if (o.micro_batch > 0) po.micro_batch = o.micro_batch;
  po.global_batch = o.global_batch;
  if (o.tp > 0) po.tp = o.tp;
  if (o.pp > 0) po.pp = o.pp;
  if (o.dp > 0) po.dp = o.dp;
  if (o.num_micro_batches > 0) po.num_micro_batches = o.num_micro_batches;
  if (o.zero_stage >= 0) po.zero_stage = o.zero_stage;
  if (!o.schedule.empty()) {
    po.schedule = o.schedule;
  } else if (!o.trace.empty()) {
    // A trace is planned at its own shape, to replay: 1F1B, unless --schedule
    // asks for interleaved (planned, not yet replayed).
    po.schedule = "1f1b";
  }
  if (o.virtual_stages > 0) po.virtual_stages = o.virtual_stages;
  po.allow_host_offload = !o.no_host_offload;
  po.layers = in.layers;
  po.heads = in.heads;
  po.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  po.record_timeline = !o.timeline.empty();
  nlohmann::json comparison;  // --json
  Result<sim::PlannerResult> r =
      o.compare ? CompareAndChoose(in.name, in.provider, *hw, po, &comparison, std::cout)
                : sim::SearchPlan(in.provider, *hw, po);
  if (!r.ok()) return ReportError("plan", r.status());
  if (!r->fits) {
    const double budget_GiB =
        static_cast<double>(po.memory_budget_bytes > 0 ? po.memory_budget_bytes
                                                       : sim::GpuMemoryBytes(*hw)) /
        kGiB;
    if (r->simulations == 0) {
      std::cerr << fmt::format(
          "ssdtrain plan: error: {} does not fit on {} GPUs of {}: the weights, gradients and "
          "optimizer state alone need {:.3f} GiB per GPU at the best layout, {:.3f} GiB more than "
          "the {:.3f} GiB budget\n",
          in.name, o.gpus, hw->name, budget_GiB + static_cast<double>(r->over_budget_bytes) / kGiB,
          static_cast<double>(r->over_budget_bytes) / kGiB, budget_GiB);
      return 1;
    }
    if (r->over_budget_bytes == 0 && !r->shortfall.empty()) {
      std::cerr << fmt::format(
          "ssdtrain plan: error: {} does not run on {} GPUs of {} under any policy: the "
          "lowest-memory plan found ({}, micro-batch {}, tp {}, pp {}, {} micro-batches) fits "
          "the GPU, but {}\n",
          in.name, o.gpus, hw->name, r->plan.policy, r->plan.micro_batch, r->plan.tp, r->plan.pp,
          r->plan.num_micro_batches, r->shortfall);
      return 1;
    }
    const sim::Prediction::StagePeak& worst = sim::WorstStage(r->prediction);
    std::cerr << fmt::format(
        "ssdtrain plan: error: {} does not fit on {} GPUs of {} under any policy: the "
        "lowest-memory plan found ({}, micro-batch {}, tp {}, pp {}{}) needs {:.3f} GiB per GPU "
        "on stage {}, which holds {}{} at once, {:.3f} GiB more than the {:.3f} GiB budget\n",
        in.name, o.gpus, hw->name, r->plan.policy, r->plan.micro_batch, r->plan.tp, r->plan.pp,
        r->plan.zero_stage == 1 ? ", ZeRO-1" : "",
        static_cast<double>(r->prediction.metrics.peak_gpu_bytes) / kGiB, worst.stage,
        InFlightText(worst.in_flight, r->prediction.virtual_stages),
        r->prediction.virtual_stages > 1 ? "" : " micro-batch(es)",
        static_cast<double>(r->over_budget_bytes) / kGiB, budget_GiB);
    return 1;
  }
  traces::Plan plan = r->plan;
  if (plan.pp > 1) {
    Status attached = AttachStagePlans(in, *r, plan);
    if (!attached.ok()) return ReportError("plan", attached);
  }
  Result<traces::Trace> stage0 = in.stage0(plan);
  if (!stage0.ok()) return ReportError("plan", stage0.status());
  const traces::StepReport report = sim::PredictionReport(r->prediction, *stage0, plan, *hw);
  plan.extra["search"] = {{"layouts", r->layouts},
                          {"simulated_layouts", r->simulated_layouts},
                          {"simulations", r->simulations},
                          {"hardware", hw->name}};
  plan.extra["rok"] = r->rok;
  plan.extra["prediction_report"] = traces::ToJson(report);
  outputs.Set("-o", traces::ToJson(plan));
  outputs.Set("--prediction", traces::ToJson(report));
  if (o.compare) outputs.Set("--json", std::move(comparison));
  if (!o.timeline.empty()) {
    outputs.Set("--timeline", traces::ToChromeTrace(r->prediction.timeline, "ssdtrain plan"));
  }
  if (Status w = outputs.Commit(); !w.ok()) return ReportError("plan", w);
  const traces::StepMetrics& m = r->prediction.metrics;
  std::cout << fmt::format(
      "{} on {} x {}: policy {} micro-batch {} tp {} pp {} dp {}{} ({} micro-batches{}): step "
      "{:.1f} ms, {:.0f} tokens/s, {:.3g} TFLOP/s per GPU, peak {:.2f} GiB (activations {:.2f} "
      "GiB), SSD writes {:.2f} GiB/step\n",
      in.name, o.gpus, hw->name, plan.policy, plan.micro_batch, plan.tp, plan.pp, plan.dp,
      plan.zero_stage == 1 ? " ZeRO-1" : "", plan.num_micro_batches, ScheduleText(plan, in.layers),
      static_cast<double>(m.step_time_ns) / 1e6, m.tokens_per_s, m.tflops_per_gpu,
      static_cast<double>(m.peak_gpu_bytes) / kGiB,
      static_cast<double>(m.peak_activation_bytes) / kGiB,
      static_cast<double>(m.ssd_bytes_written) / kGiB);
  std::cout << fmt::format("global batch {} sequences; ",
                           plan.micro_batch * plan.num_micro_batches * plan.dp)
            << BudgetText(plan.memory_budget_bytes, po.memory_budget_bytes > 0, *hw) << "\n";
  if (in.config) std::cout << OverriddenConfigNote(*in.config, plan, po);
  std::cout << ScheduleVerdict(*r);
  std::cout << SsdVerdict(r->prediction);
  if (o.rok) PrintRok(plan.extra["rok"], plan.memory_budget_bytes, std::cout);
  const std::string make_trace = in.trace_command(plan);
  if (make_trace.empty()) {
    std::cout << fmt::format("trace for this plan: {} (captured)\n", in.trace_path);
  } else {
    std::cout << "trace for this plan: " << make_trace << "\n";
  }
  // One rank per GPU of the layout (exec/step_sync.h: tp fastest, then dp, then pp).
  const int64_t n_ranks = std::max<int64_t>(plan.tp, 1) * plan.pp * plan.dp;
  const std::string ranks = n_ranks > 1 ? fmt::format("mpirun -np {} ", n_ranks) : "";
  if (const std::string refused = NotReplayedText(plan); !refused.empty()) {
    std::cout << refused;
  } else if (!o.model.empty()) {
    // Each rank builds its own shard's trace from the model config.
    std::cout << fmt::format(
        "replay this plan: {}{} replay --model {} --plan {} --dir OFFLOAD_DIR -o "
        "run.json{}\n",
        ranks, SelfCommand(), o.model, o.output,
        n_ranks > 1 ? " (rank r runs stage r / (tp x dp), replica (r / tp) % dp, shard r % tp)"
                    : "");
  } else {
    std::cout << CapturedReplayLines(in, plan, o.output);
  }
  // A preset leaves the executor's GEMM workspace out of the plan's memory
  // (sim::GpuOptions::replay_workspace); a config `calibrate` writes counts it.
  if (!hw->gpu.replay_workspace) {
    std::cout << fmt::format(
        "note: {} is not calibrated (no gpu.replay_workspace), so this plan leaves out the "
        "replay's GEMM workspace and a replay may find it over its budget; to replay on this "
        "machine, run `{} calibrate --dir OFFLOAD_DIR -o hw.json` first and plan with "
        "--hardware hw.json\n",
        o.hardware, SelfCommand());
  }
  // A config measured by one process predicts ranks that each had a machine
  // of their own; ranks that share this one (cores, disk) run slower.
  if (n_ranks > 1 && hw->calibrated_ranks > 0 && hw->calibrated_ranks != n_ranks) {
    std::cout << fmt::format(
        "note: {} was calibrated on {} rank{} at once; where the {} ranks share that machine, "
        "calibrate them as they will run (mpirun -np {} ssdtrain calibrate ...) and plan again\n",
        o.hardware, hw->calibrated_ranks, hw->calibrated_ranks == 1 ? "" : "s", n_ranks, n_ranks);
  }
  return 0;
}

}  // namespace

Verb AddPlanCommand(CLI::App& app) {
  auto o = std::make_shared<PlanCmdOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Search micro-batch, pipeline and tensor parallelism and an offload policy");
  cmd->add_option("--model", o->model,
                  fmt::format("model config (configs/models/*.json), or a Hugging Face "
                              "config.json or its folder (model_type {}; seq_len min(max "
                              "positions, 4096), micro-batch 1, dtype its torch_dtype or bf16; "
                              "`ssdtrain trace --summary` shows what is read and assumed)",
                              models::HfSupportedModelTypes()));
  cmd->add_option("--trace", o->trace,
                  "a trace (ssdtrain.capture or ssdtrain trace) instead of --model: planned at "
                  "its own micro-batch, sequence length, tp and pp, on tp x pp GPUs unless "
                  "--gpus adds data parallelism; a flag that contradicts it is refused");
  cmd->add_option("--hardware", o->hardware, "hardware config (configs/hardware/*.json)")
      ->required();
  cmd->add_option("--gpus", o->gpus, "GPUs in total (default: 1; with --trace, its tp x pp)")
      ->check(IntAtLeast(1));
  cmd->add_option("--policy", o->policy,
                  "keep, recompute-full, recompute-selective, offload-host, offload-ssd, "
                  "ssdtrain, ssdtrain-paper, optimal or auto (default: auto, the fastest that fits "
                  "of every policy but ssdtrain-paper)")
      ->check(CLI::IsMember({"keep", "recompute-full", "recompute-selective", "offload-host",
                             "offload-ssd", "ssdtrain", "ssdtrain-paper", "optimal", "auto"}));
  cmd->add_option("--memory-budget", o->memory_budget_GiB,
                  "GPU memory budget in GiB (default: the GPU's usable memory, the hardware "
                  "config's gpu.memory_GiB less gpu.reserved_GiB; above it is refused)");
  cmd->add_option("--micro-batch", o->micro_batch, "fix the micro-batch size (default: search)")
      ->check(IntAtLeast(1));
  cmd->add_option("--seq-len", o->seq_len, "sequence length (overrides the model config)")
      ->check(IntAtLeast(1));
  cmd->add_option("--global-batch", o->global_batch,
                  "sequences per step (default: micro-batch x m x dp; with --compare, 8 per GPU, "
                  "or a multiple of a pinned micro-batch)")
      ->check(IntAtLeast(1));
  cmd->add_option("--tp", o->tp, "fix the tensor-parallel degree (default: search)")
      ->check(IntAtLeast(1));
  cmd->add_option("--pp", o->pp, "fix the pipeline depth (default: search)")->check(IntAtLeast(1));
  cmd->add_option("--dp", o->dp, "fix the data-parallel degree (default: search)")
      ->check(IntAtLeast(1));
  cmd->add_option("--num-micro-batches", o->num_micro_batches,
                  "fix the micro-batches per step (default: --global-batch / (micro-batch x "
                  "dp), else 2 x pp)")
      ->check(IntAtLeast(1));
  cmd->add_option("--zero-stage", o->zero_stage,
                  "fix Megatron's distributed optimizer: 1 shards the optimizer state over dp "
                  "(ZeRO-1), 0 does not (default: weigh both at every dp > 1; with --trace, 0: "
                  "how the trace was built)")
      ->check(IntBetween(0, 1));
  cmd->add_option("--schedule", o->schedule,
                  "fix the pipeline schedule: 1f1b, gpipe or interleaved (Megatron's interleaved "
                  "1F1B; default: weigh 1f1b and interleaved)")
      ->check(CLI::IsMember({"1f1b", "gpipe", "interleaved"}));
  cmd->add_option("--virtual-stages", o->virtual_stages,
                  "with --schedule interleaved: fix the model chunks per stage, v (layers / (pp x "
                  "v) is Megatron's --num-layers-per-virtual-pipeline-stage; default: search)")
      ->check(IntAtLeast(1));
  cmd->add_option("-o,--output", o->output, "plan JSON to write")->required();
  cmd->add_option("--timeline", o->timeline, "Chrome/Perfetto trace of the predicted step");
  cmd->add_option("--prediction", o->prediction,
                  "step report of the prediction (ssdtrain-report, for ssdtrain compare)");
  cmd->add_flag("--rok", o->rok, "print the recompute-offload-keep curve");
  cmd->add_flag("--compare", o->compare,
                "every policy at its best layout and one global batch, side by side, with a "
                "verdict on SSD offload; -o gets the fastest plan that fits");
  cmd->add_option("--json", o->compare_json, "with --compare: the table and verdict as JSON");
  cmd->add_flag("--no-host-offload", o->no_host_offload,
                "no offload-host placements (keep pinned host memory out of the plan)");
  return Verb{cmd, [o] { return RunPlan(*o); }};
}

}  // namespace ssdtrain::app

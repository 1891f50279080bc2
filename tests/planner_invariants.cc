#include "tests/planner_invariants.h"

#include <fmt/format.h>
#include <time.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/fit.h"
#include "sim/hardware.h"
#include "sim/pipeline.h"
#include "sim/planner.h"
#include "sim/policy.h"
#include "traces/step_peaks.h"
#include "traces/storage_plan.h"

namespace ssdtrain::testing {
namespace {

struct Searched {
  sim::PlannerResult result;
  double seconds = 0;
};

// This process's CPU time, all threads (the search's: the sweep runs one at a time).
double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::string CaseName(const SweepCase& c) {
  return fmt::format("{} on {} x {}{}{}", std::filesystem::path(c.model).stem().string(), c.gpus,
                     std::filesystem::path(c.hardware).stem().string(),
                     c.defer_grad_sync ? " --defer-grad-sync" : "",
                     c.fp8.empty() ? "" : " --fp8 " + c.fp8);
}

// Each returned stage plan against the static peak of its unrolled step.
void CheckStagePeaks(const SweepCase& c, const std::string& policy, const sim::PlannerResult& r,
                     const sim::TraceProvider& provider, const sim::HardwareOptions& hw,
                     std::vector<std::string>& out) {
  const traces::Plan& p = r.plan;
  Result<sim::PipelineSchedule> schedule = sim::ParseSchedule(p.schedule);
  std::vector<std::pair<int64_t, const traces::Plan*>> plans{{0, &p}};
  for (const auto& [stage, plan] : r.stage_plans) plans.emplace_back(stage, &plan);
  for (const auto& [stage, plan] : plans) {
    const std::string where = fmt::format(
        "{} --policy {}: stage {} ({}, {} mb {} m {})", CaseName(c), policy, stage, plan->policy,
        traces::PlanLayout(p).Describe(), p.micro_batch, p.num_micro_batches);
    Result<traces::Trace> t = provider(sim::TraceShape::Of(p, stage));
    if (!t.ok()) {
      out.push_back(where + ": " + t.status().message());
      continue;
    }
    Result<traces::StoragePlan> sp = traces::ResolvePlan(*t, *plan, "plan");
    if (!sp.ok()) {
      out.push_back(where + ": " + sp.status().message());
      continue;
    }
    // Interleaved: the stage's whole step unrolled, chunk boundaries and all,
    // as the replay runs it (traces/step_peaks.h); else the 1F1B closed form.
    const int64_t v = *schedule == sim::PipelineSchedule::kInterleaved ? p.virtual_stages : 1;
    const int64_t k = sim::ChunksInFlight(stage, p.pp, p.num_micro_batches, *schedule, v);
    const int64_t alignment = std::max<int64_t>(1, hw.gpu.allocation_alignment_bytes);
    traces::StaticPeaks replay;
    if (v > 1) {
      traces::Plan step = *plan;
      step.pp = p.pp;
      step.num_micro_batches = p.num_micro_batches;
      step.schedule = p.schedule;
      step.virtual_stages = v;
      Result<traces::StaticPeaks> unrolled = traces::UnrolledStaticPeaks(*t, step, alignment);
      if (!unrolled.ok()) {
        out.push_back(where + ": " + unrolled.status().message());
        continue;
      }
      replay = *unrolled;
    } else {
      replay = traces::WholeStepStaticPeaks(*t, *sp, k, alignment);
    }
    const sim::Prediction::StagePeak* predicted = nullptr;
    for (const auto& sp_ : r.prediction.stage_peaks) {
      if (sp_.stage == stage) predicted = &sp_;
    }
    if (!predicted) {
      out.push_back(where + ": no predicted peak for the stage");
      continue;
    }
    if (predicted->max_op_reruns > 1) {
      out.push_back(
          fmt::format("{}: a recompute runs one op {} times in a micro-batch (once: "
                      "traces/storage_plan.h, \"Recompute\")",
                      where, predicted->max_op_reruns));
    }
    bool recompute = false;
    for (const traces::Placement& pl : plan->placements) {
      recompute = recompute || pl.action == traces::TensorAction::kRecompute;
    }
    const bool ok = recompute ? replay.device_bytes <= predicted->peak_gpu_bytes
                              : replay.device_bytes == predicted->peak_gpu_bytes;
    if (!ok) {
      out.push_back(fmt::format(
          "{}: the unrolled step holds {} bytes at its peak, the prediction says {} ({} "
          "micro-batches in flight)",
          where, replay.device_bytes, predicted->peak_gpu_bytes, k));
    }
  }
}

}  // namespace

std::vector<std::string> AllPlannerPolicies() {
  std::vector<std::string> out(std::begin(sim::kFixedPolicies), std::end(sim::kFixedPolicies));
  out.emplace_back("megatron-offload");  // auto tries it too (sim/planner.cc)
  out.emplace_back("optimal");
  out.emplace_back("auto");
  return out;
}

SweepOutcome CheckPlannerInvariants(const SweepCase& c) {
  SweepOutcome out;
  Result<models::ModelConfig> config = models::LoadModelConfig(c.model);
  Result<sim::HardwareOptions> hw = sim::LoadHardware(c.hardware);
  if (!config.ok() || !hw.ok()) {
    out.violations.push_back(CaseName(c) + ": " +
                             (config.ok() ? hw.status() : config.status()).message());
    return out;
  }
  models::ModelConfig base = *config;
  base.zero_defer_grad_sync = c.defer_grad_sync;
  if (!c.fp8.empty()) {
    if (const Status s = sim::CheckPrecision(*hw, c.fp8); !s.ok()) {
      out.lines.push_back(CaseName(c) + ": skipped, " + s.message());
      return out;
    }
    if (base.dtype == "fp32") base.dtype = "bf16";
    base.fp8 = c.fp8;
  }
  const sim::TraceProvider provider = ModelTraceProvider(base, c.model);
  const int64_t budget = sim::GpuMemoryBytes(*hw);
  std::map<std::string, Searched> searched;
  for (const std::string& policy : c.policies) {
    sim::PlannerOptions po;
    po.gpus = c.gpus;
    po.policy = policy;
    app::SetModelOptions(base, &po);
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = ProcessCpuSeconds();
    Result<sim::PlannerResult> r = sim::SearchPlan(provider, *hw, po);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu_seconds = ProcessCpuSeconds() - cpu_start;
    const std::string where = CaseName(c) + " --policy " + policy;
    if (!r.ok()) {
      // "no layout" (nothing divides the GPUs, the layers and the batch) is an
      // answer about the model; any other error is the search failing on a
      // layout it chose to try (a trace it could not build, say).
      out.lines.push_back(where + ": error: " + r.status().message());
      if (!r.status().message().starts_with("no layout:")) {
        out.violations.push_back(where + ": the search failed: " + r.status().message());
      }
      continue;
    }
    if (cpu_seconds > c.max_seconds) {
      out.violations.push_back(
          fmt::format("{}: the search took {:.1f} s of CPU time (limit {:.0f} s; {:.1f} s wall)",
                      where, cpu_seconds, c.max_seconds, seconds));
    }
    if (r->fits) {
      if (!sim::FitsBudget(r->prediction, budget)) {
        out.violations.push_back(fmt::format(
            "{}: returned as fitting, but its worst stage ({}) peaks at {} bytes over the {} "
            "budget",
            where, sim::WorstStage(r->prediction).stage, r->prediction.metrics.peak_gpu_bytes,
            budget));
      }
      CheckStagePeaks(c, policy, *r, provider, *hw, out.violations);
    }
    if (!r->fits && r->simulated_layouts == 0) {
      // No layout's weights and optimizer state fit: nothing was simulated,
      // so there is no plan's peak to print.
      out.lines.push_back(fmt::format(
          "{}: does not fit: no layout's weights, gradients and optimizer state fit, the "
          "least {:.2f} GiB over the budget ({:.1f} s, {:.1f} s CPU)",
          where, static_cast<double>(r->over_budget_bytes) / (1 << 30), seconds, cpu_seconds));
      searched.emplace(policy, Searched{std::move(*r), seconds});
      continue;
    }
    out.lines.push_back(fmt::format(
        "{}: {} {} mb {} m {} {}{}: {:.0f} tokens/s, worst stage peak {:.2f} "
        "GiB{} ({:.1f} s, {:.1f} s CPU)",
        where, r->fits ? "fits" : "does not fit", traces::PlanLayout(r->plan).Describe(),
        r->plan.micro_batch, r->plan.num_micro_batches, r->plan.schedule,
        r->plan.virtual_stages > 1 ? fmt::format(" v={}", r->plan.virtual_stages) : "",
        r->prediction.metrics.tokens_per_s,
        static_cast<double>(r->prediction.metrics.peak_gpu_bytes) / (1 << 30),
        r->fits ? "" : " (over budget)", seconds, cpu_seconds));
    searched.emplace(policy, Searched{std::move(*r), seconds});
  }
  auto a = searched.find("auto");
  if (a == searched.end()) return out;
  for (const auto& [policy, s] : searched) {
    if (policy == "auto" || !s.result.fits) continue;
    const double fixed = s.result.prediction.metrics.tokens_per_s;
    if (!a->second.result.fits || a->second.result.prediction.metrics.tokens_per_s < fixed) {
      out.violations.push_back(fmt::format(
          "{}: auto ({}, {:.0f} tokens/s{}) is slower than --policy {} ({:.0f} tokens/s)",
          CaseName(c), a->second.result.plan.policy,
          a->second.result.prediction.metrics.tokens_per_s,
          a->second.result.fits ? "" : ", not fitting", policy, fixed));
    }
  }
  return out;
}

}  // namespace ssdtrain::testing

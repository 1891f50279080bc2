#include "app/plan_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "app/detail/plan_compare_rows.h"
#include "app/plan_budget.h"
#include "app/plan_schedule.h"
#include "sim/fit.h"
#include "traces/io.h"

namespace ssdtrain::app {
namespace {

using detail::GiB;
using detail::LayoutText;
using detail::Metrics;
using detail::Simulated;

// Keep's activation peak at `plan`'s layout: the planner's search pinned to it.
Result<int64_t> KeepActivationAt(const sim::TraceProvider& provider, const sim::HardwareOptions& hw,
                                 sim::PlannerOptions o, const traces::Plan& plan) {
  o.policy = "keep";
  o.micro_batch = plan.micro_batch;
  o.tp = plan.tp;
  o.cp = plan.cp;
  o.pp = plan.pp;
  o.dp = plan.dp;
  o.num_micro_batches = plan.num_micro_batches;
  o.zero_stage = plan.zero_stage;
  if (plan.dp_shard != 0) o.dp_shard = plan.dp_shard;
  o.ep = plan.ep;
  // The schedule too: keep's search would otherwise take the fastest one at
  // this layout, and an interleaved keep holds more than a 1F1B plan does (a
  // "saved" below zero).
  o.schedule = plan.schedule;
  o.virtual_stages =
      plan.schedule == "interleaved" ? std::optional<int64_t>(plan.virtual_stages) : std::nullopt;
  SSDTRAIN_ASSIGN_OR_RETURN(sim::PlannerResult keep, sim::SearchPlan(provider, hw, o));
  return keep.prediction.metrics.peak_activation_bytes;
}

size_t ChosenRow(const std::vector<ComparedPolicy>& rows) {
  std::optional<size_t> fastest, lowest;
  for (size_t i = 0; i < rows.size(); ++i) {
    const ComparedPolicy& r = rows[i];
    if (r.result.fits &&
        (!fastest || Metrics(r).tokens_per_s > Metrics(rows[*fastest]).tokens_per_s)) {
      fastest = i;
    }
    if (Simulated(r) &&
        (!lowest || Metrics(r).peak_gpu_bytes < Metrics(rows[*lowest]).peak_gpu_bytes)) {
      lowest = i;
    }
  }
  return fastest ? *fastest : lowest.value_or(0);
}

std::string FitsText(const ComparedPolicy& r) {
  if (r.result.fits) return "yes";
  if (!Simulated(r)) return "no: weights and optimizer state alone";
  if (r.result.over_budget_bytes == 0 && !r.result.shortfall.empty()) {
    return "no: host memory or disk";
  }
  // A small excess in MiB, so that it does not print as 0.00 GiB.
  const int64_t over = r.result.over_budget_bytes;
  constexpr int64_t kTenthGiB = (int64_t{1} << 30) / 10;
  if (over < kTenthGiB) {
    return fmt::format("no: {:.1f} MiB over", static_cast<double>(over) / (1 << 20));
  }
  return fmt::format("no: {:.2f} GiB over", GiB(over));
}

}  // namespace

std::vector<std::string> ComparedPolicies(bool allow_host_offload, bool separate_projections) {
  std::vector<std::string> out{"keep", "recompute-full", "recompute-selective"};
  if (separate_projections) out.emplace_back("recompute-sac");
  if (allow_host_offload) {
    out.emplace_back("offload-host");
    out.emplace_back("megatron-offload");
  }
  for (const char* p : {"offload-ssd", "ssdtrain", "ssdtrain-paper", "optimal"}) {
    out.emplace_back(p);
  }
  return out;
}

Status CheckCompareFlags(bool compare, const std::string& policy, const std::string& json_path) {
  if (compare && policy != "auto") {
    return Status::InvalidArgument("--compare runs every policy: leave --policy " + policy +
                                   " out");
  }
  if (!compare && !json_path.empty()) {
    return Status::InvalidArgument("--json: the comparison's file; give --compare");
  }
  return Status::Ok();
}

int64_t CompareSequencesPerGpu(const sim::PlannerOptions& o) {
  return std::lcm(kCompareSequencesPerGpu, o.micro_batch.value_or(1));
}

Result<int64_t> CompareGlobalBatch(const sim::PlannerOptions& o) {
  if (o.global_batch > 0) return o.global_batch;
  if (o.num_micro_batches && o.micro_batch && o.dp) {
    return *o.micro_batch * *o.num_micro_batches * *o.dp;
  }
  if (o.num_micro_batches) {
    return Status::InvalidArgument(
        "--compare runs every policy at one global batch: give --global-batch (or --micro-batch "
        "and --dp beside --num-micro-batches)");
  }
  return CompareSequencesPerGpu(o) * o.gpus;
}

Result<PolicyComparison> ComparePolicies(const sim::TraceProvider& provider,
                                         const sim::HardwareOptions& hw,
                                         sim::PlannerOptions options,
                                         const std::function<void(const std::string&)>& progress) {
  PolicyComparison c;
  c.hardware = hw.name;
  c.gpus = options.gpus;
  c.global_batch_default = options.global_batch <= 0 && !options.num_micro_batches;
  SSDTRAIN_ASSIGN_OR_RETURN(c.global_batch, CompareGlobalBatch(options));
  c.budget_given = options.memory_budget_bytes > 0;
  c.budget_bytes = c.budget_given ? options.memory_budget_bytes : sim::GpuMemoryBytes(hw);
  options.global_batch = c.global_batch;
  options.progress = nullptr;
  options.record_timeline = false;  // CompareAndChoose records the chosen plan's
  const std::vector<std::string> policies =
      ComparedPolicies(options.allow_host_offload, options.separate_projections);
  // Keep's activation peak per layout, so that rows at one layout share one search.
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                      std::string, int64_t>,
           int64_t>
      keep_at;
  for (size_t i = 0; i < policies.size(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    options.policy = policies[i];
    Result<sim::PlannerResult> r = sim::SearchPlan(provider, hw, options);
    if (!r.ok()) return r.status().WithPrefix("--compare, policy " + policies[i]);
    ComparedPolicy row{policies[i], std::move(*r)};
    if (Simulated(row)) {
      const traces::Plan& p = row.result.plan;
      const auto key = std::tuple{p.micro_batch, p.tp,       p.cp, p.pp,       p.dp,
                                  p.zero_stage,  p.dp_shard, p.ep, p.schedule, p.virtual_stages};
      auto it = keep_at.find(key);
      if (it == keep_at.end()) {
        int64_t keep = Metrics(row).peak_activation_bytes;
        if (row.policy != "keep") {
          SSDTRAIN_ASSIGN_OR_RETURN(keep, KeepActivationAt(provider, hw, options, p));
        }
        it = keep_at.emplace(key, keep).first;
      }
      row.keep_activation_bytes = it->second;
    }
    row.search_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (progress) {
      progress(fmt::format(
          "plan --compare: {}/{} {}: {:.1f} s, {} layouts simulated; {}", i + 1, policies.size(),
          row.policy, row.search_seconds, row.result.simulated_layouts,
          !Simulated(row)   ? std::string("nothing simulated")
          : row.result.fits ? fmt::format("best {} ({:.0f} tokens/s)", LayoutText(row.result.plan),
                                          Metrics(row).tokens_per_s)
                            : "nothing fits"));
    }
    c.rows.push_back(std::move(row));
  }
  c.chosen = ChosenRow(c.rows);
  return c;
}

std::string ComparisonTable(const PolicyComparison& c, const sim::HardwareOptions& hw) {
  std::string out = fmt::format(
      "{} on {} x {}: every policy at its best layout, global batch {} sequences{}\n{}\n", c.model,
      c.gpus, c.hardware, c.global_batch,
      c.global_batch_default
          ? fmt::format(" ({} per GPU, the default; --global-batch)", c.global_batch / c.gpus)
          : "",
      BudgetText(c.budget_bytes, c.budget_given, hw));
  out += fmt::format("{:<20} {:>11} {:>14} {:>9} {:>9} {:>7} {:>17} {:>15} {:>15}  {}\n", "policy",
                     "tp/pp/dp", "mb x m x dp", "step ms", "tokens/s", "TFLOP/s",
                     "peak GiB (stage)", "saved GiB", "SSD GB/s", "fits");
  out += fmt::format("{:<20} {:>11} {:>14} {:>9} {:>9} {:>7} {:>17} {:>15} {:>15}\n", "", "", "",
                     "", "", "per GPU", fmt::format("of {:.2f}", GiB(c.budget_bytes)), "vs keep",
                     "need / have");
  for (const ComparedPolicy& r : c.rows) {
    if (!Simulated(r)) {
      out += fmt::format("{:<20} {:>11} {:>14} {:>9} {:>9} {:>7} {:>17} {:>15} {:>15}  {}\n",
                         r.policy, "-", "-", "-", "-", "-", "-", "-", "-", FitsText(r));
      continue;
    }
    const traces::Plan& p = r.result.plan;
    const traces::StepMetrics& m = Metrics(r);
    const sim::Prediction::StagePeak& worst = sim::WorstStage(r.result.prediction);
    const int64_t saved = r.keep_activation_bytes - m.peak_activation_bytes;
    const double saved_pct =
        r.keep_activation_bytes > 0
            ? 100.0 * static_cast<double>(saved) / static_cast<double>(r.keep_activation_bytes)
            : 0.0;
    out += fmt::format(
        "{:<20} {:>11} {:>14} {:>9.1f} {:>9.0f} {:>7.3g} {:>17} {:>15} {:>15}  {}\n", r.policy,
        fmt::format("{}/{}{}/{}{}{}{}", p.tp, p.pp,
                    p.pp_first_layers != 0 || p.pp_last_layers != 0 ? "u" : "", p.dp,
                    p.cp > 1 ? fmt::format("c{}", p.cp) : "",
                    p.ep > 1 ? fmt::format("e{}", p.ep) : "", ZeroText(p, /*compact=*/true)),
        fmt::format("{} x {} x {}", p.micro_batch, p.num_micro_batches, p.dp),
        static_cast<double>(m.step_time_ns) / 1e6, m.tokens_per_s, m.tflops_per_gpu,
        fmt::format("{:.2f} ({})", GiB(m.peak_gpu_bytes), worst.stage),
        fmt::format("{:.2f} ({:.0f}%)", GiB(saved), saved_pct),
        fmt::format("{:.1f} / {:.1f}", m.required_ssd_write_GBps,
                    r.result.prediction.array_write_GBps),
        FitsText(r));
  }
  out +=
      "(an uneven pipeline split marked u after pp (its blocks on the plan's summary line), "
      "context parallelism c<cp>, expert parallelism e<ep>, ZeRO stage n +Zn, HSDP shard "
      "groups of k +Znhk; saved: "
      "activation peak against keep's at the same layout; SSD "
      "need: the write rate that hides this plan's writes behind forward compute, in GB/s = 1e9 "
      "B/s as drives are rated)\n";
  return out;
}

nlohmann::json ComparisonJson(const PolicyComparison& c, const sim::HardwareOptions& hw) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ComparedPolicy& r : c.rows) {
    const traces::Plan& p = r.result.plan;
    const traces::StepMetrics& m = Metrics(r);
    nlohmann::json row = {{"policy", r.policy},
                          {"fits", r.result.fits},
                          {"simulated", Simulated(r)},
                          {"over_budget_bytes", r.result.over_budget_bytes},
                          {"shortfall", r.result.shortfall},
                          {"search_seconds", r.search_seconds}};
    if (Simulated(r)) {
      row.update({{"micro_batch", p.micro_batch},
                  {"tp", p.tp},
                  {"cp", p.cp},
                  {"pp", p.pp},
                  {"dp", p.dp},
                  {"zero_stage", p.zero_stage},
                  {"dp_shard", p.dp_shard},
                  {"num_micro_batches", p.num_micro_batches},
                  {"step_time_ns", m.step_time_ns},
                  {"tokens_per_s", m.tokens_per_s},
                  {"tflops_per_gpu", m.tflops_per_gpu},
                  {"peak_gpu_bytes", m.peak_gpu_bytes},
                  {"worst_stage", sim::WorstStage(r.result.prediction).stage},
                  {"peak_activation_bytes", m.peak_activation_bytes},
                  {"keep_activation_bytes", r.keep_activation_bytes},
                  {"saved_activation_bytes", r.keep_activation_bytes - m.peak_activation_bytes},
                  {"ssd_bytes_written", m.ssd_bytes_written},
                  {"required_ssd_write_GBps", m.required_ssd_write_GBps},
                  {"array_write_GBps", r.result.prediction.array_write_GBps}});
    }
    rows.push_back(std::move(row));
  }
  return {{"format", "ssdtrain-policy-comparison"},
          {"model", c.model},
          {"hardware", c.hardware},
          {"gpus", c.gpus},
          {"global_batch", c.global_batch},
          {"global_batch_default", c.global_batch_default},
          {"memory_budget_bytes", c.budget_bytes},
          {"usable_gpu_bytes", sim::GpuMemoryBytes(hw)},
          {"policies", rows},
          {"chosen", c.rows.empty() ? "" : c.rows[c.chosen].policy},
          {"verdict", Verdict(c)}};
}

Result<sim::PlannerResult> CompareAndChoose(const std::string& model,
                                            const sim::TraceProvider& provider,
                                            const sim::HardwareOptions& hw,
                                            const sim::PlannerOptions& options,
                                            nlohmann::json* json, std::ostream& out) {
  SSDTRAIN_ASSIGN_OR_RETURN(PolicyComparison c,
                            ComparePolicies(provider, hw, options, [](const std::string& line) {
                              std::cerr << line << "\n";
                            }));
  c.model = model;
  out << ComparisonTable(c, hw) << Verdict(c) << "\n";
  if (json != nullptr) *json = ComparisonJson(c, hw);
  ComparedPolicy& chosen = c.rows[c.chosen];
  if (!options.record_timeline || !Simulated(chosen)) return std::move(chosen.result);
  // The same search again, now recording the chosen plan's timeline.
  sim::PlannerOptions again = options;
  again.policy = chosen.policy;
  again.global_batch = c.global_batch;
  again.progress = nullptr;
  return sim::SearchPlan(provider, hw, again);
}

}  // namespace ssdtrain::app

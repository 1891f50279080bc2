// The SSD verdict, the --rok table and the captured trace's replay lines of
// `ssdtrain plan` (app/plan_report.h).
#include "app/plan_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "app/plan_schedule.h"
#include "app/self_path.h"

namespace ssdtrain::app {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Bytes over a budget, in GiB, or in MiB below a tenth of one (so that a small
// excess does not print as 0.00 GiB).
std::string OverBudgetText(int64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  const double b = static_cast<double>(bytes);
  return b >= 0.1 * kGiB ? fmt::format("{:.2f} GiB", b / kGiB)
                         : fmt::format("{:.1f} MiB", b / kMiB);
}

}  // namespace

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

void PrintRok(const nlohmann::json& rok, int64_t budget_bytes, std::ostream& out) {
  out << fmt::format("recompute-offload-keep curve (best layout; budget {:.2f} GiB per GPU):\n",
                     static_cast<double>(budget_bytes) / kGiB);
  out << fmt::format("{:>20} {:>14} {:>16} {:>12}  {}\n", "policy", "peak GiB", "activations GiB",
                     "step ms", "fits");
  for (const nlohmann::json& e : rok) {
    if (!e.value("simulated", true)) {
      out << fmt::format("{:>20} {:>14} {:>16} {:>12}  not simulated: {}\n",
                         e.at("policy").get<std::string>(), "-", "-", "-",
                         e.at("why").get<std::string>());
      continue;
    }
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

}  // namespace ssdtrain::app

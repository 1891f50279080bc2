// Rank 0's whole-step report (app/replay_report.h).
#include "app/replay_report.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "traces/io.h"
#include "traces/layout.h"

namespace ssdtrain::app {

Result<traces::StepReport> WholeStepReport(traces::StepReport mine, const traces::Plan& plan,
                                           RankSync& ranks) {
  SSDTRAIN_ASSIGN_OR_RETURN(std::vector<std::string> all,
                            ranks.GatherAtRankZero(traces::ToJson(mine).dump()));
  if (ranks.rank() != 0) return mine;
  nlohmann::json per_rank = nlohmann::json::array();
  traces::StepMetrics& m = mine.metrics;
  const double tokens_one_rank = m.tokens_per_s * static_cast<double>(m.step_time_ns);
  const traces::Layout layout = traces::PlanLayout(plan);
  const int64_t dp = layout.dp;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string source = "rank " + std::to_string(r) + "'s report";
    SSDTRAIN_ASSIGN_OR_RETURN(nlohmann::json doc, traces::ParseJson(all[r], false, source));
    SSDTRAIN_ASSIGN_OR_RETURN(traces::StepReport rep, traces::StepReportFromJson(doc, source));
    const traces::StepMetrics& x = rep.metrics;
    per_rank.push_back(
        {{"rank", r},
         {"stage", layout.CoordsOf(static_cast<int64_t>(r)).stage},
         {"dp_index", layout.CoordsOf(static_cast<int64_t>(r)).dp},
         {"tp_index", layout.CoordsOf(static_cast<int64_t>(r)).tp},
         {"cp_index", layout.CoordsOf(static_cast<int64_t>(r)).cp},
         {"ep_index", layout.ExpertIndexOf(static_cast<int64_t>(r))},
         {"step_time_ns", x.step_time_ns},
         {"peak_device_bytes", x.peak_gpu_bytes},
         {"peak_activation_bytes", x.peak_activation_bytes},
         // What the plan needs at least (traces::ComputeStaticPeaks).
         {"planned_peak_device_bytes", rep.extra.value("planned_peak_device_bytes", int64_t{0})},
         {"planned_peak_activation_bytes",
          rep.extra.value("planned_peak_activation_bytes", int64_t{0})},
         {"ssd_bytes_written", x.ssd_bytes_written},
         {"ssd_bytes_read", x.ssd_bytes_read},
         {"offload_dirs", rep.extra.value("offload_dirs", nlohmann::json::array())},
         {"exposed_io_ns", x.exposed_io_ns},
         {"allreduce_ns", rep.extra.value("allreduce_ns", int64_t{0})},
         {"verified", rep.verified.value_or(false)},
         {"pipeline", rep.extra.value("pipeline", nlohmann::json::object())},
         {"collectives", rep.extra.value("collectives", nlohmann::json::object())}});
    m.step_time_ns = std::max(m.step_time_ns, x.step_time_ns);
    m.peak_gpu_bytes = std::max(m.peak_gpu_bytes, x.peak_gpu_bytes);
    m.peak_activation_bytes = std::max(m.peak_activation_bytes, x.peak_activation_bytes);
    m.exposed_io_ns = std::max(m.exposed_io_ns, x.exposed_io_ns);
    // Per device, as the simulator gives them: the busiest rank's.
    m.ssd_bytes_written = std::max(m.ssd_bytes_written, x.ssd_bytes_written);
    m.ssd_bytes_read = std::max(m.ssd_bytes_read, x.ssd_bytes_read);
    if (mine.verified && rep.verified) *mine.verified = *mine.verified && *rep.verified;
  }
  if (m.step_time_ns > 0) {
    // Each data-parallel replica trains its own tokens; its stages and
    // tensor-parallel shards share them.
    m.tokens_per_s =
        tokens_one_rank * static_cast<double>(dp) / static_cast<double>(m.step_time_ns);
  }
  mine.extra["ranks"] = per_rank;
  return mine;
}

}  // namespace ssdtrain::app

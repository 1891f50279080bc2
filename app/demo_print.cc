// The demo's table on stdout, its --summary JSON and its plots (app/demo.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "analysis/compare.h"
#include "app/demo.h"
#include "traces/io.h"

namespace ssdtrain::app::demo {

void Demo::PrintTable(const std::vector<Row>& rows, int64_t budget) const {
  std::cout << fmt::format("\n{} on {} — planner budget {:.1f} MiB\n", trace_.header.model,
                           hw_.gpu.name, budget / 1048576.0);
  std::cout << fmt::format("{:<16} {:>21} {:>8} {:>23} {:>23} {:>11} {:>8}\n", "", "step time (ms)",
                           "", "activation peak (MiB)", "device peak (MiB)", "", "");
  std::cout << fmt::format("{:<16} {:>10} {:>10} {:>8} {:>11} {:>11} {:>11} {:>11} {:>11} {:>8}\n",
                           "policy", "predicted", "measured", "error", "predicted", "measured",
                           "predicted", "measured", "SSD (MiB)", "verified");
  for (const Row& r : rows) {
    const double err =
        analysis::RelativeError(static_cast<double>(r.predicted.metrics.step_time_ns),
                                static_cast<double>(r.measured.metrics.step_time_ns));
    std::cout << fmt::format(
        "{:<16} {:>10.1f} {:>10.1f} {:>+7.1f}% {:>11.2f} {:>11.2f} {:>11.2f} {:>11.2f} {:>11.1f} "
        "{:>8}\n",
        r.policy, r.predicted.metrics.step_time_ns / 1e6, r.measured.metrics.step_time_ns / 1e6,
        100 * err, r.predicted.metrics.peak_activation_bytes / 1048576.0,
        r.measured.metrics.peak_activation_bytes / 1048576.0,
        r.predicted.metrics.peak_gpu_bytes / 1048576.0,
        r.measured.metrics.peak_gpu_bytes / 1048576.0,
        r.measured.metrics.ssd_bytes_written / 1048576.0,
        !r.verified   ? "skipped"
        : *r.verified ? "yes"
                      : "NO");
  }
  if (o_.keep_calibration) {
    std::cout << "measured: one calibration, kept (--keep-calibration): no drift check\n";
  } else if (o_.rounds > 1) {
    std::string each;
    for (int64_t ns : rows.front().round_ns)
      each += fmt::format("{}{:.1f}", each.empty() ? "" : ", ", ns / 1e6);
    std::cout << fmt::format(
        "measured: the median of {} rounds (keep: {} ms, {:.1f}% apart: this machine's own drift "
        "during the run; errors of that size are noise)\n",
        o_.rounds, each, 100 * keep_drift_);
  } else {
    const int64_t keep_first = rows.front().measured.metrics.step_time_ns;
    std::cout << fmt::format(
        "keep measured again at the end: {:.1f} ms against {:.1f} ms first ({:.1f}% apart): "
        "this machine's own drift during the run; errors of that size are noise\n",
        keep_again_ns_ / 1e6, keep_first / 1e6, 100 * keep_drift_);
  }
  if (!recalibrated_from_.empty()) {
    std::cout << fmt::format(
        "predictions from a second calibration: keep had measured more than {:.0f}% off the "
        "prediction from {}\n",
        100 * kRecalibrateAt, recalibrated_from_);
  }
  if (std::any_of(rows.begin(), rows.end(), [](const Row& r) {
        return r.measured.extra.value("direct_io", true) == false;
      })) {
    std::cout << "buffered I/O (--allow-buffered-io): " << dir_
              << " refused O_DIRECT; the measured SSD path is the page cache, not the drive\n";
  }
}

Status Demo::WriteSummary(const std::vector<Row>& rows, int64_t budget) const {
  nlohmann::json out{{"model", trace_.header.model},
                     {"ssd_bandwidth_GBps", o_.ssd_bandwidth_GBps},
                     {"budget_bytes", budget},
                     {"rounds", o_.rounds},
                     {"keep_again_step_ns", keep_again_ns_},  // 0 with rounds > 1
                     {"drift", keep_drift_},
                     {"recalibrated", !recalibrated_from_.empty()},
                     {"report", report_.string()},
                     {"rows", nlohmann::json::array()}};
  for (const Row& r : rows) {
    out["rows"].push_back(
        {{"policy", r.policy},
         {"predicted_step_ns", r.predicted.metrics.step_time_ns},
         {"measured_step_ns", r.measured.metrics.step_time_ns},
         {"step_times_ns", r.measured.extra.value("step_times_ns", nlohmann::json::array())},
         {"round_step_times_ns", r.round_ns},
         {"error", analysis::RelativeError(static_cast<double>(r.predicted.metrics.step_time_ns),
                                           static_cast<double>(r.measured.metrics.step_time_ns))},
         {"peak_activation_bytes", r.measured.metrics.peak_activation_bytes},
         {"predicted_peak_activation_bytes", r.predicted.metrics.peak_activation_bytes},
         {"peak_device_bytes", r.measured.metrics.peak_gpu_bytes},
         {"predicted_peak_device_bytes", r.predicted.metrics.peak_gpu_bytes},
         {"budget_bytes", r.budget_bytes},
         {"ssd_bytes_written", r.measured.metrics.ssd_bytes_written},
         {"verified", r.verified ? nlohmann::json(*r.verified) : nlohmann::json(nullptr)}});
  }
  return traces::WriteJsonFile(out, o_.summary);
}

void Demo::Plots(const std::vector<Row>& rows) const {
  if (std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") != 0) {
    Progress(
        "plots skipped: /usr/bin/python3 with matplotlib not found (apt-get install "
        "python3-matplotlib)");
    return;
  }
  std::string memory = "", rok = "";
  for (const Row& r : rows) {
    const std::string p = r.policy;
    memory += fmt::format(" '{}={}'", p, File("timeline-measured-" + p + ".json"));
    rok += fmt::format(" '{}' '{}'", File("predicted-" + p + ".json"),
                       File("measured-" + p + ".json"));
    RunPlot(fmt::format("timelines --predicted '{}' --measured '{}' -o '{}'",
                        File("timeline-predicted-" + p + ".json"),
                        File("timeline-measured-" + p + ".json"), File("timelines-" + p + ".png")));
  }
  RunPlot("memory" + memory + " -o '" + File("memory.png") + "'");
  RunPlot("rok" + rok + " -o '" + File("rok.png") + "'");
  // SSD bandwidth of the row that wrote the most.
  std::string chosen = rows.back().policy;
  int64_t most = 0;
  for (const Row& r : rows) {
    if (r.measured.metrics.ssd_bytes_written > most) {
      most = r.measured.metrics.ssd_bytes_written;
      chosen = r.policy;
    }
  }
  if (most == 0) return;
  RunPlot(fmt::format("bandwidth --timeline '{}' --write-GBps {} --read-GBps {} -o '{}'",
                      File("timeline-measured-" + chosen + ".json"), hw_.storage.drive.write_GBps,
                      hw_.storage.drive.read_GBps, File("ssd-bandwidth.png")));
}

void Demo::RunPlot(const std::string& args) const {
  const std::string cmd = std::string("/usr/bin/python3 '") + PlotScript() + "' " + args;
  if (std::system(cmd.c_str()) != 0) Progress("plot failed: " + cmd);
}

}  // namespace ssdtrain::app::demo

#include "sim/fit.h"

#include <algorithm>
#include <cstdio>

namespace ssdtrain::sim {

const Prediction::StagePeak& WorstStage(const Prediction& p) {
  static const Prediction::StagePeak kNone{};
  if (p.stage_peaks.empty()) return kNone;
  return *std::max_element(p.stage_peaks.begin(), p.stage_peaks.end(),
                           [](const Prediction::StagePeak& a, const Prediction::StagePeak& b) {
                             return a.peak_gpu_bytes < b.peak_gpu_bytes;
                           });
}

bool FitsBudget(const Prediction& p, int64_t budget_bytes) {
  return OverBudgetBytes(p, budget_bytes) == 0;
}

int64_t OverBudgetBytes(const Prediction& p, int64_t budget_bytes) {
  int64_t worst = p.metrics.peak_gpu_bytes;
  for (const Prediction::StagePeak& s : p.stage_peaks) worst = std::max(worst, s.peak_gpu_bytes);
  return std::max<int64_t>(0, worst - budget_bytes);
}

namespace {

std::string Gb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GB", bytes / 1e9);
  return text;
}

}  // namespace

std::string HostAndDiskShortfall(const Prediction& p, const HardwareOptions& hw) {
  if (p.host_region_bytes > HostPinnedBytes(hw)) {
    return "its offload-host regions (" + Gb(static_cast<double>(p.host_region_bytes)) +
           ", one per micro-batch of the step) exceed the pinned host memory (" +
           Gb(static_cast<double>(HostPinnedBytes(hw))) + ")";
  }
  const double capacity = ArrayFor(hw, SlowestArray(hw)).capacity_TB * 1e12;
  if (capacity <= 0) return "";  // a config without a capacity: not checked
  if (static_cast<double>(p.metrics.ssd_bytes_written) > capacity) {
    return "its SSD files (" + Gb(static_cast<double>(p.metrics.ssd_bytes_written)) +
           ", every micro-batch's kept until the step ends) exceed the drives' " + Gb(capacity);
  }
  return "";
}

}  // namespace ssdtrain::sim

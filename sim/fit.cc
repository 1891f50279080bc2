#include "sim/fit.h"

#include <algorithm>

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

}  // namespace ssdtrain::sim

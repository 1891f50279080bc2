// The planner's one meaning of "fits" (DESIGN.md, "The planner's promise"): a
// prediction fits a budget when every pipeline stage's peak, holding its
// micro-batches in flight, is within it. The planner judges every candidate by
// the prediction it would return (per-stage plans, eviction points placed),
// so the plan it prints is the plan it judged.
#pragma once

#include <cstdint>
#include <string>

#include "sim/hardware.h"
#include "sim/simulate.h"

namespace ssdtrain::sim {

// The stage with the highest device peak (the first of equals).
const Prediction::StagePeak& WorstStage(const Prediction& p);
bool FitsBudget(const Prediction& p, int64_t budget_bytes);
// The step's offload-host regions (every micro-batch's) within the pinned
// host memory, and its SSD extents (every micro-batch's files live until the
// step ends) within the drives' capacity: else the plan cannot run, whatever
// the GPU holds. An empty string when both hold, else why not.
std::string HostAndDiskShortfall(const Prediction& p, const HardwareOptions& hw);
// How far the worst stage is over `budget_bytes` (0 when it fits).
int64_t OverBudgetBytes(const Prediction& p, int64_t budget_bytes);

}  // namespace ssdtrain::sim

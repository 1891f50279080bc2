// What `ssdtrain plan` prints beyond its headline (app/plan_cmd.cc): the SSD
// verdict, the --rok table, and how to replay a plan made from --trace.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "app/plan_input.h"
#include "sim/simulate.h"
#include "traces/plan.h"

namespace ssdtrain::app {

// What offloading asks of the SSD against what it gives, for the stage that
// would need the most write bandwidth, and why a plan writes nothing there.
std::string SsdVerdict(const sim::Prediction& p);

// The --rok table: one row per policy at the best layout (the planner's
// points, each judged by sim::FitsBudget); a row over the budget says by how much.
void PrintRok(const nlohmann::json& rok, int64_t budget_bytes, std::ostream& out);

// How to replay a plan made from --trace. The trace is one stage: with pp > 1
// it replays alone (`replay --trace` across pipeline ranks is refused, each
// rank needing its own stage's trace), and it stood for every stage in the
// search (OneStageProvider); with pp = 1, its dp ranks replay it at once.
std::string CapturedReplayLines(const PlanInput& in, const traces::Plan& plan,
                                const std::string& plan_path);

}  // namespace ssdtrain::app

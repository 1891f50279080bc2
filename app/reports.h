// Step reports (traces/report.h) from the executor's runs, the same shape as
// the simulator's predictions (sim::PredictionReport), for `ssdtrain compare`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "exec/replay.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/trace.h"

namespace ssdtrain::app {

traces::StepReport RunReport(const exec::ReplayResult& run, const traces::Trace& trace,
                             const traces::Plan& plan);

// What a rank's tensor-parallel collectives moved and took in its last step
// (the run file's `collectives`, per rank under `extra.ranks`): pieces and
// bytes sent and received, and by kind their count and wall time (`compare`
// reads them).
nlohmann::json CollectivesJson(const exec::CollectiveTraffic& c);
// ", collectives 20.8 ms (36 all_reduce)"; "" when there were none.
std::string CollectivesLine(const exec::CollectiveTraffic& c);

}  // namespace ssdtrain::app

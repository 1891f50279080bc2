// Step reports (traces/report.h) from the executor's runs, the same shape as
// the simulator's predictions (sim::PredictionReport), for `ssdtrain compare`.
#pragma once

#include <string>

#include "exec/replay.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/trace.h"

namespace ssdtrain::app {

traces::StepReport RunReport(const exec::ReplayResult& run, const traces::Trace& trace,
                             const traces::Plan& plan);

}  // namespace ssdtrain::app

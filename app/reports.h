// Step reports (traces/report.h) from the simulator's predictions and the
// executor's runs, so that both files have one shape for `ssdtrain compare`.
#pragma once

#include <string>

#include "exec/replay.h"
#include "sim/hardware.h"
#include "sim/simulate.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/trace.h"

namespace ssdtrain::app {

// `prediction.ops` are indexed by op id (-1 start: the op never ran, skipped).
traces::StepReport PredictionReport(const sim::Prediction& prediction, const traces::Trace& trace,
                                    const traces::Plan& plan, const sim::HardwareOptions& hw);
traces::StepReport RunReport(const exec::ReplayResult& run, const traces::Trace& trace,
                             const traces::Plan& plan);

}  // namespace ssdtrain::app

// An interleaved stage's peaks in the simulator's prediction
// (SimulateOptions::unrolled_interleaved_peaks): the simulated micro-batch's
// peak with the stage's whole step's static peak (its chunks unrolled as the
// replay runs them, traces/step_peaks.h) in place of the micro-batch's own,
// so that what I/O lag adds in the simulation stays. A stage trace that does
// not split into chunks keeps the closed form (traces::HeldByOtherChunks). A
// trace standing for stage `stage` (the middle stages') is unrolled in that
// stage's order.
#pragma once

#include <cstdint>

#include "sim/hardware.h"
#include "sim/simulate.h"
#include "sim/stage_sim.h"
#include "traces/plan.h"
#include "traces/status.h"

namespace ssdtrain::sim::detail {

// `in`: the stage's trace and plan; `r`: its simulated micro-batch; `layout`:
// the step's plan (pp, num_micro_batches, schedule, virtual_stages). Sets
// peak->peak_gpu_bytes and peak_activation_bytes.
Status InterleavedPeaks(const StageInput& in, int64_t stage, const StageResult& r,
                        const traces::Plan& layout, const HardwareOptions& hw,
                        Prediction::StagePeak* peak);

}  // namespace ssdtrain::sim::detail

// Calibrate's copy benchmark (exec/calibrate_copies.cc): each way's
// bandwidth at the sizes of CopySizes(options.traces).
#pragma once

#include "exec/calibrate.h"
#include "exec/device.h"
#include "traces/status.h"

namespace ssdtrain::exec::detail {

// Sets out->d2h_GBps and out->h2d_GBps: the bytes of one step's copies
// (CopySizes, each size as often as the step copies it, scaled down past
// 256 MiB) queued back to back on the copy stream as a replay queues them,
// over their time; the median of options.repeats batches after a warm-up.
Status MeasureCopies(Device& device, const CalibrationOptions& options, Calibration* out);

}  // namespace ssdtrain::exec::detail

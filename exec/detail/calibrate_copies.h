// Calibrate's copy benchmark (exec/calibrate_copies.cc): each way's
// bandwidth at the sizes of CopySizes(options.traces); and the timing
// helpers every calibrate measurement uses.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "exec/calibrate.h"
#include "exec/device.h"
#include "traces/status.h"

namespace ssdtrain::exec::detail {

using CalibrationClock = std::chrono::steady_clock;

// The median of `v` (the upper one of an even count); 0 when empty.
inline int64_t Median(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

inline int64_t ElapsedNs(CalibrationClock::time_point since) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(CalibrationClock::now() - since)
      .count();
}

// Sets out->d2h_GBps and out->h2d_GBps: the bytes of one step's copies
// (CopySizes, each size as often as the step copies it, scaled down past
// 256 MiB) queued back to back on the copy stream as a replay queues them,
// over their time; the median of options.repeats batches after a warm-up.
Status MeasureCopies(Device& device, const CalibrationOptions& options, Calibration* out);

}  // namespace ssdtrain::exec::detail

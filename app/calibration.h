// Turning the executor's measurements (exec/calibrate.h) into a hardware
// config for the simulator (sim/hardware.h): the app is where the two meet.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exec/calibrate.h"
#include "sim/hardware.h"

namespace ssdtrain::app {

struct CalibrationSettings {
  std::vector<std::string> dirs;  // where the SSD path was measured, one per drive
  std::string base;               // the hardware config whose unmeasured fields are kept
  int64_t block_size = int64_t{4} << 20;
  int queue_depth = 32;
  int ranks = 1;  // that measured at once, their figures averaged (mpirun -np N)
  // Measured between those ranks (app/interconnect_calibration.h); else the
  // base's interconnect stays.
  std::optional<sim::InterconnectOptions> interconnect = std::nullopt;
};

// Folds the measurements into `base`: GEMM peak and efficiency curve, memory
// bandwidth, copy bandwidth, one storage array of the measured directories'
// drives (their rates together, shared evenly), the measured op times, and the interconnect when
// measured.
sim::HardwareOptions ApplyCalibration(sim::HardwareOptions base, const exec::Calibration& c,
                                      const CalibrationSettings& settings);

}  // namespace ssdtrain::app

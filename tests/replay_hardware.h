// The hardware the multi-rank replay tests plan with: the cpu-local preset
// with the CPU backend's memory as calibrate records it (64-byte arena
// granularity, the GEMM workspace counted), so that a plan's peaks are the
// replay's to the byte.
#pragma once

#include <string>

#include "sim/hardware.h"
#include "traces/io.h"
#include "traces/status.h"

namespace ssdtrain::testing {

// Writes that hardware config, made from the preset at `preset`, to `path`.
inline Status WriteReplayHardware(const std::string& preset, const std::string& path) {
  SSDTRAIN_ASSIGN_OR_RETURN(sim::HardwareOptions hw, sim::LoadHardware(preset));
  hw.gpu.allocation_alignment_bytes = 64;
  hw.gpu.replay_workspace = true;
  return traces::WriteJsonFile(sim::ToJson(hw), path);
}

}  // namespace ssdtrain::testing

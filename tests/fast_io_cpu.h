// The CPU backend's hardware as calibrate records its memory (64-byte arena
// granularity, the GEMM workspace counted) and its run-ahead (the replay issues
// op i when op i - 2 has ended), with I/O links far faster than any op: the
// setting in which predicted and replayed memory peaks agree to the byte
// (memory_agreement_test.cc, moe_replay_test.cc).
#pragma once

#include <gtest/gtest.h>

#include "cmake/build_paths.h"
#include "exec/replay.h"
#include "sim/hardware.h"

namespace ssdtrain::testing {

inline sim::HardwareOptions FastIoCpu() {
  auto hw =
      sim::LoadHardware(std::string(ConfiguredSourceDir()) + "/configs/hardware/cpu-local.json");
  EXPECT_TRUE(hw.ok()) << hw.status().message();
  hw->gpu.allocation_alignment_bytes = 64;
  hw->gpu.replay_workspace = true;
  hw->gpu.issue_ahead_ops = exec::ReplayOptions{}.max_ops_ahead;
  hw->host_link.d2h_GBps = hw->host_link.h2d_GBps = 1e6;
  hw->host_link.latency_us = 0;
  hw->host_memory.bandwidth_GBps = 1e6;
  hw->storage.drive.read_GBps = hw->storage.drive.write_GBps = 1e6;
  hw->storage.drive.read_latency_us = hw->storage.drive.write_latency_us = 0;
  return *hw;
}

}  // namespace ssdtrain::testing

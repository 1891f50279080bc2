// Replay()'s set-up, step by step (exec/replay.cc runs them in order):
// every refusal before a device or a file exists (Prepare), the device with
// its GEMM workspace and the budget (SetUpDevice), the storage path, the
// pinned staging and the offload engine (StartEngine). Internal to exec.
#pragma once

#include <memory>
#include <string>

#include "exec/cufile.h"
#include "exec/detail/host_staging.h"
#include "exec/detail/rank_place.h"
#include "exec/device.h"
#include "exec/offload_engine.h"
#include "exec/replay.h"
#include "traces/dp_buckets.h"
#include "traces/storage_plan.h"
#include "traces/whole_step.h"

namespace ssdtrain::exec::detail {

// What the replay checks before a device or a file exists, and what it
// works out on the way: the stage's whole step, the rank's place, what the
// plan means, and the plan's static peaks.
struct Prepared {
  traces::WholeStep whole;
  traces::DdpImpl ddp{};
  RankPlace place;
  traces::StoragePlan storage_plan;
};

Result<Prepared> Prepare(const traces::Trace& one_micro_batch, const traces::Plan& step_plan,
                         const ReplayOptions& options, const std::string& plan_source);

// The device (made, or the caller's), its GEMM workspace reserved, and the
// budget the plan must fit with it; still no file exists.
struct DeviceSetup {
  std::unique_ptr<Device> made;  // null with the caller's device
  Device* device = nullptr;
  int64_t workspace = 0;
  int64_t budget = 0;
  traces::StaticPeaks planned;  // rounded as this device allocates
};

Result<DeviceSetup> SetUpDevice(const traces::Trace& trace, const traces::Plan& plan,
                                const traces::StoragePlan& storage_plan,
                                const ReplayOptions& options, const std::string& plan_source);

// The storage path (cuFile or the bounce through pinned staging), the
// staging, and the offload engine over the plan's directories. Members in
// the order they must outlive one another.
struct EngineSetup {
  StoragePath storage_path;
  std::unique_ptr<HostStaging> staging;
  std::unique_ptr<OffloadEngine> engine;
};

Result<EngineSetup> StartEngine(const traces::Plan& plan, const ReplayOptions& options,
                                Device& device);

}  // namespace ssdtrain::exec::detail

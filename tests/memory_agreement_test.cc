// One meaning of a plan, checked end to end: the simulator and the executor
// read the same resolved plan (traces/storage_plan.h), so for the same plan they
// hold the same storages at the same points and their memory peaks agree to
// the byte. The replay runs for real on the CPU backend with offload files.
// To make its evictions land where the model puts them, the replay waits for
// each write after every op (ReplayOptions::wait_for_writes) and the simulated
// links are fast enough that every write lands before the next op starts.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "exec/replay.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "tests/fast_io_cpu.h"
#include "tests/micro_gpt.h"
#include "tests/micro_trace.h"
#include "traces/storage_plan.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;

// A two-block fp32 GPT small enough to replay in a fraction of a second.
traces::Trace MicroGpt() { return testing::BuildMicroTrace(testing::MicroGptConfig()); }

using testing::FastIoCpu;

// A verified CPU replay that waits for each write after every op, so that
// evictions land where the simulator puts them.
exec::ReplayOptions ExactReplay(const std::string& dir) {
  exec::ReplayOptions ro;
  ro.dirs = {dir};
  ro.backend = exec::BackendChoice::kCpu;
  ro.steps = 1;
  ro.verify = true;
  ro.wait_for_writes = true;
  ro.device_memory_bytes = int64_t{64} << 20;
  return ro;
}

class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ssdtrain-memory-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};
class MemoryAgreement : public ScratchDirTest, public ::testing::WithParamInterface<std::string> {};
using BudgetPromise = ScratchDirTest;
using WholeStepMemory = ScratchDirTest;
using EvictionPoints = ScratchDirTest;

TEST_P(MemoryAgreement, PredictedPeaksEqualTheReplaysToTheByte) {
  const traces::Trace trace = MicroGpt();
  const sim::HardwareOptions hw = FastIoCpu();
  sim::PolicyOptions po;
  po.min_offload_bytes = 0;  // micro-gpt's tensors are all small: move them anyway
  auto plan = sim::MakeFixedPlan(GetParam(), trace, hw, sim::BasePlan(trace), po);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto predicted = sim::Simulate(trace, *plan, hw);
  ASSERT_TRUE(predicted.ok()) << predicted.status().message();

  const exec::ReplayOptions ro = ExactReplay(dir_.string());
  auto run = exec::Replay(trace, *plan, ro, GetParam());
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_TRUE(run->verified);
  EXPECT_EQ(predicted->metrics.peak_activation_bytes, run->metrics.peak_activation_bytes);
  EXPECT_EQ(predicted->metrics.peak_gpu_bytes, run->metrics.peak_gpu_bytes);
  // With instant I/O and nothing recomputed both equal the static peaks of
  // the resolved plan (plus the workspace on the device); recompute rebuilds
  // storages and scratch outputs the static count leaves out, so there they
  // are a lower bound.
  auto resolved = traces::ResolvePlan(trace, *plan, GetParam());
  ASSERT_TRUE(resolved.ok());
  const traces::StaticPeaks peaks = traces::ComputeStaticPeaks(trace, *resolved, 64);
  if (GetParam().rfind("recompute", 0) == 0) {
    EXPECT_GE(run->metrics.peak_activation_bytes, peaks.activation_bytes);
    EXPECT_GE(run->metrics.peak_gpu_bytes, peaks.device_bytes + run->workspace_bytes);
  } else {
    EXPECT_EQ(run->metrics.peak_activation_bytes, peaks.activation_bytes);
    EXPECT_EQ(run->metrics.peak_gpu_bytes, peaks.device_bytes + run->workspace_bytes);
  }
}

// A whole step of three micro-batches under 1F1B on one stage: the replay runs
// them one after another (traces::UnrollStep), the simulator composes them
// (one in flight at a time, MicroBatchesInFlight); both hold one micro-batch's
// activations at a time, so the peaks still agree to the byte, and the step
// writes three micro-batches' worth.
TEST_F(WholeStepMemory, OneStageHoldsOneMicroBatchAtATimeOnBothSides) {
  const traces::Trace trace = MicroGpt();
  const sim::HardwareOptions hw = FastIoCpu();
  sim::PolicyOptions po;
  po.min_offload_bytes = 0;
  auto plan = sim::MakeFixedPlan("offload-ssd", trace, hw, sim::BasePlan(trace), po);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  plan->num_micro_batches = 3;
  auto predicted = sim::Simulate(trace, *plan, hw);
  ASSERT_TRUE(predicted.ok()) << predicted.status().message();
  const exec::ReplayOptions ro = ExactReplay(dir_.string());
  auto run = exec::Replay(trace, *plan, ro, "offload-ssd, 3 micro-batches");
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_TRUE(run->verified);
  EXPECT_EQ(predicted->metrics.peak_activation_bytes, run->metrics.peak_activation_bytes);
  EXPECT_EQ(predicted->metrics.peak_gpu_bytes, run->metrics.peak_gpu_bytes);
  EXPECT_EQ(predicted->metrics.ssd_bytes_written, run->metrics.ssd_bytes_written);
  auto one = traces::ResolvePlan(trace, *plan, "offload-ssd");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(run->metrics.ssd_bytes_written, 3 * one->ssd_bytes);
}

// The budget is a promise. Every activation of micro-gpt offloaded through an
// SSD path held to 2 MB/s: forward produces far faster than the path drains
// (its writes take about a hundred times its compute here, ten times under ASan
// on a loaded machine), so without a budget writes queue and their storages stay
// resident. With a
// budget just above what the plan needs with instant I/O (its static peak plus
// the workspace plus the largest storage), ops wait for writes to land instead:
// the measured device peak stays within the budget and the wait is exposed I/O.
TEST_F(BudgetPromise, SlowWritesWaitInsteadOfPassingTheBudget) {
  const traces::Trace trace = MicroGpt();
  const sim::HardwareOptions hw = FastIoCpu();
  sim::PolicyOptions po;
  po.min_offload_bytes = 0;
  auto plan = sim::MakeFixedPlan("offload-ssd", trace, hw, sim::BasePlan(trace), po);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto resolved = traces::ResolvePlan(trace, *plan, "offload-ssd");
  ASSERT_TRUE(resolved.ok());
  int64_t largest = 0;
  for (const traces::StorageInfo& s : resolved->storages) largest = std::max(largest, s.bytes);

  exec::ReplayOptions ro;
  ro.dirs = {dir_.string()};
  ro.backend = exec::BackendChoice::kCpu;
  ro.steps = 1;
  ro.verify = true;
  ro.ssd_bandwidth_GBps = 0.002;
  ro.device_memory_bytes = int64_t{64} << 20;
  ro.memory_budget_bytes = 0;  // none: writes pile up
  auto free_run = exec::Replay(trace, *plan, ro, "offload-ssd");
  ASSERT_TRUE(free_run.ok()) << free_run.status().message();
  const int64_t budget = traces::ComputeStaticPeaks(trace, *resolved, 64).device_bytes +
                         free_run->workspace_bytes + traces::DeviceBytes(largest, 64);
  // Not a timing verdict: at 2 MB/s the writes cannot keep up with any build's
  // compute (a skip here would make the verdict depend on the machine's speed).
  ASSERT_GT(free_run->metrics.peak_gpu_bytes, budget)
      << "the writes kept up with compute even at 2 MB/s: nothing to hold back";

  plan->memory_budget_bytes = budget;
  ro.memory_budget_bytes = -1;  // the plan's
  auto held = exec::Replay(trace, *plan, ro, "offload-ssd");
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_TRUE(held->verified);
  EXPECT_EQ(held->memory_budget_bytes, budget);
  EXPECT_LE(held->metrics.peak_gpu_bytes, budget);
  EXPECT_GT(held->metrics.exposed_io_ns, 0);

  // The simulator under the same cap and budget keeps the same promise.
  sim::HardwareOptions capped = hw;
  capped.storage.drive.read_GBps = capped.storage.drive.write_GBps = 0.002;
  auto predicted = sim::Simulate(trace, *plan, capped);
  ASSERT_TRUE(predicted.ok()) << predicted.status().message();
  EXPECT_LE(predicted->metrics.peak_gpu_bytes, budget);
  EXPECT_GT(predicted->metrics.exposed_io_ns, 0);
}

// Planned eviction points make memory a property of the plan, not of the SSD:
// every activation of micro-gpt offloaded, its eviction points placed where the
// simulator has each write landing through a 200 MB/s path (sim::PlaceEvictions:
// on cpu-local's figures half the writes land before backward; the others are
// kept). The replay, not waiting for writes, holds each storage until its point
// whatever its SSD does: through the same 200 MB/s cap, through a 2 MB/s one
// (ops wait at the points: exposed I/O) and with no cap at all, the measured
// activation and device peaks equal the prediction to the byte.
TEST_F(EvictionPoints, CappedAndUncappedReplaysHoldThePredictedMemory) {
  const traces::Trace trace = MicroGpt();
  sim::HardwareOptions capped = FastIoCpu();
  capped.storage.drive.read_GBps = capped.storage.drive.write_GBps = 0.2;
  sim::PolicyOptions po;
  po.min_offload_bytes = 0;
  auto all = sim::MakeFixedPlan("offload-ssd", trace, capped, sim::BasePlan(trace), po);
  ASSERT_TRUE(all.ok()) << all.status().message();
  auto plan = sim::PlaceEvictions(trace, *all, capped);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  int points = 0;
  for (const traces::Placement& p : plan->placements) points += p.evict_before != traces::kNoOp;
  ASSERT_GT(points, 0);
  auto predicted = sim::Simulate(trace, *plan, capped);
  ASSERT_TRUE(predicted.ok()) << predicted.status().message();
  // Without the points the simulated memory is the same: they sit where the
  // writes land.
  auto unpinned = sim::Simulate(trace, *all, capped);
  ASSERT_TRUE(unpinned.ok());
  EXPECT_EQ(predicted->metrics.peak_activation_bytes, unpinned->metrics.peak_activation_bytes);

  for (const double cap : {0.2, 0.002, 0.0}) {
    SCOPED_TRACE("SSD cap " + std::to_string(cap) + " GB/s");
    exec::ReplayOptions ro;
    ro.dirs = {dir_.string()};
    ro.backend = exec::BackendChoice::kCpu;
    ro.steps = 1;
    ro.verify = true;
    ro.ssd_bandwidth_GBps = cap;
    ro.device_memory_bytes = int64_t{64} << 20;
    auto run = exec::Replay(trace, *plan, ro, "offload-ssd with eviction points");
    ASSERT_TRUE(run.ok()) << run.status().message();
    EXPECT_TRUE(run->verified);
    EXPECT_EQ(predicted->metrics.peak_activation_bytes, run->metrics.peak_activation_bytes);
    EXPECT_EQ(predicted->metrics.peak_gpu_bytes, run->metrics.peak_gpu_bytes);
    if (cap == 0.002) {
      EXPECT_GT(run->metrics.exposed_io_ns, 0);
    }
  }
}

// Several drives, one meaning (traces/drives.h): each tensor striped over 2 or
// 4 directories from its placement's device, at 4 KiB stripes so that
// micro-gpt's tensors span several drives. The simulator's bytes per drive
// for a whole step of three micro-batches equal those the replay's engine
// wrote into each directory, to the byte; the replay verifies every tensor
// and leaves nothing in any directory.
class DriveAgreement : public ScratchDirTest, public ::testing::WithParamInterface<int> {};

TEST_P(DriveAgreement, PredictedBytesPerDriveEqualTheReplaysToTheByte) {
  const int n = GetParam();
  const traces::Trace trace = MicroGpt();
  sim::HardwareOptions hw = FastIoCpu();
  hw.storage.arrays_drives = {n};
  hw.storage.drive.request_KiB = 4;
  sim::PolicyOptions po;
  po.min_offload_bytes = 0;
  auto plan = sim::MakeFixedPlan("offload-ssd", trace, hw, sim::BasePlan(trace), po);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  plan->num_micro_batches = 3;
  plan->storage = sim::DriveLayoutOf(hw);
  ASSERT_EQ(plan->storage.stripe_bytes, 4096);
  int i = 0;
  for (traces::Placement& p : plan->placements) {
    if (p.action == traces::TensorAction::kOffloadSsd) p.device = i++ % n;
  }
  auto predicted = sim::Simulate(trace, *plan, hw);
  ASSERT_TRUE(predicted.ok()) << predicted.status().message();
  const std::vector<int64_t>& want = predicted->metrics.ssd_bytes_written_per_drive;
  ASSERT_EQ(want.size(), static_cast<size_t>(n));
  int64_t sum = 0;
  for (const int64_t b : want) {
    EXPECT_GT(b, 0);
    sum += b;
  }
  EXPECT_EQ(sum, predicted->metrics.ssd_bytes_written);

  exec::ReplayOptions ro = ExactReplay("");
  ro.dirs.clear();
  for (int d = 0; d < n; ++d) {
    ro.dirs.push_back((dir_ / ("ssd" + std::to_string(d))).string());
    fs::create_directories(ro.dirs.back());
  }
  auto run = exec::Replay(trace, *plan, ro, "offload-ssd over " + std::to_string(n) + " drives");
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_TRUE(run->verified);
  EXPECT_EQ(run->metrics.ssd_bytes_written_per_drive, want);
  EXPECT_EQ(run->metrics.ssd_bytes_written, predicted->metrics.ssd_bytes_written);
  for (const std::string& d : ro.dirs) EXPECT_TRUE(fs::is_empty(d)) << d;
}

INSTANTIATE_TEST_SUITE_P(Drives, DriveAgreement, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "drives"; });

INSTANTIATE_TEST_SUITE_P(Policies, MemoryAgreement,
                         ::testing::Values("keep", "offload-ssd", "offload-host", "ssdtrain",
                                           "recompute-full", "recompute-selective"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace ssdtrain

// What else a plan must fit beside the GPU (sim/fit.h): pinned host memory for
// every micro-batch's offload-host region, and disk for every micro-batch's files.
#include "sim/fit.h"

#include <gtest/gtest.h>

#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/tests/test_traces.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim {
namespace {

using testing::ChainTrace;
using testing::TestHardware;

constexpr int64_t kGiB = int64_t{1} << 30;

// Four 256 MiB activations; 1 GiB of pinned memory. One micro-batch may put
// all four on the host; a step of 4 micro-batches holds four regions (the
// replay gives each micro-batch its own), so each gets 256 MiB: one tensor.
TEST(Fit, OffloadHostBudgetsThePinnedMemoryOverTheStepsMicroBatches) {
  const traces::Trace t = ChainTrace(4, kGiB / 4, 1000, 1000);
  HardwareOptions hw = TestHardware(1, 1, 10);
  hw.host_memory.pinned_GiB = 1;
  traces::Plan base = BasePlan(t);
  auto one = MakeFixedPlan("offload-host", t, hw, base);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->placements.size(), 4u);
  base.num_micro_batches = 4;
  auto four = MakeFixedPlan("offload-host", t, hw, base);
  ASSERT_TRUE(four.ok());
  ASSERT_EQ(four->placements.size(), 1u);
  auto p = Simulate(t, *four, hw);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->host_region_bytes, 4 * (kGiB / 4));
  EXPECT_EQ(HostAndDiskShortfall(*p, hw), "");
  // The one-micro-batch plan run over four micro-batches needs 4 GiB pinned.
  traces::Plan too_much = *one;
  too_much.num_micro_batches = 4;
  auto over = Simulate(t, too_much, hw);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->host_region_bytes, 4 * kGiB);
  EXPECT_EQ(HostAndDiskShortfall(*over, hw),
            "its offload-host regions (4.3 GB, one per micro-batch of the step) exceed the "
            "pinned host memory (1.1 GB)");
}

// Every micro-batch's SSD files live until the step ends: 4 micro-batches each
// writing two 256 MiB tensors (the last two are forwarded to backward, never
// written) put 2.1 GB on a 2 GB drive.
TEST(Fit, EveryMicroBatchsSsdFilesMustFitTheDrives) {
  const traces::Trace t = ChainTrace(4, kGiB / 4, 1000, 1000);
  HardwareOptions hw = TestHardware(1, 1, 10);
  hw.storage.drive.capacity_TB = 0.002;
  traces::Plan base = BasePlan(t);
  base.num_micro_batches = 4;
  auto plan = MakeFixedPlan("offload-ssd", t, hw, base);
  ASSERT_TRUE(plan.ok());
  auto p = Simulate(t, *plan, hw);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->metrics.ssd_bytes_written, 4 * 2 * (kGiB / 4));
  EXPECT_EQ(HostAndDiskShortfall(*p, hw),
            "its SSD files (2.1 GB, every micro-batch's kept until the step ends) exceed the "
            "drives' 2.0 GB");
  hw.storage.drive.capacity_TB = 1;
  EXPECT_EQ(HostAndDiskShortfall(*p, hw), "");
}

}  // namespace
}  // namespace ssdtrain::sim

// The `ssdtrain` policy's adaptive rule (sim/policy.h AdaptiveFirstKeptLayer):
// it offloads only what the drives can write behind the forward pass, so the
// plan's need (traces::RequiredWriteGBps) stays within what they give.
#include <gtest/gtest.h>

#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/tests/test_traces.h"

namespace ssdtrain::sim {
namespace {

// Four layers of 1 s forward ops, each saving a 1 GB activation: T_fwd = 4 s,
// layer p starting at p s.
traces::Trace FourLayers() {
  return testing::ChainTrace(4, 1'000'000'000, 1'000'000'000, 1'000'000'000);
}

TEST(AdaptiveRule, OffloadsWhatTheDrivesWriteBehindTheForwardPass) {
  const traces::Trace t = FourLayers();
  // 0.5 GB/s: layers 0 and 1 (2 GB in 4 s; layer 1's 1 GB in the 3 s from its
  // start) fit; layer 2 would make 3 GB in 4 s. FlashTrain's rule, which counts
  // backward (2x forward) as write time too, kept only layer 3: 3 GB over a 4 s
  // forward pass asks 0.75 GB/s of 0.5.
  EXPECT_EQ(AdaptiveFirstKeptLayer(t, testing::TestHardware(0.5, 10, 100), {}), 2);
  // 0.25 GB/s: layer 0's 1 GB in 4 s only.
  EXPECT_EQ(AdaptiveFirstKeptLayer(t, testing::TestHardware(0.25, 10, 100), {}), 1);
  // Under 0.25 GB/s not even layer 0's write hides: nothing is offloaded.
  EXPECT_EQ(AdaptiveFirstKeptLayer(t, testing::TestHardware(0.2, 10, 100), {}), 0);
  // The write rate is the slowest of the path: a 0.5 GB/s link to the host
  // bounds 10 GB/s drives.
  EXPECT_EQ(AdaptiveFirstKeptLayer(t, testing::TestHardware(10, 10, 0.5), {}), 2);
}

TEST(AdaptiveRule, ThePlansNeedIsWithinTheDrives) {
  const traces::Trace t = FourLayers();
  for (double write_GBps : {0.25, 0.5, 0.75}) {
    const HardwareOptions hw = testing::TestHardware(write_GBps, 10, 100);
    auto plan = MakeFixedPlan("ssdtrain", t, hw, BasePlan(t));
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    ASSERT_FALSE(plan->placements.empty()) << write_GBps;
    auto p = Simulate(t, *plan, hw);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_GT(p->metrics.ssd_bytes_written, 0) << write_GBps;
    EXPECT_LE(p->metrics.required_ssd_write_GBps, write_GBps) << write_GBps;
    EXPECT_EQ(p->metrics.exposed_io_ns, 0) << write_GBps;
  }
}

}  // namespace
}  // namespace ssdtrain::sim

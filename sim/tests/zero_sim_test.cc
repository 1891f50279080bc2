// ZeRO-2/3's collectives in the stage simulator (sim/detail/stage_simulator.h,
// StartSideItem): memory counted at issue, as the static walk counts it, to
// the byte; the gathers and reduce-scatters beside compute, one at a time on
// the link, their readers waiting for them; a slow link exposed.
#include <gtest/gtest.h>

#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "sim/op_cost.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/stage_sim.h"
#include "sim/tests/test_traces.h"
#include "traces/collective_kind.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim {
namespace {

// Llama-3-8B's shapes at 4 layers, tp 1, s 512, ZeRO `stage` over 8 ranks.
traces::Trace Llama(int64_t stage, int64_t prefetch = 1, bool defer = false) {
  Result<models::ModelConfig> c = models::LoadModelConfig(std::string(ConfiguredSourceDir()) +
                                                          "/configs/models/llama-3-8b.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  models::ModelConfig m = *c;
  m.layers = 4;
  m.seq_len = 512;
  m.tp = 1;
  m.sequence_parallel = false;
  m.dp = 8;
  m.zero_stage = stage;
  m.zero_prefetch = prefetch;
  m.zero_defer_grad_sync = defer;
  Result<traces::Trace> t = models::BuildTrace(m, 0);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : traces::Trace{};
}

struct Times {
  int64_t compute = 0, side = 0;
};

Times OpTimes(const traces::Trace& t, const HardwareOptions& hw) {
  const OpCostModel cost(hw, t.header);
  Times out;
  for (const traces::Op& op : t.ops) (op.stream != 0 ? out.side : out.compute) += cost.OpTimeNs(op);
  return out;
}

TEST(ZeroSim, PeaksAreTheStaticWalksToTheByte) {
  const HardwareOptions hw = testing::TestHardware(2, 2, 20);
  for (int64_t stage : {2, 3}) {
    for (int64_t prefetch : {0, 1, 2}) {
      SCOPED_TRACE("zero " + std::to_string(stage) + " prefetch " + std::to_string(prefetch));
      const traces::Trace t = Llama(stage, prefetch);
      testing::ExpectPeaksAreTheStaticWalks(t, BasePlan(t), hw);
    }
  }
}

TEST(ZeroSim, GathersAndReduceScattersRunBesideCompute) {
  // A 100 GB/s link: each layer's gather takes less than its compute, so
  // the step is compute plus what is exposed, far below compute plus the
  // collectives in a row.
  HardwareOptions hw = testing::TestHardware(2, 2, 20);
  hw.interconnect.scale_out = LinkTier{100, 0, 0};
  const traces::Trace t = Llama(3);
  const Times times = OpTimes(t, hw);
  ASSERT_GT(times.side, 0);
  Result<StageResult> r = SimulateStage(t, BasePlan(t), hw);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->side_collective_ns, times.side);  // one at a time, none twice
  EXPECT_GE(r->step_ns, times.compute);
  EXPECT_LT(r->step_ns, times.compute + times.side);
  EXPECT_EQ(r->step_ns, times.compute + r->exposed_collective_ns + r->exposed_io_ns);
}

TEST(ZeroSim, ASlowLinkIsExposed) {
  // 0.1 GB/s: the gathers take far longer than compute; compute waits for
  // each, so the step is at least the link's busy time.
  HardwareOptions hw = testing::TestHardware(2, 2, 20);
  hw.interconnect.scale_out = LinkTier{0.1, 0, 0};
  const traces::Trace t = Llama(3);
  const Times times = OpTimes(t, hw);
  Result<StageResult> r = SimulateStage(t, BasePlan(t), hw);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->step_ns, times.side);
  EXPECT_GT(r->exposed_collective_ns, times.side / 2);
  EXPECT_EQ(r->step_ns, times.compute + r->exposed_collective_ns + r->exposed_io_ns);
}

// Deferred gradient sync: the reduce-scatters, optimizer-phase ops, wait
// out the backward and are the optimizer part's (optimizer_ns runs from the
// passes' end), so a whole step of m micro-batches pays them once: step(m) −
// step(1) is (m − 1) passes, and the network lane counts them once.
TEST(ZeroSim, DeferredReduceScattersArePaidOnceAStep) {
  HardwareOptions hw = testing::TestHardware(2, 2, 20);
  hw.interconnect.scale_out = LinkTier{1, 0, 0};  // slow: the reduce-scatters show
  const traces::Trace t = Llama(3, 1, /*defer=*/true);
  ASSERT_TRUE(t.header.zero_defer_grad_sync);
  const OpCostModel cost(hw, t.header);
  int64_t scatters = 0;
  for (const traces::Op& op : t.ops) {
    if (op.name.ends_with(traces::kZeroReduceScatterSuffix)) scatters += cost.OpTimeNs(op);
  }
  ASSERT_GT(scatters, 0);
  Result<StageResult> r = SimulateStage(t, BasePlan(t), hw);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->optimizer_collective_ns, scatters);
  EXPECT_GE(r->optimizer_ns, r->optimizer_compute_ns + scatters / 2);
  traces::Plan one = BasePlan(t), four = BasePlan(t);
  four.num_micro_batches = 4;
  Result<Prediction> p1 = Simulate(t, one, hw), p4 = Simulate(t, four, hw);
  ASSERT_TRUE(p1.ok()) << p1.status().ToString();
  ASSERT_TRUE(p4.ok()) << p4.status().ToString();
  EXPECT_EQ(p1->optimizer_ns, r->optimizer_ns);
  EXPECT_EQ(p4->metrics.step_time_ns - p1->metrics.step_time_ns,
            3 * (p1->metrics.step_time_ns - p1->optimizer_ns));
  const std::string network(traces::ToString(traces::Lane::kNetwork));
  const std::string compute(traces::ToString(traces::Lane::kCompute));
  EXPECT_EQ(p4->lane_busy_ns.at(network) - p1->lane_busy_ns.at(network),
            3 * (p1->lane_busy_ns.at(network) - scatters));
  EXPECT_EQ(p4->lane_busy_ns.at(compute) - p1->lane_busy_ns.at(compute),
            3 * (p1->lane_busy_ns.at(compute) - r->optimizer_compute_ns));
}

}  // namespace
}  // namespace ssdtrain::sim

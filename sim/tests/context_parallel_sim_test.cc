// Context parallelism's ring in the stage simulator: each exchange priced as
// one message between neighbours of the cp group where those ranks sit
// (inside a domain on its p2p link, else on the network); memory counted at
// issue, as the static walk counts it, to the byte; the exchanges beside the
// attention steps, one at a time on the cp link, a step waiting only for the
// K/V it reads; a slow link exposed.
#include <gtest/gtest.h>

#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "sim/op_cost.h"
#include "sim/policy.h"
#include "sim/stage_sim.h"
#include "sim/tests/test_traces.h"
#include "sim/topology.h"
#include "traces/collective_kind.h"
#include "traces/duration.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim {
namespace {

// Llama-3-8B's shapes at 2 layers, sequence 8192, flash attention, tp `tp`
// (with sequence parallelism), cp `cp`.
traces::Trace Llama(int64_t cp, int64_t tp = 1) {
  Result<models::ModelConfig> c = models::LoadModelConfig(std::string(ConfiguredSourceDir()) +
                                                          "/configs/models/llama-3-8b.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  models::ModelConfig m = *c;
  m.layers = 2;
  m.seq_len = 8192;
  m.tp = tp;
  m.sequence_parallel = tp > 1;
  m.cp = cp;
  m.attention = "flash";
  Result<traces::Trace> t = models::BuildTrace(m, 0);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : traces::Trace{};
}

struct Times {
  int64_t compute = 0, ring = 0;
};

Times OpTimes(const traces::Trace& t, const HardwareOptions& hw) {
  const OpCostModel cost(hw, t.header);
  Times out;
  for (const traces::Op& op : t.ops) {
    (op.stream == traces::kCpRingStream ? out.ring : out.compute) += cost.OpTimeNs(op);
  }
  return out;
}

const traces::Op& FirstRingOp(const traces::Trace& t) {
  for (const traces::Op& op : t.ops) {
    if (op.stream == traces::kCpRingStream) return op;
  }
  ADD_FAILURE() << "no ring op";
  return t.ops.front();
}

// On 8-GPU domains: tp 4 × cp 2 puts the cp pair (ranks 0 and 4) in one
// domain, on scale_up's p2p link; tp 8 × cp 2 puts it (ranks 0 and 8) in two,
// on the network. Each exchange is one message: S / p2p GBps + the tier's
// latency, plus the per-op overhead.
TEST(ContextParallelSim, AnExchangeIsPricedWhereTheRingsRanksSit) {
  HardwareOptions hw = testing::TestHardware(2, 2, 20);
  hw.gpus_per_node = 8;
  hw.interconnect.domain_gpus = 8;
  hw.interconnect.scale_up = LinkTier{450, 200, 2};
  hw.interconnect.scale_out = LinkTier{50, 0, 10};
  for (int64_t tp : {4, 8}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const traces::Trace t = Llama(2, tp);
    const traces::Op& op = FirstRingOp(t);
    const int64_t bytes = traces::CollectivePayloadBytes(op);
    EXPECT_EQ(bytes, 2 * (8192 / 2) * 1 * (8 / tp) * 128 * 2);
    const bool inside = tp == 4;
    const double seconds = inside ? static_cast<double>(bytes) / 200e9 + 2e-6
                                  : static_cast<double>(bytes) / 50e9 + 10e-6;
    const int64_t overhead = traces::CeilSecondsToNs(hw.gpu.op_overhead_us * 1e-6);
    EXPECT_EQ(OpCostModel(hw, t.header).OpTimeNs(op), traces::CeilSecondsToNs(seconds) + overhead);
    EXPECT_EQ(OpCostModel(hw, t.header).OpTimeNs(op),
              MessageNs(bytes, inside, hw.interconnect) + overhead);
  }
}

TEST(ContextParallelSim, PeaksAreTheStaticWalksToTheByte) {
  const HardwareOptions hw = testing::TestHardware(2, 2, 20);
  for (int64_t cp : {2, 4}) {
    for (const char* policy : {"keep", "recompute-full"}) {
      SCOPED_TRACE("cp " + std::to_string(cp) + " " + policy);
      const traces::Trace t = Llama(cp);
      Result<traces::Plan> plan = MakeFixedPlan(policy, t, hw, BasePlan(t));
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      testing::ExpectPeaksAreTheStaticWalks(t, *plan, hw);
    }
  }
}

// A full recompute re-runs the layer's ring: each step's running output is one
// tensor, so the chain is rebuilt once (the context and the lse backward reads
// in one run, as any op's outputs are: traces::RebuiltAlongside), not once per
// path through it (2^cp times when the steps wrote two tensors each).
TEST(ContextParallelSim, AFullRecomputeRebuildsTheRingLinearly) {
  const HardwareOptions hw = testing::TestHardware(2, 2, 20);
  const traces::Trace t = Llama(16);
  Result<traces::Plan> plan = MakeFixedPlan("recompute-full", t, hw, BasePlan(t));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  Result<StageResult> r = SimulateStage(t, *plan, hw);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->recompute_ns, 0);
  EXPECT_LE(r->recompute_ns, r->forward_compute_ns);
}

TEST(ContextParallelSim, TheRingRunsBesideTheAttentionSteps) {
  // A 100 GB/s link: each exchange is shorter than the attention step it
  // overlaps; the step is compute plus what is exposed (the backward's last
  // exchange, the dK/dV home, which the next op reads at once), far below
  // compute plus the ring in a row.
  HardwareOptions hw = testing::TestHardware(2, 2, 20);
  hw.interconnect.scale_out = LinkTier{100, 0, 0};
  const traces::Trace t = Llama(4);
  const Times times = OpTimes(t, hw);
  ASSERT_GT(times.ring, 0);
  Result<StageResult> r = SimulateStage(t, BasePlan(t), hw);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->side_collective_ns, times.ring);  // one at a time, none twice
  EXPECT_EQ(r->step_ns, times.compute + r->exposed_collective_ns + r->exposed_io_ns);
  EXPECT_LT(r->exposed_collective_ns, times.ring / 2);
}

TEST(ContextParallelSim, ASlowRingIsExposed) {
  // 0.1 GB/s: every exchange outlasts its step; compute waits for each.
  HardwareOptions hw = testing::TestHardware(2, 2, 20);
  hw.interconnect.scale_out = LinkTier{0.1, 0, 0};
  const traces::Trace t = Llama(4);
  const Times times = OpTimes(t, hw);
  Result<StageResult> r = SimulateStage(t, BasePlan(t), hw);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(r->step_ns, times.ring);
  EXPECT_GT(r->exposed_collective_ns, times.ring / 2);
  EXPECT_EQ(r->step_ns, times.compute + r->exposed_collective_ns + r->exposed_io_ns);
}

}  // namespace
}  // namespace ssdtrain::sim

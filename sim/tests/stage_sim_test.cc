// The stage simulator's step arithmetic: compute, read- and write-bound steps,
// prefetch issue-ahead, forwarding, shared storages, recompute, SSD CPU cost,
// byte-identical output, gradients' lifetimes and the prefetch rule. Its
// memory (residency, budgets, eviction points) is in stage_sim_memory_test.cc.
#include "sim/stage_sim.h"

#include <gtest/gtest.h>

#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/tests/test_traces.h"
#include "traces/prefetch.h"

namespace ssdtrain::sim {
namespace {

using testing::ChainTrace;
using testing::PlanWith;
using testing::TestHardware;
using traces::Placement;
using traces::TensorAction;

TEST(StageSim, ComputeOnlyStepIsTheSumOfOpTimes) {
  // 4 forward ops of 100 ns and 4 backward ops of 200 ns, nothing moved: 1200 ns.
  const traces::Trace trace = ChainTrace(4, 1000, 100, 200);
  auto r = SimulateStage(trace, PlanWith(trace, {}), TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->step_ns, 1200);
  EXPECT_EQ(r->compute_busy_ns, 1200);
  EXPECT_EQ(r->exposed_io_ns, 0);
  // Peak: weight 1000 + input 1000 + all four 1000-byte activations = 6000.
  EXPECT_EQ(r->peak_gpu_bytes, 6000);
  EXPECT_EQ(r->peak_activation_bytes, 4000);
}

TEST(StageSim, ReadBoundStepIsBytesOverReadBandwidth) {
  // act0 (1 GB) is offloaded and read back when bwd1 starts. fwd0 = 1 µs;
  // fwd1 = 2 s lets the 1 GB write at 1 GB/s land; the read at 2 GB/s takes
  // 0.5 s, so bwd0 waits: step = 1000 + 2e9 + 0.5e9 + 1000 ns, and the exposed
  // I/O is the read minus bwd1's 1000 ns.
  const traces::Trace trace = ChainTrace(2, 1'000'000'000, 0, 1000);
  traces::Trace t = trace;
  t.ops[0].measured_ns = 1000;
  t.ops[1].measured_ns = 2'000'000'000;
  const traces::OpId bwd1 = 2;
  auto r =
      SimulateStage(t, PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, bwd1, "a.bin", 0, 0}}),
                    TestHardware(1, 2, 100));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->step_ns, 2'500'002'000);
  EXPECT_EQ(r->exposed_io_ns, 499'999'000);
  EXPECT_EQ(r->ssd_bytes_written, 1'000'000'000);
  EXPECT_EQ(r->ssd_bytes_read, 1'000'000'000);
}

TEST(StageSim, IssueAheadStartsPrefetchesThatManyOpsEarlier) {
  // act0 (1 GB, written during the 2 s fwd1) is prefetched for bwd0 through
  // pinned host memory (no GDS): 0.5 s from the SSD, then 10 ms over PCIe.
  // With issue_ahead_ops 1 the read starts when bwd0 is issued, after bwd1
  // ends, and all 510 ms of it is exposed. With 2 it starts with bwd1 (issued
  // when bwd2 ends), so bwd1's 0.3 s hides that much of its SSD part; its
  // device buffer and host-to-device copy wait for bwd1 to end, as the
  // replay's do (the buffer is taken when bwd0 is issued, the copy is ordered
  // after bwd1 on the compute stream).
  traces::Trace t = ChainTrace(3, 1'000'000'000, 1000, 1000);
  t.ops[1].measured_ns = 2'000'000'000;  // fwd1
  t.ops[4].measured_ns = 300'000'000;    // bwd1
  const traces::OpId bwd0 = 5;
  const traces::Plan plan =
      PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, bwd0, "a.bin", 0, 0}});
  HardwareOptions hw = TestHardware(1, 2, 100);
  hw.storage.gds = false;
  hw.gpu.issue_ahead_ops = 1;
  auto one = SimulateStage(t, plan, hw);
  hw.gpu.issue_ahead_ops = 2;
  auto two = SimulateStage(t, plan, hw);
  ASSERT_TRUE(one.ok()) << one.status().message();
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(one->exposed_io_ns, 510'000'000);
  EXPECT_EQ(two->exposed_io_ns, 210'000'000);
  EXPECT_EQ(one->step_ns - two->step_ns, 300'000'000);
  EXPECT_EQ(two->ssd_bytes_read, 1'000'000'000);
  // The same memory either way: act0 comes back when bwd1 has ended.
  EXPECT_EQ(one->peak_gpu_bytes, two->peak_gpu_bytes);
  // GDS reads straight into the device buffer, so a read fired ahead waits
  // for bwd1 altogether: the run-ahead hides nothing of it.
  hw.storage.gds = true;
  hw.gpu.issue_ahead_ops = 1;
  auto gds_one = SimulateStage(t, plan, hw);
  hw.gpu.issue_ahead_ops = 2;
  auto gds_two = SimulateStage(t, plan, hw);
  ASSERT_TRUE(gds_one.ok()) << gds_one.status().message();
  ASSERT_TRUE(gds_two.ok()) << gds_two.status().message();
  EXPECT_EQ(gds_one->exposed_io_ns, 500'000'000);
  EXPECT_EQ(gds_two->exposed_io_ns, 500'000'000);
}

TEST(StageSim, WriteBoundStepIsBytesOverWriteBandwidth) {
  // One 10 GB activation written at 1 GB/s after a 1000 ns forward: the step
  // ends when the write lands, 1000 + 10 s (backward forwards it from the device).
  traces::Trace t = ChainTrace(1, 10'000'000'000, 1000, 1000);
  auto r = SimulateStage(
      t, PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, traces::kNoOp, "a.bin", 0, 0}}),
      TestHardware(1, 1, 100));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->step_ns, 1000 + 10'000'000'000);
  EXPECT_EQ(r->forwarded_storages, 1);
  EXPECT_EQ(r->ssd_bytes_read, 0);
}

TEST(StageSim, ForwardingDropsWritesThatHaveNotStarted) {
  // max_inflight_tensors = 1 and a slow SSD: act1's write queues behind act0's
  // and backward of layer 1 asks for act1 first, so its write is dropped.
  traces::Trace t = ChainTrace(2, 1'000'000'000, 1000, 1000);
  HardwareOptions hw = TestHardware(1, 1, 100);
  hw.storage.max_inflight_tensors = 1;
  auto plan = PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, traces::kNoOp, "a", 0, 0},
                           Placement{3, TensorAction::kOffloadSsd, traces::kNoOp, "b", 0, 0}});
  auto r = SimulateStage(t, plan, hw);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->dropped_writes, 1);
  EXPECT_EQ(r->ssd_bytes_written, 1'000'000'000);  // act0 only
}

TEST(StageSim, SharedStorageIsWrittenOnce) {
  // act0 has a view saved too; both are placed for offload at the same place
  // (traces::ResolvePlan rejects two places for one storage): one write happens.
  traces::Trace t = ChainTrace(2, 1'000'000, 1'000'000, 1000);
  traces::Tensor view = t.tensors[2];
  view.id = static_cast<traces::TensorId>(t.tensors.size());
  view.name = "act0_view";
  view.alias_of = 2;
  view.consumers = {2};  // read by bwd1 as well
  t.tensors.push_back(view);
  t.ops[2].inputs.push_back(view.id);
  auto plan =
      PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, traces::kNoOp, "a", 0, 0},
                   Placement{view.id, TensorAction::kOffloadSsd, traces::kNoOp, "a", 0, 0}});
  auto r = SimulateStage(t, plan, TestHardware(10, 10, 100));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->ssd_bytes_written, 1'000'000);
}

TEST(StageSim, RecomputeRerunsTheProducerBeforeBackward) {
  // act1 recomputed: its producer fwd1 (100 ns) runs again: 2·100 + 2·200 + 100.
  traces::Trace t = ChainTrace(2, 1000, 100, 200);
  auto r = SimulateStage(
      t, PlanWith(t, {Placement{3, TensorAction::kRecompute, traces::kNoOp, "", 0, 0}}),
      TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->step_ns, 700);
  EXPECT_EQ(r->recompute_ns, 100);
}

TEST(StageSim, OffloadNeverRaisesPeakMemory) {
  const traces::Trace trace = ChainTrace(6, 1'000'000'000, 50'000'000, 100'000'000);
  const HardwareOptions hw = TestHardware(4, 8, 20);
  auto keep = SimulateStage(trace, PlanWith(trace, {}), hw);
  ASSERT_TRUE(keep.ok());
  for (std::string_view policy : kFixedPolicies) {
    auto plan = MakeFixedPlan(policy, trace, hw, BasePlan(trace));
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    auto r = SimulateStage(trace, *plan, hw);
    ASSERT_TRUE(r.ok()) << policy << ": " << r.status().message();
    EXPECT_LE(r->peak_gpu_bytes, keep->peak_gpu_bytes) << policy;
  }
}

TEST(StageSim, UnlimitedSsdBandwidthMatchesKeepStepTime) {
  // 1e9 GB/s everywhere: every transfer takes about a nanosecond and is hidden.
  const traces::Trace trace = ChainTrace(4, 1'000'000'000, 100, 200);
  const HardwareOptions hw = TestHardware(1e9, 1e9, 1e9);
  auto keep = Simulate(trace, BasePlan(trace), hw);
  auto plan = MakeFixedPlan("offload-ssd", trace, hw, BasePlan(trace));
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->placements.size(), 4u);
  auto ssd = Simulate(trace, *plan, hw);
  ASSERT_TRUE(keep.ok() && ssd.ok());
  EXPECT_EQ(ssd->metrics.step_time_ns, keep->metrics.step_time_ns);
  EXPECT_GT(ssd->metrics.ssd_bytes_written, 0);
  EXPECT_LT(ssd->metrics.peak_activation_bytes, keep->metrics.peak_activation_bytes);
}

TEST(StageSim, SsdTrafficTakesItsCpuCostFromTheOpsCores) {
  // Four 1 MiB activations offloaded, every transfer hidden (1e9 GB/s); the
  // last one is forwarded to its backward op, the other three read back: at
  // 100 us per MiB moved, the step is keep's plus 4 writes and 3 reads of 100
  // us each, spent before ops start (compute busy unchanged).
  const traces::Trace trace = ChainTrace(4, 1 << 20, 100, 200);
  HardwareOptions hw = TestHardware(1e9, 1e9, 1e9);
  auto keep = SimulateStage(trace, BasePlan(trace), hw);
  auto plan = MakeFixedPlan("offload-ssd", trace, hw, BasePlan(trace));
  ASSERT_TRUE(keep.ok() && plan.ok());
  ASSERT_EQ(plan->placements.size(), 4u);
  auto free_io = SimulateStage(trace, *plan, hw);
  hw.gpu.io_overhead_us_per_MiB = 100;
  auto taxed = SimulateStage(trace, *plan, hw);
  ASSERT_TRUE(free_io.ok() && taxed.ok());
  EXPECT_EQ(free_io->step_ns, keep->step_ns);
  EXPECT_EQ(free_io->io_overhead_ns, 0);
  EXPECT_EQ(taxed->ssd_bytes_written, 4 << 20);
  EXPECT_EQ(taxed->ssd_bytes_read, 3 << 20);
  EXPECT_EQ(taxed->io_overhead_ns, 7 * 100'000);
  EXPECT_EQ(taxed->step_ns, keep->step_ns + 7 * 100'000);
  EXPECT_EQ(taxed->compute_busy_ns, keep->compute_busy_ns);
  // Host offload moves no SSD bytes: no cost.
  auto host = MakeFixedPlan("offload-host", trace, hw, BasePlan(trace));
  ASSERT_TRUE(host.ok());
  auto host_run = SimulateStage(trace, *host, hw);
  ASSERT_TRUE(host_run.ok());
  EXPECT_EQ(host_run->io_overhead_ns, 0);
}

TEST(StageSim, SameInputsGiveByteIdenticalJson) {
  const traces::Trace trace = ChainTrace(6, 1'000'000'000, 50'000'000, 100'000'000);
  const HardwareOptions hw = TestHardware(4, 8, 20);
  auto plan = MakeFixedPlan("offload-ssd", trace, hw, BasePlan(trace));
  ASSERT_TRUE(plan.ok());
  auto a = Simulate(trace, *plan, hw);
  auto b = Simulate(trace, *plan, hw);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(PredictionToJson(*a).dump(), PredictionToJson(*b).dump());
  EXPECT_EQ(traces::ToJson(a->timeline).dump(), traces::ToJson(b->timeline).dump());
}

TEST(Simulate, EnduranceFollowsTbwOverWriteRate) {
  // Write-bound: 10 GB per 10 s step = 1 GB/s; 1000 TBW / (86.4 · 1) = 11.574 days.
  traces::Trace t = ChainTrace(1, 10'000'000'000, 1000, 1000);
  auto plan = PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, traces::kNoOp, "a", 0, 0}});
  auto r = Simulate(t, plan, TestHardware(1, 1, 100));
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->metrics.ssd_lifetime_days, 1000 / 86.4, 1e-3);
}

TEST(StageSim, ActivationGradientsAreTransientWeightGradientsPersist) {
  // fwd: x(1000, saved) = f(w); bwd1: g_x(5000, activation gradient) from x;
  // bwd0: wg(100, weight gradient) from g_x; adam reads wg. g_x lives only
  // from bwd1 to bwd0, so after bwd0 the device holds w + wg + the input:
  // peak = w 1000 + input 1000 + x 1000 + g_x 5000 + wg 100 = 8100 while
  // bwd1 runs, and 2100 at the end (x and g_x freed). Were g_x kept all step
  // (as a weight gradient), static would be 7100 and the end 7100.
  using traces::OpKind;
  using traces::Phase;
  using traces::TensorKind;
  testing::TraceBuilder b;
  const auto w = b.Tensor("w", 1000, TensorKind::kWeight, 0, false, false);
  const auto in = b.Tensor("input", 1000, TensorKind::kInput, traces::kNoLayer, false, false);
  const auto x = b.Tensor("x", 1000, TensorKind::kActivation, 0, true, true);
  const auto gx = b.Tensor("x.grad", 5000, TensorKind::kGradient, 0, false, false);
  const auto wg = b.Tensor("w.grad", 100, TensorKind::kGradient, 0, false, false);
  b.Op("fwd", OpKind::kGemm, Phase::kForward, 0, {in, w}, {x}, 10);
  b.Op("bwd1", OpKind::kGemm, Phase::kBackward, 0, {x, w}, {gx}, 10);
  b.Op("bwd0", OpKind::kGemm, Phase::kBackward, 0, {gx, in}, {wg}, 10);
  b.Op("adam", OpKind::kOptimizer, Phase::kOptimizer, 0, {wg, w}, {}, 10);
  traces::Trace t = std::move(b.trace());
  t.header.layers = 1;
  auto r = SimulateStage(t, PlanWith(t, {}), TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->static_bytes, 1000 + 1000 + 100);  // w, input, w.grad
  EXPECT_EQ(r->peak_gpu_bytes, 8100);
  ASSERT_FALSE(r->timeline.memory.empty());
  EXPECT_EQ(r->timeline.memory.back().device_bytes, 2100);
}

TEST(Policies, OrderBasedPrefetchLooksTwoModulesAhead) {
  // ChainTrace(4): tensors w, input, act0..act3 (ids 0..5); backward modules
  // in order bwd3, bwd2, bwd1, bwd0 (ops 4..7). act0 is first needed by bwd0
  // (op 7): two modules earlier is bwd2 (op 5); act1 by bwd1 (op 6) -> bwd3
  // (op 4); act2 and act3 have fewer than two modules before theirs -> bwd3.
  const traces::Trace t = ChainTrace(4, 1000, 100, 200);
  EXPECT_EQ(traces::LookaheadPrefetchOp(t, 2, 2), 5);
  EXPECT_EQ(traces::LookaheadPrefetchOp(t, 3, 2), 4);
  EXPECT_EQ(traces::LookaheadPrefetchOp(t, 4, 2), 4);
  EXPECT_EQ(traces::LookaheadPrefetchOp(t, 5, 2), 4);
  EXPECT_EQ(traces::LookaheadPrefetchOp(t, 2, 0), 7);  // lookahead 0: at the consumer itself
}

// Module names are checked against the lists themselves, which the messages
// (and plan's flag checks) are written from.
TEST(PolicyModules, AnUnknownModuleIsNamedWithTheListItIsNotIn) {
  EXPECT_EQ(RecomputeModulesError({"core_attn", "mla_up_proj"}), "");
  EXPECT_EQ(RecomputeModulesError({"core_attn", "mlp"}),
            "recompute module \"mlp\": expected core_attn or mla_up_proj");
  EXPECT_EQ(OffloadModulesError({"attn_norm", "moe_act"}), "");
  EXPECT_EQ(OffloadModulesError({"fc2"}),
            "offload module \"fc2\": expected attn_norm, qkv_linear, core_attn, attn_proj, "
            "mlp_norm, expert_fc1 or moe_act");
}

}  // namespace
}  // namespace ssdtrain::sim

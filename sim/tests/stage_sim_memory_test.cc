// The stage simulator's memory: an offloaded tensor resident until its write
// lands, the budget holding back ops, planned eviction points (and where
// PlaceEvictions puts them), latencies and device memory rounded up.
#include <gtest/gtest.h>

#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/stage_sim.h"
#include "sim/tests/test_traces.h"

namespace ssdtrain::sim {
namespace {

using testing::ChainTrace;
using testing::PlanWith;
using testing::TestHardware;
using traces::Placement;
using traces::TensorAction;

// Three 1 GB layers, forward ops of 100 ms, act0 offloaded through pinned host
// memory (no GDS): its copy leaves the device at 0.1 + 0.01 s (100 GB/s PCIe)
// and its SSD write at 1 GB/s lands at 1.11 s, after the whole forward pass.
traces::Trace SlowWriteTrace() {
  traces::Trace t = ChainTrace(3, 1'000'000'000, 100'000'000, 1000);
  return t;
}
HardwareOptions BounceHardware() {
  HardwareOptions hw = TestHardware(1, 2, 100);
  hw.storage.gds = false;
  return hw;
}

TEST(StageSim, AnOffloadedTensorStaysResidentUntilItsWriteLands) {
  // At fwd2 (0.2-0.3 s) act0's write is still on its way to the SSD, so act0,
  // act1 and act2 are all resident: 3 GB of activations (evicting act0 once
  // its copy had left the device would have said 2 GB, which the replay never
  // sees: it frees the device copy when the write lands).
  const traces::Trace t = SlowWriteTrace();
  auto r = SimulateStage(
      t, PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, traces::kNoOp, "a.bin", 0, 0}}),
      BounceHardware());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->peak_activation_bytes, 3'000'000'000);
  EXPECT_EQ(r->peak_gpu_bytes, 3'000'002'000);  // + weight 1000 + input 1000
  EXPECT_EQ(r->forwarded_storages, 1);          // still resident when bwd0 asks
}

TEST(StageSim, ABudgetHoldsBackTheNextOpUntilAWriteLands) {
  // Budget: weight + input + two activations. fwd2 would need a third 1 GB,
  // so it waits from 0.2 s until act0's write lands at 1.11 s and evicts it:
  // 0.91 s exposed. bwd0 then reads act0 back on demand: 0.5 s from the SSD at
  // 2 GB/s and 0.01 s over PCIe, 0.51 s exposed. Step: three forward ops
  // (0.3 s) + 0.91 + 0.51 s + three backward ops of 1000 ns.
  const traces::Trace t = SlowWriteTrace();
  traces::Plan plan =
      PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, traces::kNoOp, "a.bin", 0, 0}});
  plan.memory_budget_bytes = 2'000'002'000;
  auto r = SimulateStage(t, plan, BounceHardware());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->peak_gpu_bytes, 2'000'002'000);
  EXPECT_EQ(r->peak_activation_bytes, 2'000'000'000);
  EXPECT_EQ(r->exposed_io_ns, 910'000'000 + 510'000'000);
  EXPECT_EQ(r->step_ns, 300'000'000 + 910'000'000 + 510'000'000 + 3000);
  EXPECT_EQ(r->ssd_bytes_read, 1'000'000'000);
}

// The budget is the whole step's (as the replay applies it), so a stage holding
// two micro-batches (1F1B stage 0 of 2) leaves the running one the budget less
// what the other holds between its passes: act1 and act2, kept (2 GB). With a
// budget of weight + input + 4 GB, the running micro-batch gets 2 GB: fwd2
// waits for act0's write (0.91 s, as above) and the stage peaks at exactly the
// budget. Applied to one micro-batch alone, fwd2 would not wait and the stage
// would peak 1 GB over it.
TEST(Simulate, TheBudgetLeavesAMicroBatchWhatTheOthersInFlightDoNotHold) {
  const traces::Trace t = SlowWriteTrace();
  traces::Plan plan =
      PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, traces::kNoOp, "a.bin", 0, 0}});
  plan.memory_budget_bytes = 4'000'002'000;
  plan.pp = 2;
  plan.num_micro_batches = 2;
  auto held = HeldByOtherMicroBatches(t, plan, BounceHardware(), 2);
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_EQ(*held, 2'000'000'000);
  auto p = Simulate(t, plan, BounceHardware());
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->stage_peaks[0].in_flight, 2);
  EXPECT_EQ(p->stage_peaks[0].peak_gpu_bytes, 4'000'002'000);
  EXPECT_GE(p->metrics.exposed_io_ns, 910'000'000);
}

// Planned eviction points (Placement::evict_before). act0 (tensor 2) is last
// read in forward by fwd1 (op1) and first read in backward by bwd0 (op5).
traces::Plan EvictAt(const traces::Trace& t, traces::OpId op) {
  Placement p{2, TensorAction::kOffloadSsd, traces::kNoOp, "a.bin", 0, 0};
  p.evict_before = op;
  return PlanWith(t, {p});
}

// A latency below a nanosecond still costs one: durations round up
// (traces/duration.h), also the drive's and the link's latencies. 0.4 ns of
// write latency lands the 10 GB write of the test above at 1000 + 10 s + 1 ns.
TEST(StageSim, LatenciesRoundUpToWholeNanoseconds) {
  traces::Trace t = ChainTrace(1, 10'000'000'000, 1000, 1000);
  HardwareOptions hw = TestHardware(1, 1, 100);
  hw.storage.drive.write_latency_us = 0.0004;
  auto r = SimulateStage(
      t, PlanWith(t, {Placement{2, TensorAction::kOffloadSsd, traces::kNoOp, "a.bin", 0, 0}}), hw);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->step_ns, 1000 + 10'000'000'000 + 1);
}

TEST(StageSim, AnEvictionPointWaitsForItsWrite) {
  // Point at fwd2 (op2), the write landing at 1.11 s: fwd2 waits at its issue
  // from 0.2 s until then (0.91 s exposed) and act0 goes before act2 is
  // allocated, so no more than two activations are ever resident; bwd0 reads
  // act0 back on demand (0.51 s exposed). The same step as the budget's above,
  // from the plan alone.
  const traces::Trace t = SlowWriteTrace();
  auto r = SimulateStage(t, EvictAt(t, 2), BounceHardware());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->peak_activation_bytes, 2'000'000'000);
  EXPECT_EQ(r->peak_gpu_bytes, 2'000'002'000);
  EXPECT_EQ(r->exposed_io_ns, 910'000'000 + 510'000'000);
  EXPECT_EQ(r->step_ns, 300'000'000 + 910'000'000 + 510'000'000 + 3000);
  EXPECT_EQ(r->write_landed_ns.at(2), 1'110'000'000);
}

TEST(StageSim, AStorageStaysUntilItsEvictionPointHoweverEarlyItsWriteLands) {
  // A 100 GB/s path lands act0's write at 0.12 s, during fwd1. Evicted at its
  // landing it would leave two activations resident at fwd2; with its point
  // at bwd1 (op4) it stays through fwd2: three, and nothing waits.
  const traces::Trace t = SlowWriteTrace();
  HardwareOptions fast = TestHardware(100, 100, 100);
  fast.storage.gds = false;
  auto at_landing = SimulateStage(t, EvictAt(t, traces::kNoOp), fast);
  auto late = SimulateStage(t, EvictAt(t, 4), fast);
  ASSERT_TRUE(at_landing.ok() && late.ok());
  EXPECT_EQ(at_landing->write_landed_ns.at(2), 120'000'000);
  EXPECT_EQ(at_landing->peak_activation_bytes, 2'000'000'000);
  EXPECT_EQ(late->peak_activation_bytes, 3'000'000'000);
  EXPECT_EQ(late->exposed_io_ns, at_landing->exposed_io_ns);
}

// PlaceEvictions puts act0's point at the first op starting after its write
// lands: fwd2 on the fast path (0.12 s < 0.2 s), and the memory profile is
// the one of eviction at landing. On the slow path the write lands after
// backward needs act0 back (1.11 s > bwd0 at 0.3 s): it is kept instead.
TEST(PlaceEvictions, AtTheFirstOpAfterTheWriteLandsElseKept) {
  const traces::Trace t = SlowWriteTrace();
  HardwareOptions fast = TestHardware(100, 100, 100);
  fast.storage.gds = false;
  auto placed = PlaceEvictions(t, EvictAt(t, traces::kNoOp), fast);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  ASSERT_EQ(placed->placements.size(), 1u);
  EXPECT_EQ(placed->placements[0].evict_before, 2);
  auto slow = PlaceEvictions(t, EvictAt(t, traces::kNoOp), BounceHardware());
  ASSERT_TRUE(slow.ok()) << slow.status().message();
  EXPECT_TRUE(slow->placements.empty());
}

// Points are placed where the writes land with the SSD shared by the
// micro-batches in flight (as Simulate runs the stage), not alone. A 5-layer
// chain of 1 GB activations, 100 ms per op, act0 offloaded to an SSD writing
// 10.2 GB/s and reading 2 GB/s behind a 100 GB/s link: alone, its write lands
// at 0.1 s + 1/10.2 s = 0.198 s, before fwd2 starts (0.2 s). On 1F1B stage 0 of
// 2 another micro-batch's read (0.5 s of the drive in a step of about 1.5 s)
// takes a sixth of the write rate, and the write lands after 0.2 s: fwd3.
TEST(PlaceEvictions, WritesLandWhereTheSharedSsdHasThemLand) {
  const traces::Trace t = ChainTrace(5, 1'000'000'000, 100'000'000, 100'000'000);
  HardwareOptions hw = TestHardware(10.2, 2, 100);
  traces::Plan plan = EvictAt(t, traces::kNoOp);
  auto alone = PlaceEvictions(t, plan, hw);
  plan.pp = 2;
  plan.num_micro_batches = 4;
  auto shared = PlaceEvictions(t, plan, hw);
  ASSERT_TRUE(alone.ok() && shared.ok());
  ASSERT_FALSE(alone->placements.empty());
  ASSERT_FALSE(shared->placements.empty());
  EXPECT_EQ(alone->placements[0].evict_before, 2);
  EXPECT_EQ(shared->placements[0].evict_before, 3);
}

// On a stage holding several micro-batches (1F1B stage 0 of 2, 4 micro-batches:
// two at once) the slow path's storage is not kept, to be held while its
// micro-batch waits, but goes at the end of its forward pass: its point is the
// first backward op (bwd0, op 3), which waits for the write (backpressure).
TEST(PlaceEvictions, ALateWriteGoesAtThePassEndWhereTheStageHoldsSeveral) {
  const traces::Trace t = SlowWriteTrace();
  traces::Plan plan = EvictAt(t, traces::kNoOp);
  plan.pp = 2;
  plan.num_micro_batches = 4;
  auto placed = PlaceEvictions(t, plan, BounceHardware());
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  ASSERT_EQ(placed->placements.size(), 1u);
  EXPECT_EQ(placed->placements[0].evict_before, 3);
  EXPECT_EQ(t.op(3).phase, traces::Phase::kBackward);
  EXPECT_EQ(t.op(2).phase, traces::Phase::kForward);
  // Alone, the stage would keep it (the test above): one micro-batch at once.
  plan.pp = 1;
  auto alone = PlaceEvictions(t, plan, BounceHardware());
  ASSERT_TRUE(alone.ok());
  EXPECT_TRUE(alone->placements.empty());
}

// A write that lands after its micro-batch's forward pass, but before
// backward needs the storage back, has no point that holds nothing back: one
// on a later backward op of its own micro-batch means the pass end, the first
// backward op, which would wait for the write. A 5-layer chain, 100 ms an op,
// act0 written at 2 GB/s from 0.11 s: it lands at 0.61 s, after the forward
// pass (0.5 s) and before bwd0 reads it (0.9 s). The first op starting after
// that, bwd2 (op 7), would have made bwd4 (op 5) wait 0.11 s for the write;
// alone, the storage is kept instead (gpt-oss-20b on 16384 B200s lost 12% of
// its step so).
TEST(PlaceEvictions, AWriteLandingInItsOwnBackwardIsKeptNotWaitedFor) {
  const traces::Trace t = ChainTrace(5, 1'000'000'000, 100'000'000, 100'000'000);
  HardwareOptions hw = TestHardware(2, 2, 100);
  hw.storage.gds = false;
  auto placed = PlaceEvictions(t, EvictAt(t, traces::kNoOp), hw);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_TRUE(placed->placements.empty());
  // Where it lands before the pass ends (10 GB/s: at 0.21 s), its point is
  // the first op after (fwd3, op 3), as before.
  HardwareOptions fast = TestHardware(10, 2, 100);
  fast.storage.gds = false;
  auto early = PlaceEvictions(t, EvictAt(t, traces::kNoOp), fast);
  ASSERT_TRUE(early.ok()) << early.status().message();
  ASSERT_EQ(early->placements.size(), 1u);
  EXPECT_EQ(early->placements[0].evict_before, 3);
}

TEST(StageSim, DeviceMemoryIsRoundedToTheAllocationGranularity) {
  // Four 1000-byte activations on a device that allocates in 4096-byte units:
  // each counts 4096, and so do the weight and the input.
  const traces::Trace trace = ChainTrace(4, 1000, 100, 200);
  HardwareOptions hw = TestHardware(1, 1, 10);
  hw.gpu.allocation_alignment_bytes = 4096;
  auto r = SimulateStage(trace, PlanWith(trace, {}), hw);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->peak_activation_bytes, 4 * 4096);
  EXPECT_EQ(r->peak_gpu_bytes, 6 * 4096);
}

}  // namespace
}  // namespace ssdtrain::sim

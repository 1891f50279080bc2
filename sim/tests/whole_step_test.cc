// Whole training steps (sim/simulate.h): m micro-batches over pp stages,
// micro-batches in flight sharing the SSD, data-parallel gradient buckets.
#include <gtest/gtest.h>

#include "sim/collective.h"
#include "sim/pipeline.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/stage_sim.h"
#include "sim/tests/test_traces.h"
#include "sim/topology.h"

namespace ssdtrain::sim {
namespace {

using testing::ChainTrace;
using testing::TestHardware;
using traces::OpKind;
using traces::Phase;
using traces::Placement;
using traces::TensorAction;
using traces::TensorKind;

traces::Plan LayoutPlan(const traces::Trace& trace, int64_t pp, int64_t m, int64_t dp = 1,
                        std::vector<Placement> placements = {}) {
  traces::Plan plan = BasePlan(trace);
  plan.policy = "test";
  plan.pp = pp;
  plan.num_micro_batches = m;
  plan.dp = dp;
  plan.placements = std::move(placements);
  return plan;
}

// act0 (tensor 2, 1 GB) offloaded to the SSD and read back when bwd1 (op 2)
// starts. fwd0 1 s, fwd1 2 s, bwd1 1 s, bwd0 1 s; SSD 1 GB/s each way: alone,
// the write runs [1 s, 2 s] and the read [3 s, 4 s], just in time for bwd0.
traces::Trace OffloadChain() {
  traces::Trace t = ChainTrace(2, 1'000'000'000, 0, 0);
  t.ops[0].measured_ns = 1'000'000'000;
  t.ops[1].measured_ns = 2'000'000'000;
  t.ops[2].measured_ns = 1'000'000'000;
  t.ops[3].measured_ns = 1'000'000'000;
  return t;
}
const std::vector<Placement> kOffloadAct0 = {
    Placement{2, TensorAction::kOffloadSsd, /*prefetch_before=*/2, "a.bin", 0, 0}};

TEST(WholeStep, OneFOneBHoldsPMinusIMicroBatchesOnStageI) {
  // p = 4, m = 8: stage i holds p − i = 4, 3, 2, 1; GPipe holds all m = 8.
  std::vector<StageTimes> stages(4, StageTimes{100, 200});
  auto r = SimulatePipeline(stages, 8, PipelineSchedule::kOneFOneB, 0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_in_flight, (std::vector<int64_t>{4, 3, 2, 1}));
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(MicroBatchesInFlight(i, 4, 8, PipelineSchedule::kOneFOneB), 4 - i);
    EXPECT_EQ(MicroBatchesInFlight(i, 4, 8, PipelineSchedule::kGpipe), 8);
  }
  // Fewer micro-batches than stages: min(p − i, m).
  EXPECT_EQ(MicroBatchesInFlight(0, 4, 2, PipelineSchedule::kOneFOneB), 2);
}

TEST(WholeStep, SendsQueueOnTheirLink) {
  // p = 2, m = 2, 1F1B, F = B = 100 ns, a send takes 300 ns. Stage 0 runs F0
  // [0, 100], F1 [100, 200]; mb 0's activations cross [100, 400] and mb 1's wait
  // for the link: [400, 700]. Stage 1: F0 [400, 500], B0 [500, 600], F1 [700,
  // 800], B1 [800, 900]; gradients cross [600, 900] and [900, 1200]. Stage 0:
  // B0 [900, 1000], B1 [1200, 1300]. (Sends that did not queue: 1200 ns.)
  std::vector<StageTimes> stages(2, StageTimes{100, 100});
  auto r = SimulatePipeline(stages, 2, PipelineSchedule::kOneFOneB, 300, /*record_tasks=*/true);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->makespan_ns, 1300);
  EXPECT_EQ(r->last_backward_start_ns, (std::vector<int64_t>{1200, 800}));
  int sends = 0;
  for (const PipelineTask& t : r->tasks) {
    sends +=
        t.kind == PipelineTask::Kind::kSendForward || t.kind == PipelineTask::Kind::kSendBackward;
  }
  EXPECT_EQ(sends, 4);
}

TEST(WholeStep, OneStageOneMicroBatchIsExactlyTheStagesOwnStep) {
  // pp = 1, m = 1, dp = 1: the prediction is SimulateStage's micro-batch, figure
  // for figure (what the single-stage accuracy rows compare against replays).
  const traces::Trace t = OffloadChain();
  const traces::Plan plan = LayoutPlan(t, 1, 1, 1, kOffloadAct0);
  const HardwareOptions hw = TestHardware(1, 1, 100);
  auto stage = SimulateStage(t, plan, hw);
  auto whole = Simulate(t, plan, hw);
  ASSERT_TRUE(stage.ok()) << stage.status().message();
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  const traces::StepMetrics& m = whole->metrics;
  EXPECT_EQ(m.step_time_ns, stage->step_ns);
  EXPECT_EQ(m.step_time_ns, 5'000'000'000);  // 1 + 2 + 1 + 1 s, the read hidden
  EXPECT_EQ(m.peak_gpu_bytes, stage->peak_gpu_bytes);
  EXPECT_EQ(m.peak_activation_bytes, stage->peak_activation_bytes);
  EXPECT_EQ(m.ssd_bytes_written, stage->ssd_bytes_written);
  EXPECT_EQ(m.ssd_bytes_read, stage->ssd_bytes_read);
  EXPECT_EQ(m.exposed_io_ns, stage->exposed_io_ns);
  EXPECT_EQ(whole->allreduce_ns, 0);
  ASSERT_EQ(whole->ops.size(), stage->ops.size());
  for (size_t i = 0; i < stage->ops.size(); ++i) {
    EXPECT_EQ(whole->ops[i].start_ns, stage->ops[i].start_ns);
    EXPECT_EQ(whole->ops[i].end_ns, stage->ops[i].end_ns);
  }
  EXPECT_EQ(whole->timeline.spans.size(), stage->timeline.spans.size());
}

TEST(WholeStep, BubbleFractionWithFreeIoIsTheClosedForm) {
  // Each stage: 4 forward ops of 100 ns and 4 backward ops of 200 ns, so
  // F = 400, B = 800; p = 4, m = 8, keep, free sends: makespan (m + p − 1)(F + B)
  // = 11 · 1200 = 13200 ns, bubble (p − 1)/(m + p − 1) = 3/11.
  const traces::Trace t = ChainTrace(4, 1000, 100, 200);
  auto r = Simulate(t, LayoutPlan(t, 4, 8), TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->pipeline_ns, 13200);
  EXPECT_EQ(r->metrics.step_time_ns, 13200);
  EXPECT_NEAR(r->bubble_fraction, 3.0 / 11.0, 1e-12);
  // Memory from the micro-batches in flight: stage 0 holds 4, each keeping its
  // four 1000-byte activations: 4000 + 3 · 4000 = 16000 activation bytes.
  EXPECT_EQ(r->metrics.peak_activation_bytes, 16000);
  // Each stage's own: stage i holds p − i = 4 − i micro-batches under 1F1B,
  // 4000 bytes each; the step's is their largest.
  ASSERT_EQ(r->stage_peaks.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r->stage_peaks[static_cast<size_t>(i)].stage, i);
    EXPECT_EQ(r->stage_peaks[static_cast<size_t>(i)].peak_activation_bytes, (4 - i) * 4000);
  }
  // The timeline shows the pipeline: 4 stages × 8 micro-batches × (F, B),
  // each with its 4 ops inside (sim/step_timeline.h).
  int passes = 0, ops = 0;
  for (const traces::Span& s : r->timeline.spans) {
    if (s.lane != traces::Lane::kCompute) continue;
    (s.op == traces::kNoOp ? passes : ops) += 1;
  }
  EXPECT_EQ(passes, 4 * 8 * 2);
  EXPECT_EQ(ops, 4 * 8 * 2 * 4);
}

TEST(WholeStep, MiddleStagesRunTheirOwnTrace) {
  // p = 3, m = 1: stage 0 and the last take F = 400, B = 800; the middle stage
  // (a trace 3× slower) F = 1200, B = 2400. One micro-batch passes each stage
  // forward and back: 400 + 1200 + 400 + 800 + 2400 + 800 = 6000 ns (treating
  // the middle like stage 0 would give 3600).
  const traces::Trace outer = ChainTrace(4, 1000, 100, 200);
  const traces::Trace middle = ChainTrace(4, 1000, 300, 600);
  const traces::Plan plan = LayoutPlan(outer, 3, 1);
  const traces::Plan middle_plan = LayoutPlan(middle, 3, 1);
  auto r =
      Simulate({{&outer, &plan}, {&middle, &middle_plan}, {&outer, &plan}}, TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->pipeline_ns, 6000);
}

TEST(WholeStep, MicroBatchesInFlightShareTheSsd) {
  // p = 2, m = 2, 1F1B: stage 0 holds 2 micro-batches. Alone its micro-batch
  // (5 s) keeps the SSD writing 1 s and reading 1 s, so with another micro-batch
  // in flight each direction gets 1 − 1/(2·5) = 0.9 of the 1 GB/s: the 1 GB read
  // takes ceil(1e9 / 0.9e9 s) = 1 111 111 112 ns against bwd1's 1 s, and bwd0
  // waits 111 111 112 ns per micro-batch. The last stage holds one: no wait.
  const traces::Trace t = OffloadChain();
  auto r = Simulate(t, LayoutPlan(t, 2, 2, 1, kOffloadAct0), TestHardware(1, 1, 100));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->metrics.exposed_io_ns, 2 * 111'111'112);
  // One micro-batch per step on one stage shares with nobody: no wait.
  auto alone = Simulate(t, LayoutPlan(t, 1, 2, 1, kOffloadAct0), TestHardware(1, 1, 100));
  ASSERT_TRUE(alone.ok()) << alone.status().message();
  EXPECT_EQ(alone->metrics.exposed_io_ns, 0);
}

TEST(WholeStep, BucketedAllReduceOverlapsBackward) {
  // Two 2 GB buckets (the trace's: traces/dp_buckets.h forms them) ready at 2
  // and 4 s, 2 ranks at 10 GB/s: each bucket's all-reduce takes
  // 2·(2−1)/2 · 2 GB / 10 GB/s = 0.2 s. Bucket 1 runs [2, 2.2] s under
  // backward; only bucket 2 [4, 4.2] s outlasts it: 0.2 s exposed instead of
  // 0.4 s for one all-reduce after backward.
  std::vector<BucketReady> buckets = {{2'000'000'000, 2'000'000'000, OneDomain(2)},
                                      {4'000'000'000, 2'000'000'000, OneDomain(2)}};
  InterconnectOptions fast;
  fast.scale_up = LinkTier{10, 0, 0};
  std::vector<BucketSpan> b = BucketCollectives(buckets, CollectiveKind::kAllReduce, fast);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].start_ns, 2'000'000'000);
  EXPECT_EQ(b[0].end_ns, 2'200'000'000);
  EXPECT_EQ(b[1].start_ns, 4'000'000'000);
  EXPECT_EQ(b[1].end_ns, 4'200'000'000);
  // At 1 GB/s each bucket takes 2 s: bucket 2 waits for bucket 1 ([2, 4] s) and
  // runs [4, 6] s. One rank: nothing to reduce.
  InterconnectOptions slow;
  slow.scale_up = LinkTier{1, 0, 0};
  b = BucketCollectives(buckets, CollectiveKind::kAllReduce, slow);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1].start_ns, 4'000'000'000);
  EXPECT_EQ(b[1].end_ns, 6'000'000'000);
  for (BucketReady& x : buckets) x.group = OneDomain(1);
  EXPECT_TRUE(BucketCollectives(buckets, CollectiveKind::kAllReduce, fast).empty());
}

// Two layers; bwd1 (20 ms) produces g1, bwd0 (20 ms) g0, 80 MB each (fp16:
// 40 M parameters, one Megatron bucket of max(4e7, 1e6·dp) each); the
// weights are `weight_bytes`; the optimizer runs 5 ms.
traces::Trace TwoGradientTrace(int64_t weight_bytes) {
  testing::TraceBuilder b;
  const auto w = b.Tensor("w", weight_bytes, TensorKind::kWeight, 0, false, false);
  const auto in = b.Tensor("in", 1000, TensorKind::kInput, 0, false, false);
  const auto a0 = b.Tensor("a0", 1000, TensorKind::kActivation, 0, true, false);
  const auto a1 = b.Tensor("a1", 1000, TensorKind::kActivation, 1, true, false);
  const auto g1 = b.Tensor("g1", 80'000'000, TensorKind::kGradient, 1, false, false);
  const auto g0 = b.Tensor("g0", 80'000'000, TensorKind::kGradient, 0, false, false);
  constexpr int64_t kMs = 1'000'000;
  b.Op("fwd0", OpKind::kGemm, Phase::kForward, 0, {in, w}, {a0}, 10 * kMs);
  b.Op("fwd1", OpKind::kGemm, Phase::kForward, 1, {a0, w}, {a1}, 10 * kMs);
  b.Op("bwd1", OpKind::kGemm, Phase::kBackward, 1, {a1, w}, {g1}, 20 * kMs);
  b.Op("bwd0", OpKind::kGemm, Phase::kBackward, 0, {a0, w}, {g0}, 20 * kMs);
  b.Op("adam", OpKind::kOptimizer, Phase::kOptimizer, 0, {g0, g1, w}, {}, 5 * kMs);
  traces::Trace t = std::move(b.trace());
  t.header.model = "grads";
  t.header.layers = 2;
  t.header.seq_len = 1;
  t.header.micro_batch = 1;
  return t;
}

TEST(WholeStep, ZeroOneReduceScattersTheGradientsAndAllGathersTheParameters) {
  // Megatron's distributed optimizer at dp = 2 over 10 GB/s: each bucket's
  // reduce-scatter takes (2−1)/2 · 80 MB / 10 GB/s = 4 ms (half the
  // all-reduce's 8 ms): g1's runs under bwd0, g0's 4 ms follow the pipeline.
  // After the 5 ms optimizer the 160 MB of fp16 weights are all-gathered,
  // (2−1)/2 · 160 MB / 10 GB/s = 8 ms, not hidden: 60 + 4 + 5 + 8 = 77 ms,
  // against 60 + 8 + 5 = 73 ms for the all-reduce (the same bytes on the
  // link, half of them after the step's compute).
  constexpr int64_t kMs = 1'000'000;
  const traces::Trace t = TwoGradientTrace(160'000'000);
  traces::Plan plan = LayoutPlan(t, 1, 1, 2);
  plan.zero_stage = 1;
  auto r = Simulate(t, plan, TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->allreduce_busy_ns, 8 * kMs);
  EXPECT_EQ(r->allreduce_ns, 4 * kMs);
  EXPECT_EQ(r->param_all_gather_ns, 8 * kMs);
  EXPECT_EQ(r->metrics.step_time_ns, (60 + 4 + 5 + 8) * kMs);
  EXPECT_EQ(PredictionToJson(*r)["details"]["param_all_gather_ns"], 8 * kMs);
  plan.zero_stage = 0;
  auto all_reduce = Simulate(t, plan, TestHardware(1, 1, 10));
  ASSERT_TRUE(all_reduce.ok()) << all_reduce.status().message();
  EXPECT_EQ(all_reduce->param_all_gather_ns, 0);
  EXPECT_EQ(all_reduce->metrics.step_time_ns, (60 + 8 + 5) * kMs);
}

TEST(WholeStep, ZeroOneTimelineShowsTheReduceScatterAndTheParameterAllGather) {
  // Pipeline timelines exist for whole steps: 2 micro-batches.
  const traces::Trace t = TwoGradientTrace(160'000'000);
  traces::Plan plan = LayoutPlan(t, 1, 2, 2);
  plan.zero_stage = 1;
  auto r = Simulate(t, plan, TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  int reduce_scatters = 0, all_gathers = 0;
  for (const traces::Span& s : r->timeline.spans) {
    reduce_scatters += s.name == "data-parallel reduce-scatter";
    all_gathers += s.name == "data-parallel parameter all-gather";
  }
  EXPECT_EQ(reduce_scatters, 2);  // one per bucket
  EXPECT_EQ(all_gathers, 1);
}

TEST(WholeStep, DataParallelGradientsReduceDuringTheLastBackward) {
  // TwoGradientTrace at dp = 2 over 10 GB/s: each all-reduce takes
  // 2·(2−1)/2 · 80 MB / 10 GB/s = 8 ms: g1's runs under bwd0, only g0's 8 ms
  // follow the pipeline.
  constexpr int64_t kMs = 1'000'000;
  const traces::Trace t = TwoGradientTrace(1000);
  auto r = Simulate(t, LayoutPlan(t, 1, 1, 2), TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->pipeline_ns, 60 * kMs);
  EXPECT_EQ(r->allreduce_busy_ns, 16 * kMs);
  EXPECT_EQ(r->allreduce_ns, 8 * kMs);
  EXPECT_EQ(r->metrics.step_time_ns, (60 + 8 + 5) * kMs);
}

TEST(WholeStep, LocalDdpAllReducesEveryBucketAfterTheBackward) {
  // Megatron's --DDP-impl local (the plan's ddp "local"): nothing starts
  // before the backward has ended at 60 ms, so both 8 ms all-reduces of
  // TwoGradientTrace at dp = 2 over 10 GB/s run back to back after it: all
  // 2 · 2·(2−1)/2 · 80 MB / 10 GB/s = 16 ms exposed, against 8 ms overlapped;
  // the step is 60 + 16 + 5 = 81 ms.
  constexpr int64_t kMs = 1'000'000;
  const traces::Trace t = TwoGradientTrace(1000);
  traces::Plan plan = LayoutPlan(t, 1, 1, 2);
  plan.ddp = "local";
  auto r = Simulate(t, plan, TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->allreduce_busy_ns, 16 * kMs);
  EXPECT_EQ(r->allreduce_ns, 16 * kMs);
  EXPECT_EQ(r->metrics.step_time_ns, (60 + 16 + 5) * kMs);
  EXPECT_EQ(PredictionToJson(*r)["details"]["ddp"], "local");
  // Two stages, two micro-batches (one trace for both): stage 0 ends the
  // pipeline with its last backward, and under local DDP its buckets start
  // only then, all 16 ms exposed, against 8 ms overlapped (g1's under bwd0);
  // stage 1 ends 40 ms earlier, its 16 ms hidden either way.
  plan = LayoutPlan(t, 2, 2, 2);
  plan.ddp = "local";
  r = Simulate(t, plan, TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->allreduce_ns, 16 * kMs);
  plan.ddp = "overlapped";
  auto overlapped = Simulate(t, plan, TestHardware(1, 1, 10));
  ASSERT_TRUE(overlapped.ok()) << overlapped.status().message();
  EXPECT_EQ(overlapped->allreduce_ns, 8 * kMs);
  EXPECT_EQ(r->metrics.step_time_ns - overlapped->metrics.step_time_ns, 8 * kMs);
  plan.ddp = "torch";
  EXPECT_FALSE(Simulate(t, plan, TestHardware(1, 1, 10)).ok());
}

}  // namespace
}  // namespace ssdtrain::sim

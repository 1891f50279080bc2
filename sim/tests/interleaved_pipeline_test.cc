// The interleaved 1F1B schedule in the simulator (sim/pipeline.h,
// sim/simulate.h): its bubble, the chunks in flight and their memory, and its
// extra point-to-point sends.
#include <gtest/gtest.h>

#include "sim/chunk_times.h"
#include "sim/pipeline.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/stage_sim.h"
#include "sim/tests/test_traces.h"

namespace ssdtrain::sim {
namespace {

using testing::ChainTrace;
using testing::TestHardware;

int64_t Sends(const PipelineResult& r, PipelineTask::Kind kind, int64_t stage, int64_t chunk) {
  int64_t n = 0;
  for (const PipelineTask& t : r.tasks) n += t.kind == kind && t.stage == stage && t.chunk == chunk;
  return n;
}

TEST(InterleavedPipeline, BubbleIsPMinusOneOverVmOfTheIdealStep) {
  // Uniform stages F = 200, B = 400, free sends, m = 8. Ideal step m·(F + B) =
  // 4800 ns. Interleaved with v = 2 the bubble is (p − 1)/(v·m) of it: p = 4,
  // 3/16 · 4800 = 900 ns (makespan (m·v + p − 1)·(F + B)/v = 19 · 300 = 5700,
  // fraction 3/19), where 1F1B's is (p − 1)/m: 1800 ns (makespan 6600).
  const std::vector<StageTimes> four(4, StageTimes{200, 400});
  auto r = SimulatePipeline(four, 8, PipelineSchedule::kInterleaved, 0, false, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->makespan_ns, 5700);
  EXPECT_NEAR(r->bubble_fraction, 3.0 / 19.0, 1e-12);
  auto plain = SimulatePipeline(four, 8, PipelineSchedule::kOneFOneB, 0);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->makespan_ns, 6600);
  // p = 2: 1/16 · 4800 = 300 ns, makespan 5100, fraction 1/17.
  auto two = SimulatePipeline(std::vector<StageTimes>(2, StageTimes{200, 400}), 8,
                              PipelineSchedule::kInterleaved, 0, false, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->makespan_ns, 5100);
  EXPECT_NEAR(two->bubble_fraction, 1.0 / 17.0, 1e-12);
  // p = 4, v = 4 (chunks of F/4 = 50, B/4 = 100): 3/32 · 4800 = 450 ns.
  auto four_chunks = SimulatePipeline(four, 8, PipelineSchedule::kInterleaved, 0, false, 4);
  ASSERT_TRUE(four_chunks.ok());
  EXPECT_EQ(four_chunks->makespan_ns, 5250);
}

TEST(InterleavedPipeline, StageZeroHoldsTheMostChunks) {
  // Megatron's warm-up plus one: p = 4, v = 2, m = 8 holds 11, 9, 7, 5 chunks.
  const std::vector<StageTimes> stages(4, StageTimes{200, 400});
  auto r = SimulatePipeline(stages, 8, PipelineSchedule::kInterleaved, 0, false, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->max_in_flight, (std::vector<int64_t>{11, 9, 7, 5}));
  for (int64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(ChunksInFlight(s, 4, 8, PipelineSchedule::kInterleaved, 2), 11 - 2 * s);
  }
}

TEST(InterleavedPipeline, SendsEveryChunkBoundaryAndWrapsToStageZero) {
  // p = 4, v = 2, m = 8: each micro-batch crosses p·v − 1 = 7 boundaries each
  // way, 2 · 7 · 8 = 112 sends, where 1F1B sends 2 · 3 · 8 = 48. The wrap: the
  // last stage sends chunk 0's output to stage 0 (8 forward sends) and stage 0
  // sends chunk 1's input gradient back to the last stage (8 backward sends).
  const std::vector<StageTimes> stages(4, StageTimes{200, 400});
  auto r = SimulatePipeline(stages, 8, PipelineSchedule::kInterleaved, 10, true, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->sends, 112);
  EXPECT_EQ(Sends(*r, PipelineTask::Kind::kSendForward, 3, 0), 8);
  EXPECT_EQ(Sends(*r, PipelineTask::Kind::kSendForward, 3, 1), 0);
  EXPECT_EQ(Sends(*r, PipelineTask::Kind::kSendBackward, 0, 1), 8);
  EXPECT_EQ(Sends(*r, PipelineTask::Kind::kSendBackward, 0, 0), 0);
  auto plain = SimulatePipeline(stages, 8, PipelineSchedule::kOneFOneB, 10);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->sends, 48);
}

TEST(InterleavedPipeline, WrapSendsTakeTheirTime) {
  // p = 2, v = 2, m = 2, chunks F = B = 100 ns, a send 50 ns. Stage 0 runs
  // F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0; stage 1 F0.0 F1.0 F0.1 B0.1 F1.1
  // B1.1 B0.0 B1.0. Stage 0: F0.0 [0, 100], F1.0 [100, 200]; sends [100, 150],
  // [200, 250]. Stage 1: F0.0 [150, 250], F1.0 [250, 350]; wrap sends to stage
  // 0 [250, 300], [350, 400]. Stage 0: F0.1 [300, 400], F1.1 [400, 500]; sends
  // [400, 450], [500, 550]. Stage 1: F0.1 [450, 550], B0.1 [550, 650] (send
  // [650, 700]), F1.1 [650, 750], B1.1 [750, 850] (send [850, 900]). Stage 0:
  // B0.1 [700, 800], wrap send [800, 850]; B1.1 [900, 1000], wrap send [1000,
  // 1050]. Stage 1: B0.0 [850, 950] (send [950, 1000]), B1.0 [1050, 1150]
  // (send [1150, 1200]). Stage 0: B0.0 [1000, 1100], B1.0 [1200, 1300].
  const std::vector<StageTimes> stages(2, StageTimes{200, 200});
  auto r = SimulatePipeline(stages, 2, PipelineSchedule::kInterleaved, 50, true, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->makespan_ns, 1300);
  EXPECT_EQ(r->last_backward_start_ns, (std::vector<int64_t>{1200, 1050}));
  EXPECT_EQ(r->sends, 12);
}

TEST(InterleavedPipeline, RefusesWhatMegatronRefuses) {
  const std::vector<StageTimes> stages(4, StageTimes{200, 400});
  auto odd = SimulatePipeline(stages, 6, PipelineSchedule::kInterleaved, 0, false, 2);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().message(),
            "pipeline: interleaved the 6 micro-batches are not a multiple of pp = 4 (Megatron-LM "
            "interleaves groups of pp micro-batches)");
  EXPECT_FALSE(SimulatePipeline(stages, 8, PipelineSchedule::kInterleaved, 0, false, 1).ok());
}

traces::Plan Interleaved(const traces::Trace& trace, int64_t pp, int64_t m, int64_t v) {
  traces::Plan plan = BasePlan(trace);
  plan.policy = "test";
  plan.pp = pp;
  plan.num_micro_batches = m;
  plan.schedule = "interleaved";
  plan.virtual_stages = v;
  return plan;
}

TEST(InterleavedStep, ChunksInFlightSetEachStagesPeakToTheByte) {
  // Each stage: 4 layers, forward ops 100 ns and backward 200 ns (F = 400, B =
  // 800), four 1000-byte activations kept; p = 2, v = 2 (2 layers per chunk),
  // m = 8, free I/O. Makespan (m·v + p − 1)·(F + B)/v = 17 · 600 = 10200 ns.
  // Stage 0 holds 5 chunks: one micro-batch's 4000 bytes plus (5 − 2) chunks of
  // 4000/2: 10000 bytes (1F1B: 2 micro-batches, 8000). Stage 1: 3 chunks, 6000.
  const traces::Trace t = ChainTrace(4, 1000, 100, 200);
  auto r = Simulate(t, Interleaved(t, 2, 8, 2), TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->pipeline_ns, 10200);
  EXPECT_NEAR(r->bubble_fraction, 1.0 / 17.0, 1e-12);
  ASSERT_EQ(r->stage_peaks.size(), 2u);
  EXPECT_EQ(r->stage_peaks[0].in_flight, 5);
  EXPECT_EQ(r->stage_peaks[0].peak_activation_bytes, 10000);
  EXPECT_EQ(r->stage_peaks[1].in_flight, 3);
  EXPECT_EQ(r->stage_peaks[1].peak_activation_bytes, 6000);
  traces::Plan plain = Interleaved(t, 2, 8, 2);
  plain.schedule = "1f1b";
  plain.virtual_stages = 1;
  auto one_f_one_b = Simulate(t, plain, TestHardware(1, 1, 10));
  ASSERT_TRUE(one_f_one_b.ok());
  EXPECT_EQ(one_f_one_b->stage_peaks[0].peak_activation_bytes, 8000);
  // The device peak grows by the same chunks: 3 · 2000 bytes over 1F1B's 1 · 4000.
  EXPECT_EQ(r->stage_peaks[0].peak_gpu_bytes - one_f_one_b->stage_peaks[0].peak_gpu_bytes, 2000);
  EXPECT_EQ(r->pipeline_sends, 2 * 3 * 8);
}

TEST(InterleavedStep, EachChunkTakesItsOwnOpsTime) {
  // 4 blocks, v = 2: chunk 0 holds blocks 0 and 1, chunk 1 blocks 2 and 3.
  // Block 0's forward takes 300 ns (an embedding's weight), the others 100; each
  // backward op 200. Forward: chunk 0 300 + 100 = 400, chunk 1 200; backward
  // (chunk 1 first): 400 each.
  traces::Trace t = ChainTrace(4, 1000, 100, 200);
  t.ops[0].measured_ns = 300;
  auto r = SimulateStage(t, BasePlan(t), TestHardware(1, 1, 10));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ChunkTimes c = ChunkTimesOf(t, *r, 2);
  EXPECT_EQ(c.forward_ns, (std::vector<int64_t>{400, 200}));
  EXPECT_EQ(c.backward_ns, (std::vector<int64_t>{400, 400}));
  // Blocks that do not split into v chunks: none given (the even split).
  EXPECT_TRUE(ChunkTimesOf(t, *r, 3).forward_ns.empty());
  // In the pipeline, p = 2, m = 2, free sends, the heavier chunk 0 shows.
  // Stage 0: F0.0 [0, 400], F1.0 [400, 800]; stage 1: F0.0 [400, 800], F1.0
  // [800, 1200]; stage 0: F0.1 [800, 1000], F1.1 [1200, 1400]; stage 1: F0.1
  // [1200, 1400], B0.1 [1400, 1800], F1.1 [1800, 2000], B1.1 [2000, 2400];
  // stage 0: B0.1 [1800, 2200], B1.1 [2400, 2800]; stage 1: B0.0 [2400, 2800],
  // B1.0 [2800, 3200]; stage 0: B0.0 [2800, 3200], B1.0 [3200, 3600]. The even
  // split (forward 300 and 300) runs the same order in 3500.
  const StageTimes stage{600, 800, c.forward_ns, c.backward_ns};
  auto pipe = SimulatePipeline({stage, stage}, 2, PipelineSchedule::kInterleaved, 0, false, 2);
  ASSERT_TRUE(pipe.ok()) << pipe.status().message();
  EXPECT_EQ(pipe->makespan_ns, 3600);
  auto even = SimulatePipeline({StageTimes{600, 800}, StageTimes{600, 800}}, 2,
                               PipelineSchedule::kInterleaved, 0, false, 2);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(even->makespan_ns, 3500);
}

TEST(InterleavedStep, RefusesLayersThatDoNotSplitIntoChunks) {
  // 4 layers over pp x v = 4 x 2 = 8 chunks.
  const traces::Trace t = ChainTrace(4, 1000, 100, 200);
  auto r = Simulate(t, Interleaved(t, 4, 8, 2), TestHardware(1, 1, 10));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "plan: virtual_stages: interleaved the model's 4 layers do not divide by pp x v = 4 x "
            "2 = 8 (each chunk holds layers / (pp x v) layers)");
}

}  // namespace
}  // namespace ssdtrain::sim

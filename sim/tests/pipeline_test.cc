#include "sim/pipeline.h"

#include <gtest/gtest.h>

namespace ssdtrain::sim {
namespace {

TEST(Pipeline, OneFOneBBubbleMatchesClosedForm) {
  // Uniform stages F = 100, B = 200, free sends, p = 4, m = 8:
  // makespan (m + p − 1)(F + B) = 11 · 300 = 3300; bubble (p − 1)/(m + p − 1) = 3/11.
  std::vector<StageTimes> stages(4, StageTimes{100, 200});
  auto r = SimulatePipeline(stages, 8, PipelineSchedule::kOneFOneB, 0);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->makespan_ns, 3300);
  EXPECT_NEAR(r->bubble_fraction, 3.0 / 11.0, 1e-12);
  // The first stage holds p = 4 micro-batches in flight, the last one 1.
  EXPECT_EQ(r->max_in_flight.front(), 4);
  EXPECT_EQ(r->max_in_flight.back(), 1);
}

TEST(Pipeline, GpipeHasTheSameBubbleButHoldsEveryMicroBatch) {
  std::vector<StageTimes> stages(4, StageTimes{100, 200});
  auto r = SimulatePipeline(stages, 8, PipelineSchedule::kGpipe, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->makespan_ns, 3300);
  EXPECT_EQ(r->max_in_flight.front(), 8);
}

TEST(Pipeline, SingleStageIsSequential) {
  // p = 1: m · (F + B) = 3 · 300 = 900, no bubble.
  auto r = SimulatePipeline({StageTimes{100, 200}}, 3, PipelineSchedule::kOneFOneB, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->makespan_ns, 900);
  EXPECT_DOUBLE_EQ(r->bubble_fraction, 0.0);
}

TEST(Pipeline, RejectsNoMicroBatches) {
  EXPECT_FALSE(SimulatePipeline({StageTimes{1, 1}}, 0, PipelineSchedule::kGpipe, 0).ok());
}

TEST(Pipeline, RingAllReduceFollowsTheRingFormula) {
  // 2 · (4 − 1)/4 · 8 GB / 10 GB/s = 1.2 s; no latency.
  EXPECT_EQ(RingAllReduceNs(8'000'000'000, 4, 10, 0), 1'200'000'000);
  EXPECT_EQ(RingAllReduceNs(8'000'000'000, 1, 10, 0), 0);
}

}  // namespace
}  // namespace ssdtrain::sim

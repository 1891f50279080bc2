// A whole step's timeline (sim/step_timeline.h): every op of every stage's
// micro-batches inside its pipeline task, and the I/O lanes beside them.
#include "sim/step_timeline.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/tests/test_traces.h"

namespace ssdtrain::sim {
namespace {

using traces::Lane;
using traces::Span;

// Two layers: fwd0 1 s, fwd1 2 s, bwd1 1 s, bwd0 1 s; act0 (tensor 2, 1 GB)
// goes to the SSD behind fwd1 and comes back when bwd1 starts; pp 2, m 2,
// 1F1B, SSD 1 GB/s each way.
struct TwoStageOffload {
  traces::Trace trace = testing::ChainTrace(2, 1'000'000'000, 1'000'000'000, 1'000'000'000);
  traces::Plan plan;
  TwoStageOffload() {
    trace.ops[1].measured_ns = 2'000'000'000;
    plan = BasePlan(trace);
    plan.policy = "test";
    plan.pp = 2;
    plan.num_micro_batches = 2;
    plan.placements = {
        traces::Placement{2, traces::TensorAction::kOffloadSsd, /*prefetch_before=*/2, "a.bin"}};
  }
};

TEST(StepTimeline, EveryOpOfEveryMicroBatchSitsInItsPipelineTask) {
  TwoStageOffload in;
  auto r = Simulate(in.trace, in.plan, testing::TestHardware(1, 1, 100));
  ASSERT_TRUE(r.ok()) << r.status().message();
  // The pipeline's pass spans, by (stage, micro-batch, forward?).
  std::map<std::tuple<int, int, bool>, const Span*> passes;
  for (const Span& s : r->timeline.spans) {
    if (s.lane == Lane::kCompute && s.op == traces::kNoOp &&
        (s.name == "forward" || s.name == "backward")) {
      passes[{s.stage, s.micro_batch, s.name == "forward"}] = &s;
    }
  }
  ASSERT_EQ(passes.size(), 2u * 2u * 2u);
  std::map<std::tuple<int, int, traces::OpId>, int> seen;
  for (const Span& s : r->timeline.spans) {
    if (s.op == traces::kNoOp) continue;
    ASSERT_EQ(s.lane, Lane::kCompute);
    ++seen[{s.stage, s.micro_batch, s.op}];
    const bool forward = in.trace.ops[static_cast<size_t>(s.op)].phase == traces::Phase::kForward;
    const Span* pass = passes.at({s.stage, s.micro_batch, forward});
    EXPECT_GE(s.start_ns, pass->start_ns) << s.name << " stage " << s.stage;
    EXPECT_LE(s.end_ns, pass->end_ns) << s.name << " stage " << s.stage;
    EXPECT_EQ(s.end_ns - s.start_ns, in.trace.ops[static_cast<size_t>(s.op)].measured_ns)
        << s.name;  // the op's own duration
  }
  // 2 stages × 2 micro-batches × 4 ops, each once.
  EXPECT_EQ(seen.size(), 2u * 2u * 4u);
  for (const auto& [key, n] : seen) EXPECT_EQ(n, 1);
}

TEST(StepTimeline, EachMicroBatchWritesAndReadsOnItsStagesSsdLanes) {
  TwoStageOffload in;
  auto r = Simulate(in.trace, in.plan, testing::TestHardware(1, 1, 100));
  ASSERT_TRUE(r.ok()) << r.status().message();
  // (lane, stage, micro-batch) -> spans of act0's write and read-back.
  std::map<std::tuple<Lane, int, int>, int> io;
  for (const Span& s : r->timeline.spans) {
    if (s.lane == Lane::kSsdWrite || s.lane == Lane::kSsdRead) {
      EXPECT_EQ(s.tensor, 2);
      ++io[{s.lane, s.stage, s.micro_batch}];
    }
  }
  for (Lane lane : {Lane::kSsdWrite, Lane::kSsdRead}) {
    for (int stage = 0; stage < 2; ++stage) {
      for (int mb = 0; mb < 2; ++mb) {
        EXPECT_EQ((io[{lane, stage, mb}]), 1)
            << traces::ToString(lane) << " stage " << stage << " micro-batch " << mb;
      }
    }
  }
  EXPECT_EQ(io.size(), 2u * 2u * 2u);
  EXPECT_EQ(r->metrics.ssd_bytes_read, 2'000'000'000);  // the busiest stage's, m times
}

TEST(StepTimeline, RecordingItChangesNoFigure) {
  TwoStageOffload in;
  SimulateOptions quiet;
  quiet.record_timeline = false;
  auto with = Simulate(in.trace, in.plan, testing::TestHardware(1, 1, 100));
  auto without = Simulate(in.trace, in.plan, testing::TestHardware(1, 1, 100), quiet);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_TRUE(without->timeline.spans.empty());
  EXPECT_EQ(traces::ToJson(with->metrics), traces::ToJson(without->metrics));
  EXPECT_EQ(PredictionToJson(*with), PredictionToJson(*without));
}

}  // namespace
}  // namespace ssdtrain::sim

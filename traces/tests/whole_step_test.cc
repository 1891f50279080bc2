// UnrollStep and StageOrder: a stage's whole step of m micro-batches.
#include "traces/whole_step.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "traces/storage_plan.h"
#include "traces/tests/small_trace.h"
#include "traces/validate.h"

namespace ssdtrain::traces {
namespace {

// Micro-batches forwarded and not yet backwarded, at most, over `order`.
int64_t MaxInFlight(const std::vector<StageTask>& order) {
  int64_t now = 0, most = 0;
  for (const StageTask& t : order) {
    now += t.forward ? 1 : -1;
    most = std::max(most, now);
  }
  return most;
}

TEST(StageOrder, OneFOneBHoldsPMinusIMicroBatchesOnStageI) {
  for (int64_t p = 1; p <= 5; ++p) {
    for (int64_t stage = 0; stage < p; ++stage) {
      for (int64_t m = 1; m <= 7; ++m) {
        const auto order = StageOrder(Schedule::kOneFOneB, p, stage, m);
        ASSERT_EQ(order.size(), static_cast<size_t>(2 * m));
        // Stage i holds min(p − i, m) micro-batches at once (PipeDream-Flush).
        EXPECT_EQ(MaxInFlight(order), std::min(p - stage, m)) << p << " " << stage << " " << m;
        // Every micro-batch forwarded before its backward; backwards in order.
        int64_t next_backward = 0;
        std::vector<bool> forwarded(static_cast<size_t>(m), false);
        for (const StageTask& t : order) {
          if (t.forward) {
            forwarded[static_cast<size_t>(t.micro_batch)] = true;
          } else {
            EXPECT_TRUE(forwarded[static_cast<size_t>(t.micro_batch)]);
            EXPECT_EQ(t.micro_batch, next_backward++);
          }
        }
      }
    }
  }
}

TEST(StageOrder, GpipeHoldsEveryMicroBatch) {
  const auto order = StageOrder(Schedule::kGpipe, 4, 2, 6);
  EXPECT_EQ(MaxInFlight(order), 6);
  EXPECT_EQ(order.front(), (StageTask{true, 0}));
  EXPECT_EQ(order[6], (StageTask{false, 0}));
}

TEST(ParseSchedule, NamesTheFieldAndWhatItExpects) {
  EXPECT_EQ(*ParseSchedule("gpipe"), Schedule::kGpipe);
  EXPECT_EQ(*ParseSchedule("1f1b"), Schedule::kOneFOneB);
  auto bad = ParseSchedule("interleaved", "p.json: schedule");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "p.json: schedule: expected \"1f1b\" or \"gpipe\", got \"interleaved\"");
}

Plan OffloadA(const Trace& t, int64_t m, std::string schedule) {
  Plan p;
  p.model = t.header.model;
  p.trace_fingerprint = Fingerprint(t);
  p.num_micro_batches = m;
  p.schedule = std::move(schedule);
  // a (2) to SSD, read back before gelu_bwd (op 3).
  p.placements.push_back(Placement{2, TensorAction::kOffloadSsd, 3, "a.bin", 0, 0});
  return p;
}

TEST(UnrollStep, OneMicroBatchIsTheTraceItself) {
  const Trace t = testing::SmallTrace();
  auto w = UnrollStep(t, OffloadA(t, 1, "1f1b"), "p.json");
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(Fingerprint(w->trace), Fingerprint(t));
  EXPECT_EQ(w->plan.trace_fingerprint, Fingerprint(t));
  EXPECT_EQ(w->plan.placements.size(), 1u);
}

TEST(UnrollStep, EachMicroBatchHasItsOwnActivationsAndSharesWeightsAndGradients) {
  const Trace t = testing::SmallTrace();
  auto w = UnrollStep(t, OffloadA(t, 3, "gpipe"), "p.json");
  ASSERT_TRUE(w.ok()) << w.status().message();
  const Trace& u = w->trace;
  // Shared: x (0), w (1) and the weight gradient gw (7). Per micro-batch:
  // a, b, l, v, gb: 8 + 2·5 = 18 tensors; 5 ops × 3 micro-batches.
  EXPECT_EQ(u.tensors.size(), 18u);
  EXPECT_EQ(u.ops.size(), 15u);
  ASSERT_TRUE(Validate(u, "unrolled").ok()) << Validate(u, "unrolled").message();
  // GPipe: three forwards (3 ops each), then three backwards (2 ops each).
  EXPECT_EQ(u.ops[3].name, "mb1.fc");
  EXPECT_EQ(u.ops[9].name, "mb0.gelu_bwd");
  EXPECT_EQ(u.ops[10].name, "mb0.fc_wgrad");
  EXPECT_EQ(w->original_op[10], 4);  // fc_wgrad
  EXPECT_EQ(u.ops[10].micro_batch, 0);
  EXPECT_EQ(w->original_op[3], 0);  // mb1.fc
  EXPECT_EQ(u.ops[3].micro_batch, 1);
  // gw is produced by micro-batch 0's wgrad; 1 and 2 accumulate into it.
  EXPECT_EQ(u.tensor(7).producer, 10);
  EXPECT_EQ(u.ops[12].outputs, (std::vector<TensorId>{7}));
  EXPECT_EQ(u.ops[14].outputs, (std::vector<TensorId>{7}));
  // w is read by every micro-batch's forward gemm.
  EXPECT_EQ(u.tensor(1).consumers, (std::vector<OpId>{0, 3, 6}));
  // Micro-batch 1's view still points at micro-batch 1's b.
  const Tensor& v1 = u.tensor(u.ops[11].inputs[1]);  // mb1.gelu_bwd reads (l, v)
  EXPECT_EQ(v1.name, "mb1.v");
  EXPECT_EQ(u.tensor(*v1.alias_of).name, "mb1.b");

  const Plan& p = w->plan;
  ASSERT_EQ(p.placements.size(), 3u);
  EXPECT_EQ(p.placements[1].file, "mb1-a.bin");
  EXPECT_EQ(p.placements[2].file, "mb2-a.bin");
  EXPECT_EQ(u.op(p.placements[2].prefetch_before).name, "mb2.gelu_bwd");
  EXPECT_EQ(u.tensor(p.placements[2].tensor).name, "mb2.a");
  auto sp = ResolvePlan(u, p, "p.json");
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  EXPECT_EQ(sp->ssd_bytes, 3 * 128);
  EXPECT_TRUE(sp->of(7).persistent());
}

TEST(UnrollStep, GpipeHoldsEveryMicroBatchWhere1F1BHoldsOneOnASingleStage) {
  const Trace t = testing::SmallTrace();
  Plan keep = OffloadA(t, 3, "gpipe");
  keep.placements.clear();
  auto peak = [&](const std::string& schedule) {
    keep.schedule = schedule;
    auto w = UnrollStep(t, keep, "keep");
    EXPECT_TRUE(w.ok());
    auto sp = ResolvePlan(w->trace, w->plan, "keep");
    EXPECT_TRUE(sp.ok());
    return ComputeStaticPeaks(w->trace, *sp).activation_bytes;
  };
  // One micro-batch peaks at the loss: a, b and l, 3 × 128 bytes. GPipe ends
  // its forwards holding a and b of all three (l goes at its backward) and l of
  // the last: after the third loss, 3 × 384. 1F1B on one stage: one at a time.
  EXPECT_EQ(peak("gpipe"), 3 * 384);
  EXPECT_EQ(peak("1f1b"), 384);
}

TEST(Validate, OnlyTensorsResidentAllStepAccumulate) {
  Trace t = testing::SmallTrace();
  // gelu_bwd (op 3) also writing b (3), an activation produced by op 1.
  t.ops[3].outputs.push_back(3);
  const Status st = Validate(t, "t.json");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ops[3].outputs[1]: tensor 3 names op 1 as its producer"),
            std::string::npos)
      << st.message();
}

TEST(UnrollStep, RefusesATraceThatIsAlreadyAWholeStep) {
  const Trace t = testing::SmallTrace();
  auto w = UnrollStep(t, OffloadA(t, 2, "1f1b"), "p.json");
  ASSERT_TRUE(w.ok());
  auto again = UnrollStep(w->trace, w->plan, "p.json");
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already holds several micro-batches"),
            std::string::npos);
  Plan bad = OffloadA(t, 0, "1f1b");
  EXPECT_EQ(UnrollStep(t, bad, "p.json").status().message(),
            "p.json: num_micro_batches: expected at least 1, got 0");
}

}  // namespace
}  // namespace ssdtrain::traces

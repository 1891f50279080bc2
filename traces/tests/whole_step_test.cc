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
  EXPECT_EQ(*ParseSchedule("interleaved"), Schedule::kInterleaved);
  auto bad = ParseSchedule("zero-bubble", "p.json: schedule");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "p.json: schedule: expected \"1f1b\", \"gpipe\" or \"interleaved\", got "
            "\"zero-bubble\"");
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

// The closed form (WholeStepStaticPeaks: one micro-batch's peak plus k − 1
// times what a micro-batch holds between its passes) equals the static peaks
// of the unrolled step, for every schedule, stage, micro-batch count and kind
// of placement: a kept, offloaded without a point, with a point in forward
// (op 2), with a point at the end of the forward pass (op 3, also its
// prefetch point), recomputed; under both weight_grads settings (set_to_none:
// gw, op 4's output, allocated by micro-batch 0's backward and kept to the
// step's end, traces::WholeStepPeak).
TEST(WholeStepStaticPeaks, EqualsTheUnrolledStepsStaticPeaks) {
  Trace t = testing::SmallTrace();
  std::vector<std::vector<Placement>> plans;
  plans.push_back({});
  plans.push_back({Placement{2, TensorAction::kOffloadSsd, 4, "a.bin", 0, 0}});
  for (const OpId evict : {OpId{2}, OpId{3}, OpId{4}}) {
    for (const OpId prefetch : {OpId{3}, OpId{4}}) {
      Placement p{2, TensorAction::kOffloadSsd, prefetch, "a.bin", 0, 0};
      p.evict_before = evict;
      plans.push_back({p});
    }
  }
  plans.push_back({Placement{2, TensorAction::kRecompute, kNoOp, "", 0, 0}});
  int checked = 0;
  for (const char* weight_grads : {"persistent", "set_to_none"}) {
    t.header.weight_grads = weight_grads;
    for (const char* schedule : {"1f1b", "gpipe"}) {
      for (int64_t p = 1; p <= 4; ++p) {
        for (int64_t stage = 0; stage < p; ++stage) {
          t.header.pp = p;
          t.header.stage = stage;
          for (int64_t m = 1; m <= 6; ++m) {
            for (const auto& placements : plans) {
              Plan plan = OffloadA(t, m, schedule);
              plan.placements = placements;
              auto w = UnrollStep(t, plan, "p.json");
              ASSERT_TRUE(w.ok()) << w.status().message();
              auto unrolled = ResolvePlan(w->trace, w->plan, "unrolled");
              ASSERT_TRUE(unrolled.ok()) << unrolled.status().message();
              auto one = ResolvePlan(t, plan, "one");
              ASSERT_TRUE(one.ok()) << one.status().message();
              const int64_t k = schedule == std::string("gpipe") ? m : std::min(p - stage, m);
              for (const int64_t alignment : {int64_t{1}, int64_t{256}}) {
                const StaticPeaks want = ComputeStaticPeaks(w->trace, *unrolled, alignment);
                const StaticPeaks got = WholeStepStaticPeaks(t, *one, k, alignment, m);
                EXPECT_EQ(got.device_bytes, want.device_bytes)
                    << weight_grads << " " << schedule << " p " << p << " stage " << stage << " m "
                    << m;
                EXPECT_EQ(got.activation_bytes, want.activation_bytes)
                    << schedule << " p " << p << " stage " << stage << " m " << m;
                ++checked;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 2 * 10 * 6 * 9 * 2);
}

// A point at the end of the forward pass holds the storage until the next pass
// starts, never while the micro-batch waits. Between its passes a micro-batch
// holds b and l (128 bytes each: the loss's input and output, read by op3)
// and, kept, a: 1F1B stage 0 of 4 holds four micro-batches at once, so a point
// at the pass end saves 3 × 128 bytes where keeping a costs them.
TEST(WholeStepStaticPeaks, APointAtThePassEndIsNotHeldWhileTheMicroBatchWaits) {
  Trace t = testing::SmallTrace();
  t.header.pp = 4;
  t.header.stage = 0;
  Plan plan = OffloadA(t, 8, "1f1b");
  plan.placements[0].evict_before = 4;  // in backward: the end of the forward pass
  auto one = ResolvePlan(t, plan, "one");
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(BetweenPasses(t, *one).activation_bytes, 256);
  auto w = UnrollStep(t, plan, "p.json");
  ASSERT_TRUE(w.ok());
  // Micro-batch 0's forward is ops 0-2; its point is micro-batch 1's first op.
  EXPECT_EQ(w->trace.op(3).micro_batch, 1);
  EXPECT_EQ(w->trace.op(3).phase, Phase::kForward);
  EXPECT_EQ(w->plan.placements[0].evict_before, 3);
  Plan keep = plan;
  keep.placements.clear();
  auto kept = ResolvePlan(t, keep, "keep");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(BetweenPasses(t, *kept).activation_bytes, 384);
  EXPECT_EQ(WholeStepStaticPeaks(t, *kept, 4).activation_bytes -
                WholeStepStaticPeaks(t, *one, 4).activation_bytes,
            3 * 128);
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

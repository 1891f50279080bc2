#include "traces/uniform_plans.h"

#include <gtest/gtest.h>

#include "traces/storage_plan.h"
#include "traces/tests/small_trace.h"

namespace ssdtrain::traces {
namespace {

using testing::SmallTrace;

TEST(UniformPlans, CandidatesAreSavedOffloadableActivationsOnePerStorage) {
  // SmallTrace: a (2) is saved and offloadable; v (5) is a saved view of b (3),
  // which op1 produces, so b's storage is not resident all step and v stands
  // for it although v itself has no producer op. 64 elements of fp16: 128 B.
  const Trace t = SmallTrace();
  EXPECT_EQ(OffloadCandidates(t), (std::vector<TensorId>{2, 5}));
  EXPECT_EQ(OffloadCandidates(t, /*min_bytes=*/128), (std::vector<TensorId>{2, 5}));
  EXPECT_TRUE(OffloadCandidates(t, /*min_bytes=*/129).empty());
}

TEST(UniformPlans, AStorageResidentAllStepIsNeverACandidate) {
  // v made a view of the step input x (0): its storage has no producer, so it
  // is resident all step and ResolvePlan would refuse to offload it.
  Trace t = SmallTrace();
  t.tensors[5].alias_of = 0;
  EXPECT_EQ(OffloadCandidates(t), (std::vector<TensorId>{2}));
  EXPECT_TRUE(ResolvePlan(t, OffloadAllPlan(t), "offload-all").ok());
}

TEST(UniformPlans, OffloadAllNamesEachFileAfterItsStorageAndResolves) {
  const Trace t = SmallTrace();
  const Plan plan = OffloadAllPlan(t);
  EXPECT_EQ(plan.policy, "offload-ssd");
  EXPECT_EQ(plan.model, "small");
  EXPECT_EQ(plan.trace_fingerprint, Fingerprint(t));
  ASSERT_EQ(plan.placements.size(), 2u);
  EXPECT_EQ(plan.placements[0].tensor, 2);
  EXPECT_EQ(plan.placements[0].file, "t2.bin");
  EXPECT_EQ(plan.placements[1].tensor, 5);
  EXPECT_EQ(plan.placements[1].file, "t3.bin");  // v's storage is b's
  for (const Placement& p : plan.placements) {
    EXPECT_EQ(p.action, TensorAction::kOffloadSsd);
    EXPECT_EQ(p.device, 0);
    EXPECT_EQ(p.offset, 0);
  }
  // Backward has one module consuming saved activations per op here
  // (gelu_bwd, op 3, reads v; fc_wgrad, op 4, reads a): two ahead of either
  // is clamped to the first module, op 3.
  EXPECT_EQ(plan.placements[0].prefetch_before, 3);
  EXPECT_EQ(plan.placements[1].prefetch_before, 3);
  auto sp = ResolvePlan(t, plan, "offload-all");
  ASSERT_TRUE(sp.ok()) << sp.status().message();
  EXPECT_EQ(sp->ssd_bytes, 2 * 128);
}

TEST(UniformPlans, BothKeepTheLayoutTheyAreGiven) {
  const Trace t = SmallTrace();
  Plan layout = PlanTemplate(t, "anything");
  layout.dp = 4;
  layout.num_micro_batches = 8;
  layout.schedule = "gpipe";
  layout.memory_budget_bytes = 1 << 20;
  layout.placements.push_back(Placement{2, TensorAction::kRecompute, kNoOp, "", 0, 0});
  layout.prediction = StepMetrics{};
  for (const Plan& p : {KeepAllPlan(t, layout), OffloadAllPlan(t, layout)}) {
    EXPECT_EQ(p.dp, 4);
    EXPECT_EQ(p.num_micro_batches, 8);
    EXPECT_EQ(p.schedule, "gpipe");
    EXPECT_EQ(p.memory_budget_bytes, 1 << 20);
    EXPECT_FALSE(p.prediction.has_value());
  }
  EXPECT_EQ(KeepAllPlan(t, layout).policy, "keep");
  EXPECT_TRUE(KeepAllPlan(t, layout).placements.empty());
  EXPECT_EQ(OffloadAllPlan(t, layout).placements.size(), 2u);
}

}  // namespace
}  // namespace ssdtrain::traces

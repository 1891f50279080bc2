// Weight gradients under header weight_grads "set_to_none" (traces/storage_plan.h,
// "Residency"): allocated by the backward op that first writes them, freed after
// the optimizer; in a whole step kept from micro-batch 0's backward on.
//
// The small trace (small_trace.h) plus one optimizer op reading gw: every
// storage is 128 bytes. Keep plan, op by op (x, w resident all step):
//   persistent gw:  384 | op0 +a 512 | op1 +b 640 | op2 +l 768 | op3 +gb 896 ...
//   set_to_none:    256 | op0 +a 384 | op1 +b 512 | op2 +l 640 | op3 +gb 768,
//                   then l and b go | op4 +gw 640 | op5 reads gw, frees it.
// The peak (op3) is one gradient's 128 bytes lower under set_to_none.
#include <gtest/gtest.h>

#include "traces/io.h"
#include "traces/storage_plan.h"
#include "traces/tests/small_trace.h"
#include "traces/uniform_plans.h"
#include "traces/whole_step.h"

namespace ssdtrain::traces {
namespace {

constexpr int64_t kB = 128;  // every storage of the small trace

Trace WithOptimizer(const std::string& weight_grads) {
  Trace t = testing::SmallTrace();
  t.header.weight_grads = weight_grads;
  Op sgd;
  sgd.id = static_cast<OpId>(t.ops.size());
  sgd.name = "sgd";
  sgd.kind = OpKind::kOptimizer;
  sgd.phase = Phase::kOptimizer;
  sgd.inputs = {1, 7};
  t.ops.push_back(sgd);
  t.tensors[1].consumers.push_back(sgd.id);
  t.tensors[7].consumers.push_back(sgd.id);
  return t;
}

Plan Keep(const Trace& t, int64_t m, const std::string& schedule) {
  Plan p = KeepAllPlan(t);
  p.num_micro_batches = m;
  p.schedule = schedule;
  return p;
}

StaticPeaks Peaks(const Trace& t, int64_t m = 1, const std::string& schedule = "1f1b") {
  auto w = UnrollStep(t, Keep(t, m, schedule), "p.json");
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  auto sp = ResolvePlan(w->trace, w->plan, "p.json");
  EXPECT_TRUE(sp.ok()) << sp.status().ToString();
  return ComputeStaticPeaks(w->trace, *sp);
}

TEST(SetToNone, AWeightGradientLivesFromItsProducerToTheOptimizer) {
  const Trace t = WithOptimizer("set_to_none");
  auto sp = ResolvePlan(t, Keep(t, 1, "1f1b"), "p.json");
  ASSERT_TRUE(sp.ok()) << sp.status().ToString();
  const StorageInfo& gw = sp->of(7);
  EXPECT_EQ(gw.role, StorageRole::kWeightGradient);
  EXPECT_FALSE(gw.persistent());
  EXPECT_EQ(gw.producer, 4);
  EXPECT_EQ(gw.last_use, 5);
  EXPECT_EQ(sp->persistent_bytes, 2 * kB);  // x and w
  const Trace persistent = WithOptimizer("persistent");
  auto psp = ResolvePlan(persistent, Keep(persistent, 1, "1f1b"), "p.json");
  ASSERT_TRUE(psp.ok());
  EXPECT_EQ(psp->of(7).role, StorageRole::kPersistent);
  EXPECT_EQ(psp->persistent_bytes, 3 * kB);
}

TEST(SetToNone, TheOneMicroBatchPeakIsOneGradientLower) {
  const StaticPeaks persistent = Peaks(WithOptimizer("persistent"));
  const StaticPeaks set_to_none = Peaks(WithOptimizer("set_to_none"));
  EXPECT_EQ(persistent.device_bytes, 7 * kB);
  EXPECT_EQ(set_to_none.device_bytes, 6 * kB);
  EXPECT_EQ(persistent.activation_bytes, set_to_none.activation_bytes);  // gradients are not
}

TEST(SetToNone, AGradientReadByNothingLivesToTheStepsLastOp) {
  Trace t = testing::SmallTrace();  // gw (7) has no consumer: the step's result
  t.header.weight_grads = "set_to_none";
  auto sp = ResolvePlan(t, Keep(t, 1, "1f1b"), "p.json");
  ASSERT_TRUE(sp.ok());
  EXPECT_EQ(sp->of(7).role, StorageRole::kWeightGradient);
  EXPECT_EQ(sp->of(7).last_use, static_cast<OpId>(t.ops.size() - 1));
}

TEST(SetToNone, LaterMicroBatchesRunWithEveryGradientResident) {
  // 1F1B, one stage, m = 2: F0 B0 F1 B1. Micro-batch 0's backward allocates gw
  // and micro-batch 1's accumulates into it: B1 peaks at x, w, gw, a, b, l, gb
  // (896), the persistent step's peak. The closed form agrees exactly.
  const Trace t = WithOptimizer("set_to_none");
  EXPECT_EQ(Peaks(t, 2).device_bytes, 7 * kB);
  EXPECT_EQ(Peaks(WithOptimizer("persistent"), 2).device_bytes, 7 * kB);
  auto sp = ResolvePlan(t, Keep(t, 1, "1f1b"), "p.json");
  ASSERT_TRUE(sp.ok());
  EXPECT_TRUE(LaterPassesHoldGradients(t, 2));
  EXPECT_FALSE(LaterPassesHoldGradients(t, 1));
  EXPECT_FALSE(LaterPassesHoldGradients(WithOptimizer("persistent"), 2));
  EXPECT_EQ(WholeStepStaticPeaks(t, *sp, 1, 1, 2).device_bytes, 7 * kB);
  EXPECT_EQ(WholeStepStaticPeaks(t, *sp, 1, 1, 1).device_bytes, 6 * kB);
  // The unrolled trace shares gw between the micro-batches: one storage.
  auto w = UnrollStep(t, Keep(t, 2, "1f1b"), "p.json");
  ASSERT_TRUE(w.ok());
  auto wsp = ResolvePlan(w->trace, w->plan, "p.json");
  ASSERT_TRUE(wsp.ok());
  int gradients = 0;
  for (const StorageInfo& s : wsp->storages) {
    gradients += s.role == StorageRole::kWeightGradient ? 1 : 0;
  }
  EXPECT_EQ(gradients, 1);
}

TEST(SetToNone, GpipesClosedFormTakesTheFirstBackwardWithoutTheGradients) {
  // GPipe, m = 2: F0 F1 B0 B1. B0 runs beside micro-batch 1's a, b, l (384)
  // with gw not yet made: 256 + 384 + 512 = 1152, one gradient below the
  // persistent 1280. B1 holds gw but nothing of micro-batch 0: 896. The closed
  // form (WholeStepPeak with k = m) takes the higher, 1152, as the replay holds.
  const Trace t = WithOptimizer("set_to_none");
  EXPECT_EQ(Peaks(t, 2, "gpipe").device_bytes, 9 * kB);
  EXPECT_EQ(Peaks(WithOptimizer("persistent"), 2, "gpipe").device_bytes, 10 * kB);
  auto sp = ResolvePlan(t, Keep(t, 1, "1f1b"), "p.json");
  ASSERT_TRUE(sp.ok());
  EXPECT_EQ(WholeStepStaticPeaks(t, *sp, 2, 1, 2).device_bytes, 9 * kB);
}

TEST(SetToNone, TheHeaderFieldRoundTripsAndABadValueIsNamed) {
  const Trace t = WithOptimizer("set_to_none");
  nlohmann::json j = ToJson(t);
  EXPECT_EQ(j.at("header").at("weight_grads"), "set_to_none");
  auto back = TraceFromJson(j, "t.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->header.weight_grads, "set_to_none");
  EXPECT_FALSE(ToJson(WithOptimizer("persistent")).at("header").contains("weight_grads"));
  j["header"]["weight_grads"] = "lazy";
  EXPECT_EQ(TraceFromJson(j, "t.json").status().message(),
            "t.json: header.weight_grads: unknown value \"lazy\"; expected \"persistent\" or "
            "\"set_to_none\"");
}

TEST(SetToNone, TheHeaderFieldChangesTheFingerprint) {
  EXPECT_NE(Fingerprint(WithOptimizer("persistent")), Fingerprint(WithOptimizer("set_to_none")));
}

}  // namespace
}  // namespace ssdtrain::traces

// ModelConfig::weight_grads: Megatron-LM's persistent grad buffer by default,
// set_to_none on request, carried into the trace's header, where traces/ decides
// what it means (traces/storage_plan.h, "Residency").
#include <gtest/gtest.h>

#include "models/build_trace.h"
#include "models/model_config.h"
#include "models/tests/test_configs.h"
#include "traces/storage_plan.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::models {
namespace {

using testing::Gpt;
using testing::MustBuild;

TEST(WeightGrads, ConfigFieldDefaultsToMegatronAndRoundTrips) {
  nlohmann::json j = ToJson(Gpt(2, 256, 512, 8, 1));
  EXPECT_FALSE(j.contains("weight_grads"));
  j["weight_grads"] = "set_to_none";
  Result<ModelConfig> c = ModelConfigFromJson(j, "x.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->weight_grads, "set_to_none");
  EXPECT_EQ(ToJson(*c).at("weight_grads"), "set_to_none");
  j["weight_grads"] = "none";
  EXPECT_EQ(ModelConfigFromJson(j, "x.json").status().message(),
            "x.json: weight_grads: unknown value \"none\", expected persistent or set_to_none "
            "(persistent: one grad buffer all step; set_to_none: allocated in backward)");
}

TEST(WeightGrads, SetToNoneTakesEveryWeightGradientOutOfThePersistentBytes) {
  ModelConfig c = Gpt(2, 256, 512, 8, 1);
  const traces::Trace persistent = MustBuild(c);
  c.weight_grads = "set_to_none";
  const traces::Trace set_to_none = MustBuild(c);
  EXPECT_EQ(persistent.header.weight_grads, "persistent");
  EXPECT_EQ(set_to_none.header.weight_grads, "set_to_none");
  auto a = traces::ResolvePlan(persistent, traces::KeepAllPlan(persistent), "p");
  auto b = traces::ResolvePlan(set_to_none, traces::KeepAllPlan(set_to_none), "p");
  ASSERT_TRUE(a.ok() && b.ok());
  int64_t grads = 0, produced_in_backward = 0;
  for (const traces::StorageInfo& s : b->storages) {
    if (s.role != traces::StorageRole::kWeightGradient) continue;
    grads += s.bytes;
    const traces::Op& first = set_to_none.op(s.producer);
    const traces::Op& last = set_to_none.op(s.last_use);
    produced_in_backward += first.phase == traces::Phase::kBackward ? 1 : 0;
    EXPECT_EQ(last.phase, traces::Phase::kOptimizer) << set_to_none.tensor(s.root).name;
  }
  ASSERT_GT(grads, 0);
  EXPECT_EQ(a->persistent_bytes - b->persistent_bytes, grads);
  EXPECT_GT(produced_in_backward, 0);
}

}  // namespace
}  // namespace ssdtrain::models

// recompute-full on every N-th block (PolicyOptions::recompute_every,
// torchtitan's selective per-layer checkpointing): the blocks N, 2N, ... of the
// stage, counted from 1 in forward order, are rebuilt as recompute-full
// rebuilds every block, and the others keep what they save.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "sim/policy.h"
#include "sim/tests/test_traces.h"

namespace ssdtrain::sim {
namespace {

// Llama-3-8B's shapes at `layers` blocks, sequence 2048.
traces::Trace Llama(int64_t layers) {
  Result<models::ModelConfig> c = models::LoadModelConfig(std::string(ConfiguredSourceDir()) +
                                                          "/configs/models/llama-3-8b.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  models::ModelConfig m = *c;
  m.layers = layers;
  m.seq_len = 2048;
  Result<traces::Trace> t = models::BuildTrace(m, 0);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : traces::Trace{};
}

// The recomputed tensors of `plan`, by block.
std::map<int, std::set<traces::TensorId>> RecomputedByBlock(const traces::Trace& t,
                                                            const traces::Plan& plan) {
  std::map<int, std::set<traces::TensorId>> out;
  for (const traces::Placement& p : plan.placements) {
    if (p.action == traces::TensorAction::kRecompute)
      out[t.tensor(p.tensor).layer].insert(p.tensor);
  }
  return out;
}

TEST(RecomputeEvery, RebuildsEveryNthBlockAsRecomputeFullDoes) {
  const traces::Trace t = Llama(6);
  const HardwareOptions hw = testing::TestHardware(1, 10, 100);
  Result<traces::Plan> full = MakeFixedPlan("recompute-full", t, hw, BasePlan(t));
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  const auto all = RecomputedByBlock(t, *full);
  ASSERT_EQ(all.size(), 6u);  // every block rebuilds something
  for (int64_t every : {2, 3, 4}) {
    SCOPED_TRACE("every " + std::to_string(every));
    PolicyOptions o;
    o.recompute_every = every;
    Result<traces::Plan> some = MakeFixedPlan("recompute-full", t, hw, BasePlan(t), o);
    ASSERT_TRUE(some.ok()) << some.status().ToString();
    EXPECT_EQ(some->policy, "recompute-full");
    const auto got = RecomputedByBlock(t, *some);
    // The blocks in forward order: 0..5 here, so N-th is index N-1, 2N-1, ...
    std::map<int, std::set<traces::TensorId>> want;
    int position = 0;
    for (const auto& [block, tensors] : all) {
      if (++position % every == 0) want[block] = tensors;
    }
    EXPECT_EQ(got, want);
  }
  PolicyOptions bad;
  bad.recompute_every = 0;
  Result<traces::Plan> refused = MakeFixedPlan("recompute-full", t, hw, BasePlan(t), bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "--recompute-every: expected a positive integer, got 0");
}

}  // namespace
}  // namespace ssdtrain::sim

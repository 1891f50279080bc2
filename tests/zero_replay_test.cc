// ZeRO-2 and 3 replayed in one process (a shard group of one rank: the
// gathers and reduce-scatters run as the executor's ops, in order) on the CPU
// backend: the executor's activation and device peaks equal the simulator's
// to the byte, keep and recompute alike (a recomputed forward op reads the
// weights the backward gathered again), with every tensor verified. The micro-GPT at ZeRO-3 over 8
// ranks is also checked for its shards' sizes.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "exec/replay.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "tests/fast_io_cpu.h"
#include "tests/micro_gpt.h"
#include "tests/recompute_runs.h"
#include "tests/verified_replay.h"
#include "traces/collective_kind.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;

traces::Trace MicroGpt(int64_t zero_stage, int64_t dp) {
  nlohmann::json j = testing::MicroGptConfig();
  j["zero_stage"] = zero_stage;
  j["dp"] = dp;
  auto config = models::ModelConfigFromJson(j, "micro-gpt");
  EXPECT_TRUE(config.ok()) << config.status().message();
  auto trace = models::BuildTrace(*config, 0);
  EXPECT_TRUE(trace.ok()) << trace.status().message();
  return trace.ok() ? *trace : traces::Trace{};
}

class ZeroReplay : public testing::VerifiedReplayTest {
 protected:
  // Simulates and replays `policy`'s plan of `trace` with `m` micro-batches;
  // the peaks must agree to the byte.
  void Agree(const traces::Trace& trace, const std::string& policy, int64_t m) {
    const sim::HardwareOptions hw = testing::FastIoCpu();
    traces::Plan base = sim::BasePlan(trace);
    base.num_micro_batches = m;
    sim::PolicyOptions po;
    po.min_offload_bytes = 0;
    auto plan = sim::MakeFixedPlan(policy, trace, hw, base, po);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    auto predicted = sim::Simulate(trace, *plan, hw);
    ASSERT_TRUE(predicted.ok()) << predicted.status().message();
    exec::ReplayOptions ro = Verified();
    ro.wait_for_writes = true;
    auto run = exec::Replay(trace, *plan, ro, policy);
    ASSERT_TRUE(run.ok()) << run.status().message();
    EXPECT_TRUE(run->verified);
    EXPECT_EQ(run->metrics.peak_activation_bytes, predicted->metrics.peak_activation_bytes);
    EXPECT_EQ(run->metrics.peak_gpu_bytes, predicted->metrics.peak_gpu_bytes);
    EXPECT_TRUE(fs::is_empty(dir_)) << "offload files left behind";
  }
};

TEST_F(ZeroReplay, Zero3PeaksAreThePredictionsToTheByte) {
  const traces::Trace t = MicroGpt(3, 1);
  int gathers = 0;
  for (const traces::Op& op : t.ops) gathers += op.name.ends_with(traces::kZeroAllGatherSuffix);
  ASSERT_GT(gathers, 0);
  for (const std::string policy : {"keep", "recompute-full", "offload-ssd"}) {
    for (int64_t m : {1, 2}) {
      SCOPED_TRACE(policy + ", " + std::to_string(m) + " micro-batches");
      Agree(t, policy, m);
    }
  }
}

// Under ZeRO-3 a recompute reads the weights the backward gathered again, as
// FSDP's pre-backward all-gather serves the checkpointed region's re-run: no
// forward gather runs again, in the simulation or in the replay, and each
// recomputed op runs once a micro-batch, for all the outputs it rebuilds (the
// flash attention's context and lse in one run). A Llama block: its backward
// gathers every weight its forward read (no biases, which a backward reads
// not and so does not gather: a GPT block's recompute gathers those again).
TEST_F(ZeroReplay, Zero3RecomputeReadsTheBackwardsGatherAndRunsEachOpOnce) {
  nlohmann::json j = testing::MicroGptConfig();
  j["name"] = "micro-llama";
  j["family"] = "llama";
  j["attention"] = "flash";
  j["zero_stage"] = 3;
  j["hidden"] = 256;  // every saved tensor a recompute candidate (traces::OffloadCandidates)
  j["heads"] = 4;
  j["seq_len"] = 128;
  auto config = models::ModelConfigFromJson(j, "micro-llama");
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto built = models::BuildTrace(*config, 0);
  ASSERT_TRUE(built.ok()) << built.status().message();
  const traces::Trace& t = *built;
  const sim::HardwareOptions hw = testing::FastIoCpu();
  auto plan = sim::MakeFixedPlan("recompute-full", t, hw, sim::BasePlan(t));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  sim::SimulateOptions so;
  so.record_timeline = true;
  auto predicted = sim::Simulate(t, *plan, hw, so);
  ASSERT_TRUE(predicted.ok()) << predicted.status().message();
  auto run = exec::Replay(t, *plan, Verified(), "recompute-full");
  ASSERT_TRUE(run.ok()) << run.status().message();
  EXPECT_TRUE(run->verified);
  // The recompute runs, by op, in each timeline.
  const std::map<std::string, int> simulated = testing::SimulatedRecomputes(predicted->timeline);
  const std::map<std::string, int> replayed = testing::ReplayedRecomputes(run->timeline);
  ASSERT_FALSE(simulated.empty());
  EXPECT_EQ(simulated, replayed);
  for (const auto& [op, runs] : simulated) {
    EXPECT_FALSE(op.ends_with(traces::kZeroAllGatherSuffix)) << op;
    EXPECT_EQ(runs, 1) << op;
  }
  EXPECT_EQ(simulated.count("L1.attn.flash"), 1u);
  EXPECT_EQ(run->metrics.peak_gpu_bytes, predicted->metrics.peak_gpu_bytes);
}

TEST_F(ZeroReplay, Zero2PeaksAreThePredictionsToTheByte) {
  const traces::Trace t = MicroGpt(2, 1);
  for (int64_t m : {1, 2}) {
    SCOPED_TRACE(std::to_string(m) + " micro-batches");
    Agree(t, "keep", m);
  }
}

TEST(ZeroShards, MicroGptAtZero3Over8RanksHoldsAnEighthOfEachWeight) {
  const traces::Trace whole = MicroGpt(0, 8), sharded = MicroGpt(3, 8);
  for (const traces::Tensor& w : whole.tensors) {
    if (w.kind != traces::TensorKind::kWeight) continue;
    const traces::Tensor& s = sharded.tensor(w.id);  // the weights keep their ids
    ASSERT_EQ(s.kind, traces::TensorKind::kWeight);
    EXPECT_EQ(s.name, w.name);
    const int64_t elements = w.bytes / 4;
    EXPECT_EQ(s.bytes, (elements + 7) / 8 * 4) << w.name;
  }
}

}  // namespace
}  // namespace ssdtrain

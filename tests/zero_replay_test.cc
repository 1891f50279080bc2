// ZeRO-2 and 3 replayed in one process (a shard group of one rank: the
// gathers and reduce-scatters run as the executor's ops, in order) on the CPU
// backend: the executor's activation and device peaks equal the simulator's
// to the byte, keep and recompute alike (a recomputed forward op gathers its
// weights again), with every tensor verified. The micro-GPT at ZeRO-3 over 8
// ranks is also checked for its shards' sizes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "exec/replay.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "tests/fast_io_cpu.h"
#include "tests/micro_gpt.h"
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

class ZeroReplay : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ssdtrain-zero-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

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
    exec::ReplayOptions ro;
    ro.dirs = {dir_.string()};
    ro.backend = exec::BackendChoice::kCpu;
    ro.steps = 1;
    ro.verify = true;
    ro.wait_for_writes = true;
    ro.device_memory_bytes = int64_t{64} << 20;
    auto run = exec::Replay(trace, *plan, ro, policy);
    ASSERT_TRUE(run.ok()) << run.status().message();
    EXPECT_TRUE(run->verified);
    EXPECT_EQ(run->metrics.peak_activation_bytes, predicted->metrics.peak_activation_bytes);
    EXPECT_EQ(run->metrics.peak_gpu_bytes, predicted->metrics.peak_gpu_bytes);
    EXPECT_TRUE(fs::is_empty(dir_)) << "offload files left behind";
  }

  fs::path dir_;
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

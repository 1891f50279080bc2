// The small mixture-of-experts model (configs/models/tiny-moe.json: a dense
// layer, then three layers of 8 routed SwiGLU experts, top-2, and a gated shared
// expert) replayed for real on the CPU backend with --verify: its expert gemms at
// their shapes, its permute and unpermute, every saved tensor offloaded where the
// plan says. Under keep, ssdtrain and the planner's own choice the predicted
// memory peaks equal the replay's to the byte, as memory_agreement_test shows for
// a dense GPT (the same exact-replay settings: every write waited for, instant
// simulated I/O).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>

#include "cmake/build_paths.h"
#include "exec/replay.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/planner.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "tests/fast_io_cpu.h"
#include "traces/storage_plan.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;

// tiny-moe at a shorter sequence: 64 tokens x 4 samples x top-2 = 64 rows per expert.
constexpr int64_t kSeqLen = 64;

models::ModelConfig TinyMoe() {
  auto c =
      models::LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/tiny-moe.json");
  EXPECT_TRUE(c.ok()) << c.status().message();
  models::ConfigOverrides o;
  o.seq_len = kSeqLen;
  auto applied = models::ApplyOverrides(*c, o, "tiny-moe");
  EXPECT_TRUE(applied.ok()) << applied.status().message();
  return *applied;
}

traces::Trace Trace(const models::ModelConfig& c) {
  auto t = models::BuildTrace(c, 0);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return *t;
}

using testing::FastIoCpu;

class MoeReplay : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-moe-replay-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Simulates and replays `plan` (verified); the peaks must agree to the byte.
  // Returns the replay's SSD bytes written.
  int64_t ExpectAgreement(const traces::Trace& trace, const traces::Plan& plan,
                          const std::string& name) {
    const sim::HardwareOptions hw = FastIoCpu();
    auto predicted = sim::Simulate(trace, plan, hw);
    EXPECT_TRUE(predicted.ok()) << predicted.status().message();
    if (!predicted.ok()) return -1;
    exec::ReplayOptions ro;
    ro.dirs = {dir_.string()};
    ro.backend = exec::BackendChoice::kCpu;
    ro.steps = 1;
    ro.verify = true;
    ro.wait_for_writes = true;
    ro.device_memory_bytes = int64_t{256} << 20;
    auto run = exec::Replay(trace, plan, ro, name);
    EXPECT_TRUE(run.ok()) << run.status().message();
    if (!run.ok()) return -1;
    EXPECT_TRUE(run->verified);
    EXPECT_EQ(predicted->metrics.peak_activation_bytes, run->metrics.peak_activation_bytes);
    EXPECT_EQ(predicted->metrics.peak_gpu_bytes, run->metrics.peak_gpu_bytes);
    EXPECT_EQ(predicted->metrics.ssd_bytes_written, run->metrics.ssd_bytes_written);
    auto resolved = traces::ResolvePlan(trace, plan, name);
    EXPECT_TRUE(resolved.ok()) << resolved.status().message();
    if (!resolved.ok()) return -1;
    const traces::StaticPeaks peaks = traces::ComputeStaticPeaks(trace, *resolved, 64);
    EXPECT_EQ(run->metrics.peak_activation_bytes, peaks.activation_bytes);
    EXPECT_EQ(run->metrics.peak_gpu_bytes, peaks.device_bytes + run->workspace_bytes);
    return run->metrics.ssd_bytes_written;
  }
  fs::path dir_;
};

TEST_F(MoeReplay, KeepAndSsdtrainPeaksEqualTheReplaysToTheByte) {
  const traces::Trace trace = Trace(TinyMoe());
  for (const char* policy : {"keep", "ssdtrain"}) {
    SCOPED_TRACE(policy);
    auto plan = sim::MakeFixedPlan(policy, trace, FastIoCpu(), sim::BasePlan(trace), {});
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    const int64_t written = ExpectAgreement(trace, *plan, policy);
    // ssdtrain offloads the blocks' saved tensors, the experts' among them.
    if (std::string(policy) == "ssdtrain") {
      EXPECT_GT(written, 0);
    }
  }
}

// The planner, given less memory than keep needs, chooses a plan that fits; that
// plan replays with the predicted peaks.
TEST_F(MoeReplay, ThePlannersChoiceReplaysWithItsPredictedPeaks) {
  const models::ModelConfig config = TinyMoe();
  const traces::Trace trace = Trace(config);
  const sim::HardwareOptions hw = FastIoCpu();
  auto keep = sim::MakeFixedPlan("keep", trace, hw, sim::BasePlan(trace), {});
  ASSERT_TRUE(keep.ok());
  auto kept = sim::Simulate(trace, *keep, hw);
  ASSERT_TRUE(kept.ok());
  sim::PlannerOptions po;
  po.gpus = 1;
  po.tp = 1;
  po.pp = 1;
  po.micro_batch = config.micro_batch;
  po.num_micro_batches = 1;
  po.layers = config.layers;
  po.heads = config.heads;
  po.memory_budget_bytes = kept->metrics.peak_gpu_bytes - kept->metrics.peak_activation_bytes / 2;
  sim::TraceProvider provider = [&](const sim::TraceShape& shape) -> Result<traces::Trace> {
    models::ModelConfig c = config;
    c.micro_batch = shape.micro_batch;
    c.dp = shape.dp;
    c.zero_stage = shape.zero_stage;
    return models::BuildTrace(c, shape.stage);
  };
  auto chosen = sim::SearchPlan(provider, hw, po);
  ASSERT_TRUE(chosen.ok()) << chosen.status().message();
  ASSERT_TRUE(chosen->fits);
  EXPECT_LE(chosen->prediction.metrics.peak_gpu_bytes, po.memory_budget_bytes);
  EXPECT_NE(chosen->plan.policy, "keep");
  int64_t moved = 0;
  for (const traces::Placement& p : chosen->plan.placements) {
    moved += p.action != traces::TensorAction::kKeep ? 1 : 0;
  }
  EXPECT_GT(moved, 0) << chosen->plan.policy;
  ExpectAgreement(trace, chosen->plan, "planner: " + chosen->plan.policy);
  std::cout << "planner chose " << chosen->plan.policy << ", " << moved << " tensors moved\n";
}

}  // namespace
}  // namespace ssdtrain

// Context parallelism in the planner's search, on model configs: at a long
// sequence it weighs cp beside tp, pp, dp and ZeRO, never slower than any
// pinned cp whose plan fits; a pinned cp plans at that cp; what cannot run
// context-parallel is refused naming the flag.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/model_provider.h"
#include "cmake/build_paths.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/planner.h"

namespace ssdtrain::testing {
namespace {

std::string ModelPath(const std::string& name) {
  return std::string(ConfiguredSourceDir()) + "/configs/models/" + name + ".json";
}

class ContextParallelPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<sim::HardwareOptions> hw = sim::LoadHardware(
        std::string(ConfiguredSourceDir()) + "/configs/hardware/h100-sxm-8x-gen5-nvme.json");
    ASSERT_TRUE(hw.ok()) << hw.status().ToString();
    hw_ = *hw;
    Result<models::ModelConfig> c = models::LoadModelConfig(ModelPath("llama-3-8b"));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    // Llama-3-8B's layer at 4 layers and a 32768-token sequence: its
    // activations at cp 1 outgrow an H100 (keep), as the 32 layers' do.
    config_ = *c;
    config_.layers = 4;
    config_.seq_len = 32768;
  }
  Result<sim::PlannerResult> Search(sim::PlannerOptions po) {
    app::SetModelOptions(config_, &po);
    po.progress = [this](const std::string& line) { progress_.push_back(line); };
    return sim::SearchPlan(app::ModelTraceProvider(config_, "llama.json"), hw_, po);
  }
  sim::HardwareOptions hw_;
  models::ModelConfig config_;
  std::vector<std::string> progress_;
};

// 8 GPUs, 8 sequences a step, one micro-batch of one sequence: the search
// simulates layouts at cp > 1, and its plan is at least as fast as the one
// pinned at each cp (1, 2, 4, 8) that fits.
TEST_F(ContextParallelPlan, TheSearchWeighsCpAndIsNeverSlowerThanAPinnedOne) {
  sim::PlannerOptions po;
  po.gpus = 8;
  po.global_batch = 8;
  po.micro_batch = 1;
  po.tp = 1;
  Result<sim::PlannerResult> r = Search(po);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->fits);
  bool weighed = false;
  for (const std::string& line : progress_)
    weighed = weighed || line.find(" cp=") != std::string::npos;
  EXPECT_TRUE(weighed);
  for (int64_t cp : {1, 2, 4, 8}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    po.cp = cp;
    Result<sim::PlannerResult> pinned = Search(po);
    ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
    if (!pinned->fits) continue;
    EXPECT_EQ(pinned->plan.cp, cp);
    EXPECT_EQ(pinned->plan.dp * pinned->plan.cp * pinned->plan.pp * pinned->plan.tp, 8);
    EXPECT_GE(r->prediction.metrics.tokens_per_s, pinned->prediction.metrics.tokens_per_s);
    if (cp > 1) {
      EXPECT_GT(pinned->prediction.collectives["send_recv"].count, 0);
    }
  }
}

// The tokens a step trains count whole sequences: cp ranks share one.
TEST_F(ContextParallelPlan, TokensPerStepCountWholeSequences) {
  sim::PlannerOptions po;
  po.gpus = 8;
  po.cp = 8;
  po.micro_batch = 1;
  po.num_micro_batches = 2;
  Result<sim::PlannerResult> r = Search(po);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.dp, 1);
  EXPECT_EQ(r->plan.seq_len, 32768);
  const double step_s = static_cast<double>(r->prediction.metrics.step_time_ns) * 1e-9;
  EXPECT_NEAR(r->prediction.metrics.tokens_per_s * step_s, 2.0 * 32768, 1e-6 * 2 * 32768);
}

TEST_F(ContextParallelPlan, WhatCannotRunContextParallelIsRefusedNamingTheFlag) {
  sim::PlannerOptions po;
  po.gpus = 8;
  po.cp = 3;
  Result<sim::PlannerResult> r = Search(po);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--cp 3: sequence 32768 does not divide into 2 x cp = 6 chunks (the load-balanced "
            "split)");
  config_.attention = "standard";
  po.cp = 2;
  r = Search(po);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("--cp 2: context parallelism needs attention flash", 0), 0u)
      << r.status().message();
  // Unpinned, such a model is searched at cp 1 only.
  po.cp.reset();
  po.micro_batch = 1;
  po.tp = 8;
  progress_.clear();
  r = Search(po);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->plan.cp, 1);
  for (const std::string& line : progress_) EXPECT_EQ(line.find(" cp="), std::string::npos) << line;
}

}  // namespace
}  // namespace ssdtrain::testing

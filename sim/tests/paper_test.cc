// The SSDTrain paper's headline on its own setup and models, and the optimizing
// planner against the fixed policies there (cross-module: the traces come from
// models::BuildTrace; sim itself does not depend on models).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/optimal_policy.h"
#include "sim/policy.h"
#include "sim/simulate.h"

namespace ssdtrain::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct PaperSetup {
  HardwareOptions hw;
  traces::Trace trace;
  traces::Plan base;
};

PaperSetup Load(const std::string& model) {
  const std::string dir = std::string(ConfiguredSourceDir()) + "/configs/";
  PaperSetup s;
  auto hw = LoadHardware(dir + "hardware/a100-pcie-ssdtrain-paper.json");
  EXPECT_TRUE(hw.ok()) << hw.status().message();
  if (hw.ok()) s.hw = *hw;
  auto config = models::LoadModelConfig(dir + "models/" + model + ".json");
  EXPECT_TRUE(config.ok()) << config.status().message();
  if (!config.ok()) return s;
  auto trace = models::BuildTrace(*config, 0);
  EXPECT_TRUE(trace.ok()) << trace.status().message();
  if (trace.ok()) s.trace = std::move(*trace);
  s.base = BasePlan(s.trace);
  return s;
}

Prediction RunPolicy(const PaperSetup& s, std::string_view policy) {
  auto plan = MakeFixedPlan(policy, s.trace, s.hw, s.base);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  auto p = Simulate(s.trace, *plan, s.hw);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : Prediction{};
}

const std::vector<std::string> kPaperModels = {"ssdtrain-gpt-h8192-l4", "ssdtrain-gpt-h12288-l3",
                                               "ssdtrain-gpt-h16384-l2", "ssdtrain-bert-h8192-l4",
                                               "ssdtrain-t5-h8192-l4"};

std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s) c = (c == '-') ? '_' : c;
  return s;
}

class PaperHeadline : public ::testing::TestWithParam<std::string> {};

// The paper (arXiv 2408.10013, REFERENCES.md): SSD offload under the adaptive
// rule cuts the activation peak >= 40% at <= 5% step time against keeping
// everything, and is faster than full recomputation. The optimizer, given the
// ssdtrain plan's device peak as its budget, stays within it and is at least as
// fast. (Its activation peak may be higher: the budget bounds the device peak,
// which falls elsewhere in the step, e.g. where gradients are live.)
TEST_P(PaperHeadline, SsdtrainCutsActivationPeakAtSmallStepCost) {
  const PaperSetup s = Load(GetParam());
  const Prediction keep = RunPolicy(s, "keep");
  const Prediction full = RunPolicy(s, "recompute-full");
  const Prediction ssd = RunPolicy(s, "ssdtrain");
  auto opt = MakeOptimalPlan(s.trace, s.hw, s.base, ssd.metrics.peak_gpu_bytes);
  ASSERT_TRUE(opt.ok()) << opt.status().message();
  const Prediction& best = opt->prediction;
  const double keep_act = static_cast<double>(keep.metrics.peak_activation_bytes);
  const double keep_step = static_cast<double>(keep.metrics.step_time_ns);
  auto gib = [](const Prediction& p) {
    return std::make_pair(p.metrics.peak_activation_bytes / kGiB, p.metrics.peak_gpu_bytes / kGiB);
  };
  std::printf(
      "%s: keep %.1f ms %.2f GiB (%.1f) | recompute-full %.1f ms %.2f GiB (%.1f) | ssdtrain %.1f "
      "ms %.2f GiB (%.1f) (-%.0f%%, +%.1f%%) | optimal %.1f ms %.2f GiB (%.1f)\n",
      GetParam().c_str(), keep_step / 1e6, gib(keep).first, gib(keep).second,
      full.metrics.step_time_ns / 1e6, gib(full).first, gib(full).second,
      ssd.metrics.step_time_ns / 1e6, gib(ssd).first, gib(ssd).second,
      100 * (1 - ssd.metrics.peak_activation_bytes / keep_act),
      100 * (ssd.metrics.step_time_ns / keep_step - 1), best.metrics.step_time_ns / 1e6,
      gib(best).first, gib(best).second);
  // >= 40% less activation peak, <= 5% more step time than keep; faster than full recompute.
  EXPECT_LE(static_cast<double>(ssd.metrics.peak_activation_bytes), 0.60 * keep_act);
  EXPECT_LE(static_cast<double>(ssd.metrics.step_time_ns), 1.05 * keep_step);
  EXPECT_LT(ssd.metrics.step_time_ns, full.metrics.step_time_ns);
  EXPECT_LE(best.metrics.peak_gpu_bytes, ssd.metrics.peak_gpu_bytes);
  EXPECT_LE(best.metrics.step_time_ns, ssd.metrics.step_time_ns);
}

INSTANTIATE_TEST_SUITE_P(PaperModels, PaperHeadline, ::testing::ValuesIn(kPaperModels), TestName);

class OptimalPlanner : public ::testing::TestWithParam<std::string> {};

// Plan invariants that a too-good optimizer would break, on every paper model:
// the plan is re-simulated from its placements alone and must (1) reproduce
// the reported prediction, (2) fit the budget it was given, (3) never beat
// keep-everything's step time (no plan is faster than doing no extra work),
// and (4) account every recompute: compute busy time = keep's compute busy
// time + the recompute time.
TEST_P(OptimalPlanner, PlanFitsItsBudgetAndAccountsEveryRecompute) {
  const PaperSetup s = Load(GetParam());
  const Prediction keep = RunPolicy(s, "keep");
  const Prediction full = RunPolicy(s, "recompute-full");
  // Budget: halfway between recompute-full's and keep's peaks.
  const int64_t budget = (keep.metrics.peak_gpu_bytes + full.metrics.peak_gpu_bytes) / 2;
  auto opt = MakeOptimalPlan(s.trace, s.hw, s.base, budget);
  ASSERT_TRUE(opt.ok()) << opt.status().message();
  SimulateOptions so;
  so.record_timeline = false;
  auto again = Simulate(s.trace, opt->plan, s.hw, so);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->metrics.step_time_ns, opt->prediction.metrics.step_time_ns);
  EXPECT_EQ(again->metrics.peak_gpu_bytes, opt->prediction.metrics.peak_gpu_bytes);
  EXPECT_LE(again->metrics.peak_gpu_bytes, budget);
  EXPECT_GE(again->metrics.step_time_ns, keep.metrics.step_time_ns);
  EXPECT_EQ(again->lane_busy_ns.at("compute"),
            keep.lane_busy_ns.at("compute") + again->recompute_ns);
  // The same holds for recompute-full, whose recompute is large: 2202.5 − 1793.5 ms
  // on gpt-h8192 is all recompute.
  EXPECT_EQ(full.lane_busy_ns.at("compute"), keep.lane_busy_ns.at("compute") + full.recompute_ns);
  EXPECT_GT(full.recompute_ns, 0);
}

// Never worse than the best fixed policy under the same budget (the fastest
// fixed plan whose peak fits; none fits: the lowest peak), at three budgets.
TEST_P(OptimalPlanner, NeverWorseThanTheBestFixedPolicyOnTheSameBudget) {
  const PaperSetup s = Load(GetParam());
  std::vector<Prediction> fixed;
  for (std::string_view policy : kFixedPolicies) fixed.push_back(RunPolicy(s, policy));
  const int64_t keep_peak = fixed[0].metrics.peak_gpu_bytes;
  int64_t lowest = keep_peak;
  for (const Prediction& p : fixed) lowest = std::min(lowest, p.metrics.peak_gpu_bytes);
  for (int64_t budget : {keep_peak, (keep_peak + lowest) / 2, lowest}) {
    const Prediction* best = nullptr;
    for (const Prediction& p : fixed) {
      if (p.metrics.peak_gpu_bytes > budget) continue;
      if (!best || p.metrics.step_time_ns < best->metrics.step_time_ns) best = &p;
    }
    ASSERT_NE(best, nullptr) << "budget " << budget;
    auto opt = MakeOptimalPlan(s.trace, s.hw, s.base, budget);
    ASSERT_TRUE(opt.ok()) << opt.status().message();
    EXPECT_LE(opt->prediction.metrics.peak_gpu_bytes, budget);
    EXPECT_LE(opt->prediction.metrics.step_time_ns, best->metrics.step_time_ns)
        << "budget " << budget / kGiB << " GiB";
  }
}

INSTANTIATE_TEST_SUITE_P(PaperModels, OptimalPlanner, ::testing::ValuesIn(kPaperModels), TestName);

// Strictly better on a paper configuration: T5 (encoder-decoder) under the
// ssdtrain plan's peak. The adaptive rule's order-based prefetch leaves I/O
// exposed there (+2.5% over keep); the optimizer's time-aware prefetch hides
// most of it and beats every fixed policy that fits (docs/PERFORMANCE.md).
TEST(OptimalPlanner, StrictlyBetterThanEveryFixedPolicyOnT5) {
  const PaperSetup s = Load("ssdtrain-t5-h8192-l4");
  const Prediction ssd = RunPolicy(s, "ssdtrain");
  const int64_t budget = ssd.metrics.peak_gpu_bytes;
  auto opt = MakeOptimalPlan(s.trace, s.hw, s.base, budget);
  ASSERT_TRUE(opt.ok()) << opt.status().message();
  for (std::string_view policy : kFixedPolicies) {
    const Prediction p = RunPolicy(s, policy);
    if (p.metrics.peak_gpu_bytes > budget) continue;
    EXPECT_LT(opt->prediction.metrics.step_time_ns, p.metrics.step_time_ns) << policy;
  }
  EXPECT_LT(opt->prediction.metrics.step_time_ns, opt->best_fixed_step_ns);
  EXPECT_GT(ssd.metrics.exposed_io_ns, 0);
  EXPECT_LT(opt->prediction.metrics.exposed_io_ns, ssd.metrics.exposed_io_ns);
}

}  // namespace
}  // namespace ssdtrain::sim

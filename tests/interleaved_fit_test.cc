// The planner's promise under interleaved 1F1B: the fit it judges is the
// prediction it prints. Its search ranks interleaved candidates by the closed
// form of their stage peaks (traces::HeldByOtherChunks) and prints the chosen
// plan's from its unrolled step (traces::UnrolledStaticPeaks), a fraction of a
// percent apart; a candidate is checked by the printed figure before it wins.
// The case: Megatron's 76.1B (SC21 Table 1) at its published layout on 1024
// GPUs of DGX A100 nodes (tp 8, pp 4, dp 32, micro-batch 2, 28 micro-batches,
// interleaved with v = 3), the budget set to keep's closed-form peak, below its
// unrolled step's: keep, the fastest policy, fits by the closed form only.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cmake/build_paths.h"
#include "sim/fit.h"
#include "sim/planner.h"
#include "sim/simulate.h"
#include "tests/planner_invariants.h"
#include "traces/step_peaks.h"

namespace ssdtrain {
namespace {

std::string Config(const std::string& kind, const std::string& name) {
  return std::string(ConfiguredSourceDir()) + "/configs/" + kind + "/" + name + ".json";
}

struct Case {
  models::ModelConfig base;
  sim::HardwareOptions hw;
  sim::TraceProvider provider;
};

Case Megatron76b() {
  const std::string model = Config("models", "megatron-sc21-76.1b");
  auto base = models::LoadModelConfig(model);
  auto hw = sim::LoadHardware(Config("hardware", "dgx-a100-80gb"));
  EXPECT_TRUE(base.ok() && hw.ok());
  return {*base, *hw, testing::ModelTraceProvider(*base, model)};
}

sim::PlannerOptions PublishedLayout(const Case& c, const std::string& policy, int64_t budget) {
  sim::PlannerOptions po;
  po.gpus = 1024;
  po.tp = 8;
  po.pp = 4;
  po.dp = 32;
  po.micro_batch = 2;
  po.global_batch = 1792;
  po.schedule = "interleaved";
  po.virtual_stages = 3;
  po.zero_stage = 0;  // as published (scripts/published.sh)
  po.policy = policy;
  po.memory_budget_bytes = budget;
  po.layers = c.base.layers;
  po.heads = c.base.heads;
  return po;
}

// The result's stage plans (stage 0, then the others by index) with their traces.
struct Stages {
  std::vector<traces::Trace> traces;
  std::vector<const traces::Plan*> plans;
  std::vector<int64_t> index;
};

Stages StagesOf(const Case& c, const sim::PlannerResult& r) {
  Stages s;
  s.plans.push_back(&r.plan);
  s.index.push_back(0);
  for (const auto& [stage, plan] : r.stage_plans) {
    s.plans.push_back(&plan);
    s.index.push_back(stage);
  }
  for (int64_t stage : s.index) {
    auto t = c.provider(sim::TraceShape::Of(r.plan, stage));
    EXPECT_TRUE(t.ok());
    s.traces.push_back(std::move(*t));
  }
  return s;
}

// The worst stage's device peak of the result's plans, by the closed form.
int64_t ClosedFormPeak(const Case& c, const sim::PlannerResult& r) {
  const Stages s = StagesOf(c, r);
  std::vector<sim::StageInput> in;
  for (size_t i = 0; i < s.plans.size(); ++i) in.push_back({&s.traces[i], s.plans[i]});
  sim::SimulateOptions so;
  so.record_timeline = false;
  auto p = sim::Simulate(in, c.hw, so);
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? p->metrics.peak_gpu_bytes : 0;
}

// Each returned stage plan's printed peak is its unrolled step's static peak
// (recompute's scratch buffers, which only the simulation counts, may put the
// prediction above it).
void ExpectPrintedPeaksAreTheUnrolledSteps(const Case& c, const sim::PlannerResult& r) {
  const Stages s = StagesOf(c, r);
  for (size_t i = 0; i < s.plans.size(); ++i) {
    traces::Plan step = *s.plans[i];
    step.pp = r.plan.pp;
    step.num_micro_batches = r.plan.num_micro_batches;
    step.schedule = r.plan.schedule;
    step.virtual_stages = r.plan.virtual_stages;
    auto unrolled =
        traces::UnrolledStaticPeaks(s.traces[i], step, c.hw.gpu.allocation_alignment_bytes);
    ASSERT_TRUE(unrolled.ok()) << unrolled.status().message();
    const int64_t printed =
        r.prediction.stage_peaks[static_cast<size_t>(s.index[i])].peak_gpu_bytes;
    if (r.plan.policy == "keep") {
      EXPECT_EQ(unrolled->device_bytes, printed) << "stage " << s.index[i];
    } else {
      EXPECT_LE(unrolled->device_bytes, printed) << "stage " << s.index[i];
    }
  }
}

TEST(InterleavedFit, AtTheBudgetsEdgeTheSearchTakesThePlanThatFitsByThePrintedPeak) {
  const Case c = Megatron76b();
  // Keep everything, budget ample: its printed (unrolled) and closed-form peaks.
  auto ample = sim::SearchPlan(c.provider, c.hw, PublishedLayout(c, "keep", int64_t{1} << 40));
  ASSERT_TRUE(ample.ok()) << ample.status().message();
  ASSERT_TRUE(ample->fits);
  ASSERT_EQ(ample->plan.schedule, "interleaved");
  const int64_t printed = ample->prediction.metrics.peak_gpu_bytes;
  const int64_t closed = ClosedFormPeak(c, *ample);
  ExpectPrintedPeaksAreTheUnrolledSteps(c, *ample);
  // The case's premise: the closed form is below the unrolled step here.
  ASSERT_LT(closed, printed);
  const int64_t budget = closed;

  // Keep alone at that budget: no plan fits, by the printed figure.
  auto keep = sim::SearchPlan(c.provider, c.hw, PublishedLayout(c, "keep", budget));
  ASSERT_TRUE(keep.ok()) << keep.status().message();
  EXPECT_FALSE(keep->fits);
  EXPECT_EQ(keep->prediction.metrics.peak_gpu_bytes, printed);
  EXPECT_EQ(keep->over_budget_bytes, printed - budget);

  // Every policy: keep fits by the closed form and is the fastest, but not by
  // the unrolled step; the search takes the next that fits by the printed peak.
  auto any = sim::SearchPlan(c.provider, c.hw, PublishedLayout(c, "auto", budget));
  ASSERT_TRUE(any.ok()) << any.status().message();
  ASSERT_TRUE(any->fits) << "over by " << any->over_budget_bytes;
  EXPECT_NE(any->plan.policy, "keep");
  EXPECT_EQ(any->plan.schedule, "interleaved");
  EXPECT_LE(any->prediction.metrics.peak_gpu_bytes, budget);
  EXPECT_TRUE(sim::FitsBudget(any->prediction, budget));
  ExpectPrintedPeaksAreTheUnrolledSteps(c, *any);
  // Its rok row for keep says what was judged: keep does not fit.
  ASSERT_FALSE(any->rok.empty());
  for (const auto& point : any->rok) {
    if (point["policy"] == "keep") {
      EXPECT_FALSE(point["fits"].get<bool>());
    }
  }
}

}  // namespace
}  // namespace ssdtrain

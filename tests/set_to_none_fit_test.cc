// Weight gradients allocated in backward (weight_grads set_to_none) under
// gradient accumulation: micro-batch 0's backward allocates them and every
// later pass runs beside them. The planner's printed stage peaks (the figure
// its fit check judges, sim/fit.h) against the unrolled step's static peaks
// (traces::UnrolledStaticPeaks, what the replay holds: exec's
// ReplaySetToNone tests measure it on the CPU backend), to the byte, at 1, 2
// and 4 micro-batches over 1, 2 and 4 pipeline stages under 1F1B.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "sim/fit.h"
#include "sim/planner.h"
#include "tests/planner_invariants.h"
#include "traces/step_peaks.h"

namespace ssdtrain {
namespace {

std::string Config(const std::string& kind, const std::string& name) {
  return std::string(ConfiguredSourceDir()) + "/configs/" + kind + "/" + name + ".json";
}

struct Checked {
  std::vector<int64_t> printed, unrolled;  // by returned stage plan
};

Checked PlanAndUnroll(const std::string& weight_grads, const std::string& policy, int64_t pp,
                      int64_t m) {
  const std::string model = Config("models", "tiny-gpt");
  auto base = models::LoadModelConfig(model);
  auto hw = sim::LoadHardware(Config("hardware", "h100-sxm-8x-gen5-nvme"));
  EXPECT_TRUE(base.ok() && hw.ok());
  base->weight_grads = weight_grads;
  sim::TraceProvider provider = testing::ModelTraceProvider(*base, model);
  sim::PlannerOptions po;
  po.gpus = pp;
  po.tp = 1;
  po.pp = pp;
  po.dp = 1;
  po.micro_batch = 1;
  po.num_micro_batches = m;
  po.schedule = "1f1b";
  po.policy = policy;
  po.layers = base->layers;
  po.heads = base->heads;
  auto r = sim::SearchPlan(provider, *hw, po);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  EXPECT_TRUE(r->fits);
  std::vector<std::pair<int64_t, const traces::Plan*>> plans{{0, &r->plan}};
  for (const auto& [stage, plan] : r->stage_plans) plans.emplace_back(stage, &plan);
  Checked out;
  for (const auto& [stage, plan] : plans) {
    auto t = provider(sim::TraceShape{1, 1, pp, stage, 1, 0, 1});
    EXPECT_TRUE(t.ok());
    EXPECT_EQ(t->header.weight_grads, weight_grads);
    traces::Plan step = *plan;
    step.pp = pp;
    step.num_micro_batches = m;
    step.schedule = "1f1b";
    auto unrolled = traces::UnrolledStaticPeaks(*t, step, hw->gpu.allocation_alignment_bytes);
    EXPECT_TRUE(unrolled.ok()) << unrolled.status().message();
    out.unrolled.push_back(unrolled.ok() ? unrolled->device_bytes : -1);
    out.printed.push_back(r->prediction.stage_peaks[static_cast<size_t>(stage)].peak_gpu_bytes);
  }
  return out;
}

TEST(SetToNoneFit, PrintedStagePeaksAreTheUnrolledStepsAtOneTwoAndFourMicroBatches) {
  for (const char* weight_grads : {"persistent", "set_to_none"}) {
    for (const char* policy : {"keep", "offload-ssd"}) {
      for (const int64_t pp : {1, 2, 4}) {
        for (const int64_t m : {1, 2, 4}) {
          const Checked c = PlanAndUnroll(weight_grads, policy, pp, m);
          ASSERT_FALSE(c.printed.empty());
          for (size_t i = 0; i < c.printed.size(); ++i) {
            EXPECT_EQ(c.printed[i], c.unrolled[i]) << weight_grads << " " << policy << " pp " << pp
                                                   << " m " << m << " stage plan " << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ssdtrain

// End to end: what `ssdtrain plan`'s recompute plans re-run (each op once a
// micro-batch, as planner_sweep's invariant holds at scale).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "tests/cli_util.h"
#include "tests/plan_cli.h"
#include "traces/io.h"
#include "traces/plan.h"

namespace ssdtrain {
namespace {

using testing::CliResult;
using testing::PlanCli;
using testing::RunSsdtrain;

// optimal starts from the fixed policies' best plan and tries prefixes of
// tensors on it; the recompute plan it started from holds the encoder's
// relative position bias, which its re-runs read and nothing else keeps
// (a keep with hold_until, sim::SetRerunPoints). That hold stays: before, each
// try dropped every keep placement, and each encoder block's re-run rebuilt the
// bias (its ZeRO-3 gather included), 24 times a micro-batch. Each op recomputed
// runs once (T5-11B on 64 H100s, tp 2, ZeRO-3, the layout planner_sweep found it at).
TEST_F(PlanCli, OptimalKeepsWhatItsRecomputesReadAndReRunsEachOpOnce) {
  CliResult r = RunSsdtrain(
      "plan --model " + Model("t5-11b") + " --hardware " + Hardware("h100-sxm-8x-gen5-nvme") +
      " --gpus 64 --tp 2 --dp 32 --pp 1 --zero-stage 3 --micro-batch 16 --num-micro-batches 2 "
      "--policy optimal -o " +
      File("t5.json") + " --timeline " + File("sim.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("t5.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  int recomputes = 0;
  for (const traces::Placement& p : plan->placements) {
    recomputes += p.action == traces::TensorAction::kRecompute ? 1 : 0;
  }
  EXPECT_GT(recomputes, 0);
  Result<nlohmann::json> timeline = traces::ReadJsonFile(File("sim.json"));
  ASSERT_TRUE(timeline.ok()) << timeline.status().ToString();
  std::map<std::pair<int, std::string>, int> runs;  // (micro-batch, op) -> re-runs
  for (const nlohmann::json& e : timeline->at("traceEvents")) {
    const std::string name = e.value("name", "");
    if (e.value("ph", "") != "X" || !name.starts_with("recompute:")) continue;
    ++runs[{e.at("args").at("micro_batch").get<int>(), name}];
  }
  EXPECT_FALSE(runs.empty());
  for (const auto& [key, n] : runs)
    EXPECT_EQ(n, 1) << key.second << " in micro-batch " << key.first;
  EXPECT_EQ(runs.count({0, "recompute:encoder.relative_bias"}), 0u);
}

}  // namespace
}  // namespace ssdtrain

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
using testing::SourceDir;

// Each op's recompute runs of `timeline` (a Chrome trace) by (micro-batch, op).
std::map<std::pair<int, std::string>, int> ReRuns(const nlohmann::json& timeline) {
  std::map<std::pair<int, std::string>, int> runs;
  for (const nlohmann::json& e : timeline.at("traceEvents")) {
    const std::string name = e.value("name", "");
    if (e.value("ph", "") != "X" || !name.starts_with("recompute:")) continue;
    ++runs[{e.at("args").at("micro_batch").get<int>(), name}];
  }
  return runs;
}

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
  const auto runs = ReRuns(*timeline);
  EXPECT_FALSE(runs.empty());
  for (const auto& [key, n] : runs)
    EXPECT_EQ(n, 1) << key.second << " in micro-batch " << key.first;
  EXPECT_EQ(runs.count({0, "recompute:encoder.relative_bias"}), 0u);
}

// optimal's lazy recomputes at ZeRO-3 (no rebuild point): a block's re-run
// reaches its forward weight gather (cast, all-gather, copy-out: one op each
// for all the block's weights) before its backward gathers them again, and
// the re-runs of fc2 and of the projection need different weights of it at
// different ops. The gather ran once per weight a re-run needed (100 times a
// micro-batch with host offload; twice here) until a re-run kept what later
// re-runs read (traces/storage_plan.h, "Recompute"). The layout the 16384-GPU
// sweep found it at (39.1B on the A100 PCIe preset, tp 2, ZeRO-3).
TEST_F(PlanCli, OptimalsLazyReRunsRunAZeroGatherOnce) {
  CliResult r = RunSsdtrain(
      "plan --model " + Model("megatron-sc21-39.1b") + " --hardware " +
      Hardware("a100-pcie-40gb-4x-980pro") +
      " --gpus 16384 --policy optimal --zero-stage 3 --dp 8192 --tp 2 --pp 1 --micro-batch 16 "
      "--num-micro-batches 2 --no-host-offload -o " +
      File("p.json") + " --timeline " + File("sim.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<nlohmann::json> timeline = traces::ReadJsonFile(File("sim.json"));
  ASSERT_TRUE(timeline.ok()) << timeline.status().ToString();
  const auto runs = ReRuns(*timeline);
  int gathers = 0;
  for (const auto& [key, n] : runs) {
    EXPECT_EQ(n, 1) << key.second << " in micro-batch " << key.first;
    gathers += key.second.ends_with("zero_all_gather") ? 1 : 0;
  }
  EXPECT_GT(gathers, 0) << "no forward gather re-run: the case no longer arises";
}

// optimal's search judges its candidates before their stripes and eviction
// points are placed; it took SSD offloads that cost nothing there and lowered
// the peak, which cost 12% once placed (gpt-oss-20b on 16384 B200s at ZeRO-3:
// 299.5 M tokens/s against recompute-selective's 336.6 M). It returns the
// fixed policy it started from where that is faster, judged the same way.
TEST_F(PlanCli, OptimalIsNoSlowerThanTheFixedPolicyItStartedFrom) {
  auto tokens_per_s = [&](const std::string& policy) {
    CliResult r =
        RunSsdtrain("plan --model " + SourceDir() + "/models/tests/hf/gpt-oss-20b --hardware " +
                    Hardware("dgx-b200") + " --gpus 16384 --policy " + policy +
                    " --zero-stage 3 --dp 16384 --tp 1 --pp 1 --ep 1 --micro-batch 8 "
                    "--num-micro-batches 2 -o " +
                    File(policy + ".json") + " --prediction " + File(policy + ".p.json"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    Result<nlohmann::json> p = traces::ReadJsonFile(File(policy + ".p.json"));
    return p.ok() ? p->at("tokens_per_s").get<double>() : 0.0;
  };
  const double selective = tokens_per_s("recompute-selective");
  EXPECT_GT(selective, 0.0);
  EXPECT_GE(tokens_per_s("optimal"), selective);
}

}  // namespace
}  // namespace ssdtrain

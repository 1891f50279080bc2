// End to end: `ssdtrain plan --compare` (every policy at its best layout and
// one global batch, a verdict on SSD offload, --json), one meaning per number
// (a --rok row is the --policy run at the same layout), and the memory budget
// said and checked (issue 30, items 1-3).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "tests/cli_util.h"
#include "traces/io.h"
#include "traces/plan.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::RunSsdtrain;
using testing::SourceDir;

class PlanCompareCli : public testing::CliTest {
 protected:
  PlanCompareCli() : CliTest("plan-compare-cli") {}
  nlohmann::json Json(const std::string& name) const {
    Result<nlohmann::json> j = traces::ReadJsonFile(File(name));
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : nlohmann::json::object();
  }
};

const std::vector<std::string> kComparedPolicies{
    "keep",        "recompute-full", "recompute-selective", "offload-host", "megatron-offload",
    "offload-ssd", "ssdtrain",       "ssdtrain-paper",      "optimal"};

// tiny-gpt on cpu-local under 0.1 GiB: keep fits only at micro-batch 1; SSD
// offload fits micro-batch 4 and is faster. Every row runs the default
// global batch, 8 sequences per GPU (8 on 1 GPU): micro-batch x m x dp = 8,
// and each row is what `plan --policy P --global-batch 8` returns.
TEST_F(PlanCompareCli, EveryPolicyAtOneGlobalBatchWithAVerdict) {
  const std::string flags = "--model " + Model("tiny-gpt") + " --hardware " +
                            Hardware("cpu-local") + " --memory-budget 0.1";
  CliResult r = RunSsdtrain("plan " + flags + " --compare --json " + File("cmp.json") + " -o " +
                            File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("global batch 8 sequences (8 per GPU, the default"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("budget 0.10 GiB per GPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Verdict: SSD offload buys 1.03x over the best plan without it (keep "
                          "at micro-batch 1, tp 1, pp 1, dp 1), by fitting micro-batch 4"),
            std::string::npos)
      << r.output;
  for (const std::string& p : kComparedPolicies) {
    EXPECT_NE(r.output.find("plan --compare: "), std::string::npos) << r.output;
    EXPECT_TRUE(std::regex_search(r.output, std::regex("\n" + p + " +1/1/1 "))) << p << "\n"
                                                                                << r.output;
  }

  const nlohmann::json cmp = Json("cmp.json");
  EXPECT_EQ(cmp.at("format"), "ssdtrain-policy-comparison");  // analysis/plots.py rok reads it
  EXPECT_EQ(cmp.at("global_batch"), 8);
  EXPECT_EQ(cmp.at("model"), "tiny-gpt");
  EXPECT_EQ(cmp.at("memory_budget_bytes"), static_cast<int64_t>(0.1 * (int64_t{1} << 30)));
  EXPECT_EQ(cmp.at("usable_gpu_bytes"), int64_t{4} << 30);  // 4 GiB, none reserved
  EXPECT_EQ(cmp.at("verdict").get<std::string>().rfind("Verdict: SSD offload buys", 0), 0u);
  ASSERT_EQ(cmp.at("policies").size(), kComparedPolicies.size());
  std::set<std::string> seen;
  for (const nlohmann::json& row : cmp.at("policies")) {
    const std::string policy = row.at("policy");
    seen.insert(policy);
    ASSERT_TRUE(row.at("simulated").get<bool>()) << policy;
    EXPECT_EQ(row.at("micro_batch").get<int64_t>() * row.at("num_micro_batches").get<int64_t>() *
                  row.at("dp").get<int64_t>(),
              8)
        << policy;
    EXPECT_EQ(row.at("saved_activation_bytes").get<int64_t>(),
              row.at("keep_activation_bytes").get<int64_t>() -
                  row.at("peak_activation_bytes").get<int64_t>());
    // The row is the policy's own search at that global batch.
    CliResult one = RunSsdtrain("plan " + flags + " --global-batch 8 --policy " + policy + " -o " +
                                File(policy + ".json"));
    ASSERT_EQ(one.exit_code, 0) << one.output;
    Result<traces::Plan> plan = traces::ReadPlan(File(policy + ".json"));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->micro_batch, row.at("micro_batch")) << policy;
    EXPECT_EQ(plan->num_micro_batches, row.at("num_micro_batches")) << policy;
    EXPECT_EQ(plan->prediction->step_time_ns, row.at("step_time_ns")) << policy;
    EXPECT_EQ(plan->prediction->peak_gpu_bytes, row.at("peak_gpu_bytes")) << policy;
  }
  EXPECT_EQ(seen.size(), kComparedPolicies.size());
  // -o holds the fastest plan that fits: offload-ssd at micro-batch 4 (the
  // first of the equally fast rows).
  Result<traces::Plan> chosen = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_EQ(cmp.at("chosen"), chosen->policy);
  EXPECT_EQ(chosen->policy, "offload-ssd");
  EXPECT_EQ(chosen->micro_batch, 4);
}

// A pinned micro-batch (a captured trace's own, or --micro-batch) that does not
// divide 8 sequences per GPU raises the default to a multiple of it: 16 with
// micro-batch 16 on one GPU (it would otherwise have no layout).
TEST_F(PlanCompareCli, PinnedMicroBatchRaisesTheDefaultGlobalBatch) {
  CliResult r = RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " +
                            Hardware("cpu-local") + " --micro-batch 16 --compare --json " +
                            File("cmp.json") + " -o " + File("p.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("global batch 16 sequences (16 per GPU, the default"), std::string::npos)
      << r.output;
  EXPECT_EQ(Json("cmp.json").at("global_batch"), 16);
}

// Llama-3-8B on 8 H100s: keeping everything fits; offloading stage 0's saved
// activations behind its forward compute would need 153.7 GB/s of writes per
// GPU where the drives give 6.6: the verdict says so, with both rates.
TEST_F(PlanCompareCli, VerdictSaysWhySsdOffloadDoesNotHelp) {
  CliResult r = RunSsdtrain("plan --model " + Model("llama-3-8b") + " --hardware " +
                            Hardware("h100-sxm-8x-gen5-nvme") + " --gpus 8 --compare -o " +
                            File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("global batch 64 sequences"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("Verdict: SSD offload does not help here: hiding its writes needs "
                           "[0-9.]+ GB/s per GPU, the drives give 6.6")))
      << r.output;
  // Sizes in GiB, drive rates in GB/s, said to be 1e9 B/s (issue 30 item 6).
  EXPECT_TRUE(std::regex_search(r.output, std::regex("saves [0-9.]+ GiB of activations per "
                                                     "micro-batch")))
      << r.output;
  EXPECT_NE(r.output.find("in GB/s = 1e9 B/s as drives are rated"), std::string::npos) << r.output;
}

// Under 0.065 GiB no policy fits tiny-gpt: the table and the verdict say so,
// naming the lowest-memory plan, and plan exits 1.
TEST_F(PlanCompareCli, NothingFitsIsTheVerdictAndExits1) {
  CliResult r =
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --memory-budget 0.065 --compare -o " + File("plan.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("Verdict: no policy fits the 0.06 GiB budget at global batch 8"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("MiB over"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(File("plan.json")));
}

TEST_F(PlanCompareCli, CompareRefusesOnePolicyAndJsonNeedsCompare) {
  const std::string base = "plan --model " + Model("tiny-gpt") + " --hardware " +
                           Hardware("cpu-local") + " -o " + File("plan.json");
  CliResult r = RunSsdtrain(base + " --compare --policy keep");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ssdtrain plan: error: --compare runs every policy: leave --policy "
                          "keep out"),
            std::string::npos)
      << r.output;
  r = RunSsdtrain(base + " --json " + File("cmp.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--json: the comparison's file; give --compare"), std::string::npos)
      << r.output;
  r = RunSsdtrain(base + " --compare --num-micro-batches 4");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--compare runs every policy at one global batch"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(File("plan.json")));
  EXPECT_FALSE(fs::exists(File("cmp.json")));
}

// One meaning per number: at a fixed layout, each --rok row (the auto search's
// points) is the simulation `--policy P` returns there: the same step time,
// device peak and activation peak. Llama-3-8B on 8 H100s at tp 4, micro-batch
// 2 (pp 1; at micro-batch 4 its fp32 gradients leave cp 2 the only fit), and GPT-13B on 64 at tp 2,
// pp 4, micro-batch 2 (per-stage plans, stage 1 standing for the middle), as the issue found them
// apart. The schedule is pinned too: it is part of the layout (unpinned, each policy may find its
// best at another interleaving).
TEST_F(PlanCompareCli, RokRowsAreThePolicyRunsAtTheSameLayout) {
  const std::string hw = Hardware("h100-sxm-8x-gen5-nvme");
  for (const std::string& layout :
       {"--model " + Model("llama-3-8b") +
            " --gpus 8 --tp 4 --micro-batch 2 --zero-stage 0 --schedule 1f1b",
        "--model " + Model("gpt-13b") +
            " --gpus 64 --tp 2 --pp 4 --micro-batch 2 --zero-stage 0 --schedule 1f1b"}) {
    const std::string flags = "plan " + layout + " --hardware " + hw;
    CliResult r = RunSsdtrain(flags + " --rok -o " + File("auto.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    Result<traces::Plan> automatic = traces::ReadPlan(File("auto.json"));
    ASSERT_TRUE(automatic.ok()) << automatic.status().ToString();
    const nlohmann::json& rok = automatic->extra.at("rok");
    // kFixedPolicies, megatron-offload and optimal: none skipped here.
    ASSERT_EQ(rok.size(), 8u) << layout;
    for (const nlohmann::json& row : rok) {
      const std::string policy = row.at("policy");
      CliResult one = RunSsdtrain(flags + " --policy " + policy + " -o " + File("one.json"));
      ASSERT_EQ(one.exit_code, 0) << one.output;
      Result<traces::Plan> plan = traces::ReadPlan(File("one.json"));
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      ASSERT_TRUE(plan->prediction.has_value());
      EXPECT_EQ(row.at("step_time_ns"), plan->prediction->step_time_ns) << layout << " " << policy;
      EXPECT_EQ(row.at("peak_gpu_bytes"), plan->prediction->peak_gpu_bytes)
          << layout << " " << policy;
      EXPECT_EQ(row.at("peak_activation_bytes"), plan->prediction->peak_activation_bytes)
          << layout << " " << policy;
    }
  }
}

// A budget above the GPU's usable memory (80 GiB less 4 reserved on the H100
// preset) is refused naming both, before any work and with no plan file.
TEST_F(PlanCompareCli, BudgetAboveTheUsableMemoryIsRefusedNamingBoth) {
  CliResult r = RunSsdtrain("plan --model " + Model("gpt-13b") + " --hardware " +
                            Hardware("h100-sxm-8x-gen5-nvme") +
                            " --gpus 64 --memory-budget 200 -o " + File("plan.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ssdtrain plan: error: --memory-budget 200 GiB: above the usable "
                          "memory of h100-sxm-8x-gen5-nvme's GPU, 76.00 GiB (gpu.memory_GiB 80 "
                          "less gpu.reserved_GiB 4"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("plan: simulated"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(File("plan.json")));
  // The usable memory itself is a budget.
  r = RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --memory-budget 4 -o " + File("plan.json"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Every plan says the budget it was judged by, where it comes from, and its
// global batch (micro-batch x micro-batches x dp), so that tokens/s compare.
TEST_F(PlanCompareCli, TheBudgetInUseIsPrintedWithEveryPlan) {
  const std::string base =
      "plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local");
  CliResult r = RunSsdtrain(base + " --policy keep -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // keep's search on tiny-gpt picks micro-batch 16 with 2 micro-batches: 32 sequences a step.
  EXPECT_NE(r.output.find("global batch 32 sequences; budget 4.00 GiB per GPU (the usable memory: "
                          "gpu.memory_GiB 4 less gpu.reserved_GiB 0)"),
            std::string::npos)
      << r.output;
  r = RunSsdtrain(base + " --memory-budget 0.1 -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("budget 0.10 GiB per GPU (--memory-budget; usable 4.00 GiB)"),
            std::string::npos)
      << r.output;
}

// The help states every default a user would otherwise guess.
TEST_F(PlanCompareCli, HelpStatesTheDefaults) {
  CliResult r = RunSsdtrain("plan --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text : {"GPUs in total (default: 1", "(default: auto",
                           "(default: the GPU's usable memory, the hardware config's "
                           "gpu.memory_GiB less gpu.reserved_GiB",
                           "with --compare, 8 per GPU"}) {
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  }
  r = RunSsdtrain("demo --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(default: 0, no cap)"), std::string::npos) << r.output;
}

// tiny-gpt's config says micro_batch 4 and tp 1: keep's search picks
// micro-batch 16 (0.53 GiB of the 4 GiB) and says it chose it over the
// config's; a pinned value is the user's and is not named.
TEST_F(PlanCompareCli, ConfigValuesTheSearchOverridesAreReported) {
  const std::string base =
      "plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local");
  CliResult r = RunSsdtrain(base + " --policy keep -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("note: the search chose micro_batch 16 over " + Model("tiny-gpt") +
                          "'s micro_batch 4 (--micro-batch pins it)"),
            std::string::npos)
      << r.output;
  r = RunSsdtrain(base + " --policy keep --micro-batch 2 -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("note: the search chose"), std::string::npos) << r.output;
}

// A Llama with torchtitan's separate projections: --compare shows
// recompute-sac, torchtitan's per-op checkpointing, beside the others (on
// tiny-gpt's fused blocks it is no row: the first test's list), and its row
// is `plan --policy recompute-sac` at that global batch.
TEST_F(PlanCompareCli, SeparateProjectionsAddTorchtitansPerOpCheckpointing) {
  nlohmann::json config = *traces::ReadJsonFile(Model("tiny-gpt"));
  config["name"] = "tiny-titan";
  config["family"] = "llama";
  config["attention"] = "flash";
  config["projections"] = "separate";
  {
    std::ofstream out(File("tiny-titan.json"));
    out << config.dump(2);
  }
  const std::string flags = "--model " + File("tiny-titan.json") + " --hardware " +
                            Hardware("cpu-local") + " --memory-budget 0.1";
  CliResult r = RunSsdtrain("plan " + flags + " --compare --json " + File("cmp.json") + " -o " +
                            File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\nrecompute-sac +1/1/1 "))) << r.output;
  const nlohmann::json cmp = Json("cmp.json");
  ASSERT_EQ(cmp.at("policies").size(), kComparedPolicies.size() + 1);
  EXPECT_EQ(cmp.at("policies").at(3).at("policy"), "recompute-sac");
  const nlohmann::json& row = cmp.at("policies").at(3);
  CliResult one = RunSsdtrain("plan " + flags + " --global-batch 8 --policy recompute-sac -o " +
                              File("sac.json"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("sac.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->policy, "recompute-sac");
  EXPECT_EQ(plan->prediction->step_time_ns, row.at("step_time_ns"));
  EXPECT_EQ(plan->prediction->peak_gpu_bytes, row.at("peak_gpu_bytes"));
  bool held = false;
  for (const traces::Placement& p : plan->placements) held |= p.hold_until != traces::kNoOp;
  EXPECT_TRUE(held) << "wq's output is held for the rotary's recompute";
}

// --projections separate over a config without the field: the plan records
// it, its trace command and its replay from the same config build the
// separate block (the replay's fingerprint check would refuse a fused one),
// and a trace built with it contradicts --projections fused.
TEST_F(PlanCompareCli, TheProjectionsFlagIsRecordedAndReplayed) {
  nlohmann::json config = *traces::ReadJsonFile(Model("tiny-gpt"));
  config["name"] = "tiny-titan";
  config["family"] = "llama";
  config["attention"] = "flash";
  {
    std::ofstream out(File("tiny-titan.json"));
    out << config.dump(2);
  }
  const std::string model = "--model " + File("tiny-titan.json");
  CliResult r = RunSsdtrain(
      "plan " + model + " --hardware " + Hardware("cpu-local") +
      " --memory-budget 0.1 --projections separate --policy recompute-sac -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--tp 1 --pp 1 --projections separate"), std::string::npos) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->projections, "separate");
  fs::create_directories(File("offload"));
  CliResult replay = RunSsdtrain("replay " + model + " --plan " + File("plan.json") + " --dir " +
                                 File("offload") + " --steps 1 -o " + File("run.json"));
  EXPECT_EQ(replay.exit_code, 0) << replay.output;
  CliResult trace =
      RunSsdtrain("trace " + model + " --projections separate -o " + File("trace.json"));
  ASSERT_EQ(trace.exit_code, 0) << trace.output;
  CliResult refused =
      RunSsdtrain("plan --trace " + File("trace.json") + " --hardware " + Hardware("cpu-local") +
                  " --projections fused -o " + File("p2.json"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--projections fused contradicts the trace"), std::string::npos)
      << refused.output;
}

}  // namespace
}  // namespace ssdtrain

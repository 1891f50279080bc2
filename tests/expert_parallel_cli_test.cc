// End to end: expert parallelism in `ssdtrain plan`, `trace` and `replay`.
// Mixtral-8x7B on 64 H100s is planned with ep searched beside tp, pp and dp
// and fits on every stage; impossible --ep pins are refused naming the flag;
// plan prints the mpirun line that replays an ep plan
// (replay_expert_parallel_cli_test runs it).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli_util.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

using testing::CliResult;
using testing::CliTest;
using testing::RunSsdtrain;

class ExpertParallelCli : public CliTest {
 protected:
  ExpertParallelCli() : CliTest("ep-cli") {}
};

TEST_F(ExpertParallelCli, MixtralOn64H100sChoosesEpAndFitsOnEveryStage) {
  // At ZeRO stage 0, where ep is modelled (traces::Unmodelled); unpinned, ZeRO-3
  // at ep 1 with megatron-offload wins by 1% (417,930 against 413,361 tokens/s
  // for keep at ep 8, 2026-12-05).
  CliResult r = RunSsdtrain("plan --model " + Model("mixtral-8x7b") + " --hardware " +
                            Hardware("h100-sxm-8x-gen5-nvme") + " --zero-stage 0 --gpus 64 -o " +
                            File("plan.json") + " --prediction " + File("predicted.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // The search weighed ep with tp, pp and dp: 8 experts over ep ranks that
  // divide dp, and tp · pp · dp covers the GPUs.
  EXPECT_GT(plan->ep, 1) << r.output;
  EXPECT_EQ(8 % plan->ep, 0);
  EXPECT_EQ(plan->dp % plan->ep, 0);
  EXPECT_EQ(plan->tp * plan->pp * plan->dp, 64);
  EXPECT_NE(r.output.find(" dp " + std::to_string(plan->dp) + " ep " + std::to_string(plan->ep)),
            std::string::npos)
      << r.output;
  // The trace command builds the plan's shard: E/ep experts.
  EXPECT_NE(r.output.find("--dp " + std::to_string(plan->dp) + " --ep " + std::to_string(plan->ep)),
            std::string::npos)
      << r.output;
  // Replay runs it (tests/replay_expert_parallel_cli_test.cc): plan prints the line.
  EXPECT_NE(r.output.find("replay this plan: mpirun -np 64 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expert rank (r / tp) % dp % ep"), std::string::npos) << r.output;
  // Every stage's predicted peak within the budget, and the all-to-alls priced.
  Result<traces::StepReport> predicted = traces::ReadStepReport(File("predicted.json"));
  ASSERT_TRUE(predicted.ok()) << predicted.status().ToString();
  const nlohmann::json& stages = predicted->extra.at("details").at("stages");
  ASSERT_EQ(stages.size(), static_cast<size_t>(plan->pp));
  ASSERT_GT(plan->memory_budget_bytes, 0);
  for (const nlohmann::json& s : stages) {
    EXPECT_GT(s.at("peak_gpu_bytes").get<int64_t>(), 0);
    EXPECT_LE(s.at("peak_gpu_bytes").get<int64_t>(), plan->memory_budget_bytes) << s.dump();
  }
  const nlohmann::json& collectives = predicted->extra.at("details").at("collectives");
  ASSERT_TRUE(collectives.contains("all_to_all")) << collectives.dump();
  EXPECT_GT(collectives.at("all_to_all").at("ns").get<int64_t>(), 0);
}

// Qwen3-30B-A3B's genuine config (32 heads, 4 key/value heads): the search
// tries only the tp its widths allow (models::TensorParallelRefusal); a tp 8
// layout's trace was built and refused the whole search before. Pinned, tp 8
// is refused naming kv_heads.
TEST_F(ExpertParallelCli, TheSearchTriesOnlyTheTpTheKeyValueHeadsAllow) {
  const std::string base = "plan --model " + testing::SourceDir() +
                           "/models/tests/hf/qwen3-30b-a3b --hardware " + Hardware("dgx-b200") +
                           " --gpus 8 --policy keep --micro-batch 1 --seq-len 1024";
  CliResult r = RunSsdtrain(base + " -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(4 % plan->tp, 0) << plan->tp;
  CliResult pinned = RunSsdtrain(base + " --tp 8 -o " + File("p8.json"));
  EXPECT_EQ(pinned.exit_code, 1);
  EXPECT_NE(pinned.output.find("--tp 8: 8 does not divide kv_heads 4"), std::string::npos)
      << pinned.output;
}

TEST_F(ExpertParallelCli, AnImpossibleEpIsRefusedNamingTheFlag) {
  const std::string base = "plan --model " + Model("tiny-moe") + " --hardware " +
                           Hardware("cpu-local") + " --gpus 4 -o " + File("plan.json");
  CliResult three = RunSsdtrain(base + " --ep 3");
  EXPECT_EQ(three.exit_code, 1);
  EXPECT_NE(three.output.find("--ep 3: does not divide the model's 8 experts"), std::string::npos)
      << three.output;
  CliResult dp = RunSsdtrain(base + " --dp 1 --ep 2");
  EXPECT_EQ(dp.exit_code, 1);
  EXPECT_NE(dp.output.find("--ep 2 x tp: does not divide --dp 1 x tp"), std::string::npos)
      << dp.output;
  CliResult dense = RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " +
                                Hardware("cpu-local") + " --gpus 2 --ep 2 -o " + File("d.json"));
  EXPECT_EQ(dense.exit_code, 1);
  EXPECT_NE(dense.output.find("--ep 2: the model is dense"), std::string::npos) << dense.output;
  // `trace` refuses it by the config's field, naming the flag it came from.
  CliResult trace =
      RunSsdtrain("trace --model " + Model("tiny-moe") + " --ep 2 -o " + File("t.json"));
  EXPECT_EQ(trace.exit_code, 1);
  EXPECT_NE(trace.output.find("with --ep 2: ep: ep x tp = 2 x 1 does not divide dp x tp = 1 x 1"),
            std::string::npos)
      << trace.output;
  // HSDP with an ep that its shard groups do not hold: refused naming the flags.
  CliResult hsdp =
      RunSsdtrain("plan --model " + Model("tiny-moe") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 4 --dp 4 --ep 4 --zero-stage 3 --dp-shard 2 -o " + File("h.json"));
  EXPECT_EQ(hsdp.exit_code, 1);
  EXPECT_NE(hsdp.output.find("--ep 4: does not divide --dp-shard 2 (with HSDP"), std::string::npos)
      << hsdp.output;
  CliResult hsdp_trace =
      RunSsdtrain("trace --model " + Model("tiny-moe") +
                  " --dp 4 --ep 4 --zero-stage 3 --dp-shard 2 -o " + File("t.json"));
  EXPECT_EQ(hsdp_trace.exit_code, 1);
  EXPECT_NE(hsdp_trace.output.find("ep: 4 does not divide cp x dp_shard = 1 x 2"),
            std::string::npos)
      << hsdp_trace.output;
  // ZeRO-3 with ep is built.
  CliResult zero_trace = RunSsdtrain("trace --model " + Model("tiny-moe") +
                                     " --dp 2 --ep 2 --zero-stage 3 -o " + File("t.json"));
  EXPECT_EQ(zero_trace.exit_code, 0) << zero_trace.output;
}

TEST_F(ExpertParallelCli, ATraceBuiltAtAnEpIsPlannedAtIt) {
  CliResult traced =
      RunSsdtrain("trace --model " + Model("tiny-moe") + " --dp 2 --ep 2 -o " + File("t.json"));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  const std::string base = "plan --trace " + File("t.json") + " --hardware " +
                           Hardware("cpu-local") + " --gpus 2 --policy keep -o " +
                           File("plan.json");
  CliResult planned = RunSsdtrain(base);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->ep, 2);
  CliResult other = RunSsdtrain(base + " --ep 1");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_NE(other.output.find("--ep 1 contradicts the trace"), std::string::npos) << other.output;
}

TEST_F(ExpertParallelCli, AnEpPlanPrintsItsReplayLineAndOneProcessRefusesIt) {
  CliResult planned =
      RunSsdtrain("plan --model " + Model("tiny-moe") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 4 --tp 2 --pp 1 --dp 2 --ep 2 --policy keep -o " + File("plan.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find("replay this plan: mpirun -np 4 "), std::string::npos)
      << planned.output;
  EXPECT_NE(planned.output.find("expert rank (r / tp) % dp % ep"), std::string::npos)
      << planned.output;
  // Without mpirun the replay names the ranks it needs.
  std::filesystem::create_directories(File("offload"));
  CliResult r = RunSsdtrain("replay --model " + Model("tiny-moe") + " --plan " + File("plan.json") +
                            " --dir " + File("offload") + " -o " + File("run.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("mpirun -np 4"), std::string::npos) << r.output;
}

// A ZeRO-1 plan at ep 2 prints the trace command with both flags, and that
// command builds the very trace the plan was made from (its fingerprint).
TEST_F(ExpertParallelCli, AZeroOneEpPlanPrintsTheTraceCommandThatBuildsItsTrace) {
  CliResult planned =
      RunSsdtrain("plan --model " + Model("tiny-moe") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 2 --tp 1 --pp 1 --dp 2 --ep 2 --zero-stage 1 "
                  "--micro-batch 1 --policy keep -o " +
                  File("plan.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const std::string said = "trace for this plan: ";
  const size_t at = planned.output.find(said);
  ASSERT_NE(at, std::string::npos) << planned.output;
  const std::string command =
      planned.output.substr(at + said.size(), planned.output.find('\n', at) - at - said.size());
  EXPECT_NE(command.find(" --dp 2 --zero-stage 1 --ep 2"), std::string::npos) << command;
  ASSERT_EQ(testing::Shell(command + " -o " + File("t.json")).exit_code, 0) << command;
  Result<traces::Trace> trace = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(traces::Fingerprint(*trace), plan->trace_fingerprint);
}

}  // namespace
}  // namespace ssdtrain

// End to end: `ssdtrain plan --schedule interleaved --virtual-stages v`
// (Megatron's interleaved 1F1B): the flags, what they refuse, the plan file,
// the planner saying when interleaving wins, and the replay line it prints
// (the replays on ranks: tests/replay_interleaved_cli_test.cc).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/cli_util.h"
#include "traces/plan.h"

namespace ssdtrain {
namespace {

using testing::CliResult;
using testing::RunSsdtrain;

class InterleavedCli : public testing::CliTest {
 protected:
  InterleavedCli() : CliTest("interleaved-cli") {}
};

// tiny-gpt (4 layers) on 2 GPUs, pp 2, v 2: one layer per chunk, 4
// micro-batches (a multiple of pp).
TEST_F(InterleavedCli, PinnedScheduleIsRecordedSaidAndReplaysOneStageAlone) {
  const std::string model = Model("tiny-gpt");
  CliResult r = RunSsdtrain("plan --model " + model + " --hardware " + Hardware("cpu-local") +
                            " --gpus 2 --pp 2 --micro-batch 1 --num-micro-batches 4 --schedule "
                            "interleaved --virtual-stages 2 --policy keep -o " +
                            File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(4 micro-batches, interleaved v=2 (1 layer per chunk))"),
            std::string::npos)
      << r.output;
  // The summary weighs it against 1F1B at the same layout and policy.
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("interleaved v=2 (beats 1f1b by|is) [0-9.]+%.*: bubble [0-9.]+% -> "
                           "[0-9.]+% \\(1f1b at this layout and policy: [0-9]+ tokens/s")))
      << r.output;
  // A replay command on one rank per stage.
  EXPECT_NE(r.output.find("replay this plan: mpirun -np 2 "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("not yet replayed"), std::string::npos) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->schedule, "interleaved");
  EXPECT_EQ(plan->virtual_stages, 2);
  EXPECT_EQ(plan->num_micro_batches, 4);
  // One stage alone (its chunk boundaries' sends and recvs as memory passes).
  std::filesystem::create_directories(File("offload"));
  r = RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") + " --dir " +
                  File("offload") + " --backend cpu --steps 1 --single-rank -o " +
                  File("run.json"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(File("run.json")));
  EXPECT_TRUE(std::filesystem::is_empty(File("offload")));
}

TEST_F(InterleavedCli, ImpossibleChunksAreRefusedNamingTheFlags) {
  const std::string base = "plan --model " + Model("tiny-gpt") + " --hardware " +
                           Hardware("cpu-local") + " --policy keep -o " + File("plan.json") + " ";
  const std::pair<std::string, std::string> cases[] = {
      // 4 layers over pp x v = 2 x 3 = 6 chunks.
      {"--gpus 2 --pp 2 --schedule interleaved --virtual-stages 3",
       "--schedule interleaved --virtual-stages 3: the model's 4 layers do not divide by --pp 2 "
       "x --virtual-stages 3 = 6 (Megatron's --num-layers-per-virtual-pipeline-stage is layers "
       "/ (pp x v))"},
      {"--gpus 2 --pp 2 --num-micro-batches 3 --schedule interleaved --virtual-stages 2",
       "--schedule interleaved --virtual-stages 2: --num-micro-batches 3 is not a multiple of "
       "--pp 2, as Megatron-LM's interleaved schedule requires"},
      {"--gpus 1 --pp 1 --schedule interleaved",
       "--schedule interleaved: needs --pp 2 or more, got --pp 1"},
      {"--gpus 2 --pp 2 --schedule interleaved --virtual-stages 1",
       "--schedule interleaved --virtual-stages 1: needs at least 2 model chunks per stage "
       "(--virtual-stages 1 is --schedule 1f1b)"},
      {"--gpus 2 --pp 2 --virtual-stages 2", "--virtual-stages 2: needs --schedule interleaved"},
      {"--gpus 2 --pp 2 --schedule 1f1b --virtual-stages 2",
       "--virtual-stages 2: needs --schedule interleaved, got --schedule 1f1b"},
  };
  for (const auto& [flags, message] : cases) {
    CliResult r = RunSsdtrain(base + flags);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
    EXPECT_FALSE(std::filesystem::exists(File("plan.json"))) << flags;
  }
}

// GPT-1.3B (24 layers) on 8 H100s as 8 pipeline stages of 3 layers, 16
// micro-batches: 1F1B idles (p − 1)/(m + p − 1) = 7/23 of the step; with
// v = 3 chunks of one layer the bubble is (p − 1)/(v·m) of the ideal step,
// 7/55 of the whole. Unpinned, the search weighs both and says interleaving wins.
TEST_F(InterleavedCli, TheSearchSaysWhenInterleavingWins) {
  CliResult r = RunSsdtrain(
      "plan --model " + Model("gpt-1.3b") + " --hardware " + Hardware("h100-sxm-8x-gen5-nvme") +
      " --gpus 8 --tp 1 --pp 8 --micro-batch 1 --policy keep -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.output, m,
      std::regex("interleaved v=3 beats 1f1b by ([0-9.]+)%: bubble ([0-9.]+)% -> ([0-9.]+)%")))
      << r.output;
  EXPECT_GT(std::stod(m[1].str()), 0.0);
  // The bubbles: about 7/23 = 30.4% and 7/55 = 12.7%, sends and uneven stages aside.
  EXPECT_GT(std::stod(m[2].str()), std::stod(m[3].str()));
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->schedule, "interleaved");
  EXPECT_EQ(plan->virtual_stages, 3);
  // Pinned to 1F1B, nothing is said about interleaving.
  r = RunSsdtrain("plan --model " + Model("gpt-1.3b") + " --hardware " +
                  Hardware("h100-sxm-8x-gen5-nvme") +
                  " --gpus 8 --tp 1 --pp 8 --micro-batch 1 --schedule 1f1b --policy keep -o " +
                  File("p1.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("interleaved v="), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ssdtrain

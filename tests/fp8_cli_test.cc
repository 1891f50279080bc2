// FP8 training end to end (issue 39, item 1): `plan --fp8` records its recipe
// in the plan, the replay builds the same FP8 trace (FP8 tensors with their
// scales, FP8 all-gathers under sequence parallelism) and verifies it on the
// CPU backend with the prediction's peaks to the byte, one rank and two
// tensor-parallel ranks; GPUs without FP8, MXFP8 on a Hopper preset and a
// trace built otherwise are refused by name.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli_util.h"
#include "tests/replay_ranks.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

using testing::RunSsdtrain;

class Fp8Cli : public testing::ReplayRanksTest {
 protected:
  Fp8Cli() : ReplayRanksTest("fp8-cli") {}
  // A bf16 copy of `name`'s config (FP8 needs 16-bit weights), `sp` with
  // sequence parallelism.
  std::string Bf16Model(const std::string& name, bool sp = false) {
    std::ifstream in(Model(name));
    nlohmann::json config = nlohmann::json::parse(in);
    config["dtype"] = "bf16";
    config["name"] = name + "-bf16";  // a config is named as its file
    if (sp) config["sequence_parallel"] = true;
    const std::string path = File(name + "-bf16.json");
    std::ofstream(path) << config.dump();
    return path;
  }
};

TEST_F(Fp8Cli, AnFp8PlanReplaysVerifiedWithItsPeaksToTheByte) {
  const std::string model = Bf16Model("tiny-moe");
  auto planned = RunSsdtrain("plan --model " + model + " --hardware " + File("hw.json") +
                             " --fp8 delayed --seq-len 256 --micro-batch 4 --num-micro-batches 2 "
                             "--policy offload-ssd -o " +
                             File("plan.json") + " --prediction " + File("predicted.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->fp8, "delayed");
  EXPECT_FALSE(plan->placements.empty());
  // The linear layers' saved inputs are FP8 in the trace the plan is for.
  auto traced = RunSsdtrain("trace --model " + model + " --fp8 delayed -o " + File("t.json"));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  auto trace = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  EXPECT_EQ(trace->header.fp8, "delayed");
  EXPECT_EQ(plan->trace_fingerprint, traces::Fingerprint(*trace));
  int fp8_saved = 0;
  for (const traces::Tensor& t : trace->tensors) {
    fp8_saved += t.dtype == traces::DType::kFp8 && t.saved_for_backward;
  }
  EXPECT_GT(fp8_saved, 0);

  auto run = RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") +
                         " --backend cpu --dir " + File("offload") + " --steps 1 --verify -o " +
                         File("run.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_NO_FATAL_FAILURE(ReadReports());
  EXPECT_TRUE(report_.verified.value_or(false));
  EXPECT_EQ(report_.metrics.peak_gpu_bytes, predicted_.metrics.peak_gpu_bytes);
  EXPECT_EQ(report_.metrics.peak_activation_bytes, predicted_.metrics.peak_activation_bytes);
  EXPECT_EQ(report_.metrics.ssd_bytes_written, predicted_.metrics.ssd_bytes_written);
}

TEST_F(Fp8Cli, GpusWithoutFp8AndMismatchedTracesAreRefused) {
  const std::string model = Bf16Model("tiny-moe");
  auto r = RunSsdtrain("plan --model " + model + " --hardware " + Hardware("dgx-a100-80gb") +
                       " --fp8 delayed -o " + File("p.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("gpu.peak_tflops.fp8: A100 SXM4 80GB has no FP8 tensor cores"),
            std::string::npos)
      << r.output;
  r = RunSsdtrain("plan --model " + model + " --hardware " + Hardware("dgx-h100") +
                  " --fp8 mxfp8 -o " + File("p.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("gpu.peak_tflops.mxfp8"), std::string::npos) << r.output;
  r = RunSsdtrain("plan --model " + Model("tiny-moe") + " --hardware " + Hardware("dgx-h100") +
                  " --fp8 current -o " + File("p.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("fp8: FP8 training keeps its weights"), std::string::npos) << r.output;
  auto traced = RunSsdtrain("trace --model " + model + " -o " + File("t16.json"));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  r = RunSsdtrain("plan --trace " + File("t16.json") + " --hardware " + Hardware("dgx-h100") +
                  " --fp8 delayed -o " + File("p.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--fp8 delayed contradicts the trace"), std::string::npos) << r.output;
}

#ifdef SSDTRAIN_TEST_MPI
// Two tensor-parallel ranks with sequence parallelism: the column-parallel
// inputs are all-gathered in FP8 between the ranks' processes.
TEST_F(Fp8Cli, TensorParallelFp8ReplaysOnTwoRanks) {
  const std::string model = Bf16Model("tiny-moe", /*sp=*/true);
  auto planned = RunSsdtrain("plan --model " + model + " --hardware " + File("hw.json") +
                             " --fp8 current --gpus 2 --tp 2 --pp 1 --dp 1 --seq-len 256 "
                             "--micro-batch 4 --num-micro-batches 2 --policy offload-ssd -o " +
                             File("plan.json") + " --prediction " + File("predicted.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto r = testing::MpiReplay(2, model, File("plan.json"), File("offload"), File("run.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NO_FATAL_FAILURE(ReadReports());
  ExpectRanksAndStages(2, 1);
  for (const nlohmann::json& rank : report_.extra.at("ranks")) ExpectRankOfStage(rank, 0);
}
#endif

}  // namespace
}  // namespace ssdtrain

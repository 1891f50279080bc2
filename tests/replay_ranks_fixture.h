// The fixture of the multi-rank replay tests of tiny-gpt (replay_ranks_cli_test,
// replay_stages_cli_test): a scratch folder per test with an offload
// directory, a small offload-ssd plan of tiny-gpt laid out for two
// data-parallel ranks and two micro-batches (plan.json), and the mpirun line
// that replays a plan on N ranks.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_util.h"
#include "tests/replay_ranks.h"
#include "traces/io.h"
#include "traces/plan.h"

namespace ssdtrain::testing {

class ReplayRanksCli : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-ranks-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "offload");
    model_ = SourceDir() + "/configs/models/tiny-gpt.json";
    // A small tiny-gpt plan (micro-batch 2, every saved activation of 1 MiB or more to the SSD),
    // laid out for two data-parallel ranks and two micro-batches.
    auto planned = RunSsdtrain("plan --model " + model_ + " --hardware " + SourceDir() +
                               "/configs/hardware/cpu-local.json --gpus 1 --policy offload-ssd "
                               "--micro-batch 2 --seq-len 256 -o " +
                               File("one.json"));
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    auto plan = traces::ReadPlan(File("one.json"));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    plan->dp = 2;
    plan->num_micro_batches = 2;
    ASSERT_TRUE(traces::WritePlan(*plan, File("plan.json")).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  CliResult MpiReplay(int ranks, const std::string& extra = "") {
    // Root in containers and CI: Open MPI asks for both variables.
    return Shell(
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
        "-np " +
        std::to_string(ranks) + " " + SsdtrainBinary() + " replay --model " + model_ + " --plan " +
        File("plan.json") + " --dir " + File("offload") + " --steps 1 --verify -o " +
        File("run.json") + " " + extra);
  }
  // mid-gpt (54.6 M fp32 parameters: two gradient buckets) as the model, and
  // hw.json the replay hardware; false when either cannot be written.
  bool UseMidGpt() {
    std::ofstream(File("mid-gpt.json"))
        << R"({"name": "mid-gpt", "family": "gpt", "hidden": 1024, "heads": 8, "layers": 4,
               "vocab": 4096, "seq_len": 32, "micro_batch": 1, "tp": 1, "pp": 1,
               "attention": "standard", "dtype": "fp32"})";
    model_ = File("mid-gpt.json");
    const Status written =
        WriteReplayHardware(SourceDir() + "/configs/hardware/cpu-local.json", File("hw.json"));
    EXPECT_TRUE(written.ok()) << written.ToString();
    return written.ok();
  }
  std::filesystem::path dir_;
  std::string model_;
};

}  // namespace ssdtrain::testing

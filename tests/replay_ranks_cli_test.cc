// `mpirun -np 2 ssdtrain replay --model ...`: two data-parallel ranks on MPI
// (Open MPI), each replaying tiny-gpt's whole step in its own directory, the
// gradients summed every step; rank 0's one report; a failure on one rank
// ends both with its message. Built only with MPI (SSDTRAIN_HAVE_MPI).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/cli_util.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;
using testing::Shell;
using testing::SourceDir;
using testing::SsdtrainBinary;

class ReplayRanksCli : public ::testing::Test {
 protected:
  void SetUp() override {
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
  void TearDown() override { fs::remove_all(dir_); }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  testing::CliResult MpiReplay(int ranks, const std::string& extra = "") {
    // Root in containers and CI: Open MPI asks for both variables.
    return Shell(
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
        "-np " +
        std::to_string(ranks) + " " + SsdtrainBinary() + " replay --model " + model_ + " --plan " +
        File("plan.json") + " --dir " + File("offload") + " --steps 1 --verify -o " +
        File("run.json") + " " + extra);
  }
  fs::path dir_;
  std::string model_;
};

TEST_F(ReplayRanksCli, TwoDataParallelRanksWriteOneVerifiedReportAndNoFiles) {
  auto r = MpiReplay(2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("x 2 ranks"), std::string::npos) << r.output;
  auto report = traces::ReadStepReport(File("run.json"));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(report->verified.has_value());
  EXPECT_TRUE(*report->verified);
  const nlohmann::json& ranks = report->extra.at("ranks");
  ASSERT_EQ(ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].at("rank").get<int>(), r);
    EXPECT_TRUE(ranks[r].at("verified").get<bool>());
    EXPECT_GT(ranks[r].at("allreduce_ns").get<int64_t>(), 0);
    // The same plan on both ranks: the same bytes and memory.
    EXPECT_EQ(ranks[r].at("ssd_bytes_written"), ranks[0].at("ssd_bytes_written"));
    EXPECT_EQ(ranks[r].at("peak_device_bytes"), ranks[0].at("peak_device_bytes"));
  }
  EXPECT_GT(report->metrics.ssd_bytes_written, 0);
  EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
}

TEST_F(ReplayRanksCli, AFailureOnOneRankEndsBothWithItsMessage) {
  // Rank 1's directory cannot be made (a file has its name).
  { std::ofstream(File("offload/rank-1")) << "in the way"; }
  auto r = MpiReplay(2);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("ssdtrain replay: error: rank 1 failed: "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank-1: cannot create the rank's directory"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(File("offload/rank-0")));
  EXPECT_FALSE(fs::exists(File("run.json")));
}

TEST_F(ReplayRanksCli, RanksOtherThanTheLayoutsAreRefused) {
  auto r = MpiReplay(3);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("dp = 2, but mpirun started 3 ranks"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(File("offload")));
}

}  // namespace
}  // namespace ssdtrain

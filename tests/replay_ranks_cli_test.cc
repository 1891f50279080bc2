// `mpirun -np 2 ssdtrain replay --model ...` on MPI (Open MPI): two
// data-parallel ranks, each replaying tiny-gpt's whole step in its own
// directory, the gradients summed every step; rank 0's one report; a failure
// on one rank ends both with its message; a rank count other than the
// layout's refused. Pipeline stages: replay_stages_cli_test.cc. Built only
// with MPI (SSDTRAIN_HAVE_MPI).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/replay_ranks_fixture.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::ReplayRanksCli;

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

// Rank 0 writes the outputs: an unwritable one ends every rank before any
// replays (before, the ranks replayed the whole step and then failed).
TEST_F(ReplayRanksCli, AnUnwritableOutputEndsEveryRankBeforeAnyReplays) {
  const std::string timeline = File("missing") + "/t.json";
  auto r = MpiReplay(2, "--timeline " + timeline);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("ssdtrain replay: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--timeline " + timeline + ": cannot be written"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("replay: step"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(File("run.json")));
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
  EXPECT_NE(
      r.output.find(
          "tp × cp × pp × dp = 1 × 1 × 1 × 2 = 2, but mpirun started 3 ranks; start mpirun -np 2"),
      std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::is_empty(File("offload")));
}

}  // namespace
}  // namespace ssdtrain

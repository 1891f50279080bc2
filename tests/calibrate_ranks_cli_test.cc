// `mpirun -np 2 ssdtrain calibrate`: both ranks measure at once, each in its
// own folder under --dir, and rank 0 writes one config of their mean figures,
// marked as calibrated on 2 ranks; a failure on one rank ends both with its
// message and no folder is left. Built only with MPI (SSDTRAIN_HAVE_MPI).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "sim/hardware.h"
#include "tests/cli_util.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::Shell;
using testing::SourceDir;
using testing::SsdtrainBinary;

class CalibrateRanksCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-calibrate-ranks-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "offload");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  // Small measurements: 16 MiB through the SSD path, one timed run each, the
  // ops of a small trace.
  testing::CliResult MpiCalibrate(int ranks, const std::string& extra = "") {
    return Shell(
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np " +
        std::to_string(ranks) + " " + SsdtrainBinary() + " calibrate --dir " + File("offload") +
        " --io-size 16777216 --repeats 1 -o " + File("hw.json") + " " + extra);
  }
  fs::path dir_;
};

TEST_F(CalibrateRanksCli, TwoRanksWriteOneConfigMarkedAndLeaveNoFolders) {
  auto trace = testing::RunSsdtrain("trace --model " + SourceDir() +
                                    "/configs/models/tiny-gpt.json --micro-batch 1 "
                                    "--seq-len 128 -o " +
                                    File("t.json"));
  ASSERT_EQ(trace.exit_code, 0) << trace.output;
  auto r = MpiCalibrate(2, "--trace " + File("t.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rank 0 speaks for both, once.
  EXPECT_NE(r.output.find("rank 0: timing the ops of tiny-gpt"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("rank 1:"), std::string::npos) << r.output;
  auto hw = sim::LoadHardware(File("hw.json"));
  ASSERT_TRUE(hw.ok()) << hw.status().ToString();
  EXPECT_EQ(hw->calibrated_ranks, 2);
  EXPECT_NE(hw->description.find("on 2 ranks at once"), std::string::npos) << hw->description;
  EXPECT_GT(hw->storage.drive.write_GBps, 0);
  EXPECT_FALSE(hw->measured_op_times.empty());
  // The links between the two ranks were measured, not the base's 10 GB/s and
  // 5 us kept (cpu-local.json): a measured figure is never exactly those.
  EXPECT_NE(r.output.find("interconnect between the 2 ranks: "), std::string::npos) << r.output;
  // Both ranks on this machine: one scale-up domain of 2 at the measured figures.
  EXPECT_EQ(hw->interconnect.domain_gpus, 2);
  EXPECT_GT(hw->interconnect.scale_up.P2pGBps(), 0);
  EXPECT_GT(hw->interconnect.scale_up.GBps, 0);
  EXPECT_GT(hw->interconnect.scale_up.latency_us, 0);
  EXPECT_NE(hw->interconnect.scale_up.P2pGBps(), 10);
  EXPECT_NE(hw->interconnect.scale_up.GBps, 10);
  EXPECT_NE(hw->interconnect.scale_up.latency_us, 5);
  EXPECT_NE(hw->description.find("interconnect measured between the ranks"), std::string::npos);
  EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank folders or files left";
}

TEST_F(CalibrateRanksCli, AFailureOnOneRankEndsBothWithItsMessage) {
  // Rank 1's folder is a 1 MiB tmpfs: its SSD measurement (16 MiB) fails,
  // disk full; rank 0 learns of it before its next measurement, the ops.
  fs::create_directories(File("offload/rank-1"));
  if (::mount("tmpfs", File("offload/rank-1").c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "mounting a tmpfs needs root: " << std::strerror(errno);
  }
  auto r = MpiCalibrate(
      2, "--model " + SourceDir() + "/configs/models/tiny-gpt.json --allow-buffered-io");
  ::umount(File("offload/rank-1").c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("ssdtrain calibrate: error: rank 1 failed: "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("disk full"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("timing the ops"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("signal"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(File("hw.json")));
  EXPECT_FALSE(fs::exists(File("offload/rank-0")));
  EXPECT_TRUE(fs::is_empty(File("offload/rank-1")));
}

// A missing --dir ends every rank before anything is measured, naming the
// directory (one process used to time its GEMMs for seconds first).
TEST_F(CalibrateRanksCli, AMissingDirectoryEndsEveryRankBeforeAnyMeasurement) {
  fs::remove(File("offload"));
  auto r = MpiCalibrate(2);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("ssdtrain calibrate: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("offload directory " + File("offload") + " cannot be used"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("calibrate ["), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(File("hw.json")));
}

TEST_F(CalibrateRanksCli, ABadArgumentOnEveryRankIsSaidOnce) {
  auto r = MpiCalibrate(2, "--trace " + File("missing.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing.json"), std::string::npos) << r.output;
  // Rank 0 reports; rank 1 stays quiet.
  const size_t first = r.output.find("ssdtrain calibrate: error:");
  ASSERT_NE(first, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ssdtrain calibrate: error:", first + 1), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(File("offload")));
}

}  // namespace
}  // namespace ssdtrain

// A step of m micro-batches keeps m micro-batches' offload files open until it
// ends (exec/detail/file_limit.h). tiny-gpt under offload-ssd at micro-batch 1
// writes 16 files per micro-batch: 8 micro-batches keep 128 open, past a soft
// limit of 100.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/cli_util.h"

namespace ssdtrain::testing {
namespace {

namespace fs = std::filesystem;

class ReplayFileLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-fdlimit-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "off");
    model_ = SourceDir() + "/configs/models/tiny-gpt.json";
    const CliResult plan =
        RunSsdtrain("plan --model " + model_ + " --hardware " + SourceDir() +
                    "/configs/hardware/cpu-local.json --policy offload-ssd --micro-batch 1 "
                    "--num-micro-batches 8 -o " +
                    (dir_ / "plan.json").string());
    ASSERT_EQ(plan.exit_code, 0) << plan.output;
  }
  void TearDown() override { fs::remove_all(dir_); }
  // The replay under `ulimit` arguments (-Sn N: the soft limit only).
  CliResult Replay(const std::string& ulimit) {
    return Shell("bash -c 'ulimit " + ulimit + " && exec " + SsdtrainBinary() + " replay --model " +
                 model_ + " --plan " + (dir_ / "plan.json").string() + " --dir " +
                 (dir_ / "off").string() + " --steps 1 -o " + (dir_ / "run.json").string() + "'");
  }
  fs::path dir_;
  std::string model_;
};

TEST_F(ReplayFileLimit, ASoftLimitBelowTheStepsFilesIsRaisedToTheHardOne) {
  const CliResult r = Replay("-Sn 100");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "run.json"));
  EXPECT_TRUE(fs::is_empty(dir_ / "off"));
}

TEST_F(ReplayFileLimit, AHardLimitBelowTheStepsFilesIsRefusedBeforeAnyFile) {
  const CliResult r = Replay("-n 100");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("plan.json: the step keeps 128 offload files open until it ends "
                          "(every micro-batch writes its own), but the open-file limit is 100 "
                          "(hard 100)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "run.json"));
  EXPECT_TRUE(fs::is_empty(dir_ / "off"));
}

}  // namespace
}  // namespace ssdtrain::testing

// One vocabulary across verbs (issue 30 item 6): replay's policy names are
// plan's, compare's prediction flag is plan's --prediction, every size flag
// takes 64M, 1G or plain bytes, and --backend is the device everywhere (the
// I/O engine is --io-backend). Each old spelling still works, with one note.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "tests/cli_util.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::RunSsdtrain;
using testing::SourceDir;

class CliVocab : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-cli-vocab-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

bool Has(const CliResult& r, const std::string& what) {
  return r.output.find(what) != std::string::npos;
}

// replay said offload-all where plan says offload-ssd.
TEST_F(CliVocab, ReplayTakesPlansPolicyNamesAndTheOldOneWithANote) {
  const std::string trace = File("t.json");
  ASSERT_EQ(RunSsdtrain("trace --model " + SourceDir() + "/configs/models/tiny-gpt.json -o " +
                        trace)
                .exit_code,
            0);
  const std::string common = "replay --trace " + trace +
                             " --backend cpu --steps 1 --device-memory 0.25 --allow-buffered-io "
                             "--dir " +
                             dir_.string() + " -o " + File("run.json") + " --policy ";
  CliResult now = RunSsdtrain(common + "offload-ssd");
  EXPECT_EQ(now.exit_code, 0) << now.output;
  EXPECT_FALSE(Has(now, "note:")) << now.output;
  CliResult old = RunSsdtrain(common + "offload-all");
  EXPECT_EQ(old.exit_code, 0) << old.output;
  EXPECT_TRUE(Has(old, "ssdtrain replay: note: --policy offload-all is now --policy offload-ssd"))
      << old.output;
}

// The same file was plan's --prediction and compare's --predicted.
TEST_F(CliVocab, ComparesPredictionFlagIsPlansAndTheOldNameIsAnAlias) {
  CliResult now = RunSsdtrain("compare --prediction " + File("none.json") + " --measured " +
                              File("none.json"));
  EXPECT_EQ(now.exit_code, 1);
  EXPECT_FALSE(Has(now, "The following argument was not expected")) << now.output;
  EXPECT_TRUE(Has(now, "none.json")) << now.output;
  CliResult old = RunSsdtrain("compare --predicted " + File("none.json") + " --measured " +
                              File("none.json"));
  EXPECT_TRUE(Has(old, "ssdtrain compare: note: --predicted is now --prediction")) << old.output;
  CliResult missing = RunSsdtrain("compare --measured " + File("none.json"));
  EXPECT_TRUE(Has(missing, "ssdtrain compare: error: --prediction is required")) << missing.output;
}

// bench-io took --size 64M, calibrate only an integer --io-size.
TEST_F(CliVocab, EverySizeFlagTakesOneSyntax) {
  for (const std::string flag : {"--io-size", "--block-size"}) {
    // A size parses: the error is then the missing directory, not the flag.
    CliResult ok = RunSsdtrain("calibrate --dir " + File("nope") + " -o " + File("c.json") + " " +
                               flag + " 64M");
    EXPECT_EQ(ok.exit_code, 1);
    EXPECT_FALSE(Has(ok, flag)) << ok.output;
    CliResult bad = RunSsdtrain("calibrate --dir " + File("nope") + " -o " + File("c.json") + " " +
                                flag + " 64X");
    EXPECT_EQ(bad.exit_code, 1);
    EXPECT_TRUE(Has(bad, "must be a size such as 4096, 64k, 4M or 1G, got 64X")) << bad.output;
  }
  CliResult bench = RunSsdtrain("bench-io --dir " + File("nope") + " --size 64X");
  EXPECT_TRUE(Has(bench, "ssdtrain bench-io: error: --size: must be a size such as 4096, 64k, "
                         "4M or 1G, got 64X"))
      << bench.output;
}

// --backend named the I/O engine in bench-io and the device everywhere else.
TEST_F(CliVocab, BenchIoNamesItsIoEngineAsReplayDoes) {
  CliResult now = RunSsdtrain("bench-io --dir " + dir_.string() +
                              " --size 1M --block-size 64k --allow-buffered-io --io-backend posix");
  EXPECT_EQ(now.exit_code, 0) << now.output;
  EXPECT_TRUE(Has(now, "backend=posix")) << now.output;
  EXPECT_FALSE(Has(now, "note:")) << now.output;
  CliResult old = RunSsdtrain("bench-io --dir " + dir_.string() +
                              " --size 1M --block-size 64k --allow-buffered-io --backend posix");
  EXPECT_EQ(old.exit_code, 0) << old.output;
  EXPECT_TRUE(Has(old, "ssdtrain bench-io: note: --backend is now --io-backend")) << old.output;
  CliResult bad = RunSsdtrain("bench-io --dir " + dir_.string() + " --io-backend spdk");
  EXPECT_TRUE(Has(bad, "ssdtrain bench-io: error: --io-backend")) << bad.output;
}

}  // namespace
}  // namespace ssdtrain

// `cmake --install` of this build into a scratch prefix, then an outside
// project (tests/install_consumer/) configured with find_package(ssdtrain),
// built and run against it: it plans and simulates the tiny GPT from the
// installed configs and round-trips a tensor through the offload engine on the
// real disk. The installed binary plans from its installed configs too.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cmake/build_paths.h"
#include "tests/cli_util.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::Shell;

class Install : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ssdtrain-install-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "scratch");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(Install, AnOutsideProjectFindsThePackageBuildsAndRuns) {
  const fs::path prefix = dir_ / "prefix";
  const std::string cmake = SSDTRAIN_CMAKE;
  CliResult r = Shell(cmake + " --install " + ConfiguredBinaryDir() + " --prefix " +
                      prefix.string() + " >/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // What a user gets, and what stays private.
  for (const char* file :
       {"bin/ssdtrain", "lib/libssdtrain_traces.a", "lib/libssdtrain_models.a",
        "lib/libssdtrain_sim.a", "lib/libssdtrain_exec.a", "lib/libssdtrain_analysis.a",
        "lib/cmake/ssdtrain/ssdtrainConfig.cmake", "lib/cmake/ssdtrain/ssdtrainConfigVersion.cmake",
        "include/ssdtrain/sim/simulate.h", "include/ssdtrain/exec/offload_engine.h",
        "include/ssdtrain/exec/replay.h", "include/ssdtrain/traces/trace.h",
        "share/ssdtrain/configs/hardware/cpu-local.json",
        "share/ssdtrain/configs/models/tiny-gpt.json"}) {
    EXPECT_TRUE(fs::exists(prefix / file)) << file;
  }
  for (const char* kept : {"include/ssdtrain/exec/detail", "include/ssdtrain/sim/detail",
                           "include/ssdtrain/models/detail", "include/ssdtrain/exec/tests",
                           "include/ssdtrain/exec/tensor_cache.h"}) {
    EXPECT_FALSE(fs::exists(prefix / kept)) << kept << " is installed";
  }

  // The outside project: configured, built and run against the prefix alone.
  const fs::path build = dir_ / "consumer";
  r = Shell(cmake + " -S " + testing::SourceDir() + "/tests/install_consumer -B " + build.string() +
            " -G Ninja -DCMAKE_PREFIX_PATH=" + prefix.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Shell(cmake + " --build " + build.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Shell((build / "consumer").string() + " " + (dir_ / "scratch").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("round trip: 3146728 bytes"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step_time_ns: 0\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("headers: 0\n"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir_ / "scratch")) << "the engine left files";

  // The installed binary, from another directory, plans with its own configs;
  // calibrate's default base config is the installed one.
  const std::string configs = (prefix / "share/ssdtrain/configs").string();
  r = Shell("cd " + dir_.string() + " && " + (prefix / "bin/ssdtrain").string() + " plan --model " +
            configs + "/models/tiny-gpt.json --hardware " + configs +
            "/hardware/cpu-local.json -o plan.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "plan.json"));
  r = Shell((prefix / "bin/ssdtrain").string() + " calibrate --help");
  EXPECT_NE(r.output.find(configs + "/hardware/cpu-local.json"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ssdtrain

// End to end: `ssdtrain demo` on a model small enough for the suite (two layers,
// h=64): calibrate, plan, verify, replay in rounds, compare, summary; the
// calibration cache on a second run; no offload file left behind.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/cli_util.h"
#include "tests/micro_gpt.h"
#include "traces/io.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::RunSsdtrain;

class DemoCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ssdtrain-demo-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "offload");
    // A private calibration cache: the first run measures, the second reuses it.
    ::setenv("XDG_CACHE_HOME", (dir_ / "cache").c_str(), 1);
    const nlohmann::json model = testing::MicroGptConfig();
    ASSERT_TRUE(traces::WriteJsonFile(model, File("micro-gpt.json")).ok());
  }
  void TearDown() override {
    ::unsetenv("XDG_CACHE_HOME");
    fs::remove_all(dir_);
  }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  CliResult Demo(const std::string& name, const std::string& flags) const {
    return RunSsdtrain("demo --model " + File("micro-gpt.json") + " --dir " + File("offload") +
                       " --report " + File(name) + " --summary " + File(name + ".json") +
                       " --no-plots " + flags);
  }
  fs::path dir_;
};

TEST_F(DemoCli, RunsTheMainJobInRoundsAndReusesItsCalibration) {
  const CliResult first = Demo("first", "--rounds 3 --steps 1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("calibrate: timing the ops of micro-gpt"), std::string::npos)
      << first.output;
  EXPECT_NE(first.output.find("measured: the median of 3 rounds"), std::string::npos);
  EXPECT_NE(first.output.find("report folder: " + File("first")), std::string::npos);
  Result<nlohmann::json> s = traces::ReadJsonFile(File("first.json"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)["rounds"], 3);
  std::vector<std::string> policies;
  for (const nlohmann::json& r : (*s)["rows"]) {
    policies.push_back(r["policy"]);
    EXPECT_EQ(r["verified"], true) << r.dump();
    // The measurement is the median round.
    std::vector<int64_t> rounds = r["round_step_times_ns"];
    ASSERT_EQ(rounds.size(), 3u) << r.dump();
    std::sort(rounds.begin(), rounds.end());
    EXPECT_EQ(r["measured_step_ns"].get<int64_t>(), rounds[1]) << r.dump();
    EXPECT_GT(r["predicted_step_ns"].get<int64_t>(), 0);
  }
  EXPECT_EQ(policies, (std::vector<std::string>{"keep", "recompute-full", "ssdtrain", "optimal"}));
  for (const char* f : {"plan-optimal.json", "measured-ssdtrain.json", "predicted-keep.json",
                        "compare-recompute-full.csv", "timeline-measured-optimal.json",
                        "hardware.json", "trace.json"}) {
    EXPECT_TRUE(fs::exists(dir_ / "first" / f)) << f;
  }
  // The budget forced the planner below keep's activation peak (on a model this
  // small by recomputing: the SSD path is exercised by the replay tests and the
  // accuracy test on tiny-gpt), and no offload file is left.
  EXPECT_LT((*s)["rows"][3]["peak_activation_bytes"].get<int64_t>(),
            (*s)["rows"][0]["peak_activation_bytes"].get<int64_t>());
  EXPECT_TRUE(fs::is_empty(dir_ / "offload"));

  // Second run: the cached calibration, one round, keep replayed again at the end.
  const CliResult second = Demo("second", "--rounds 1 --steps 1 --no-verify");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("calibration: using"), std::string::npos) << second.output;
  // Measuring may still happen after the replays (keep more than 10% off its
  // prediction, which a model this small can be), never before them.
  EXPECT_LT(second.output.find("calibration: using"), second.output.find("calibrate: "))
      << second.output;
  EXPECT_NE(second.output.find("keep measured again at the end"), std::string::npos);
  Result<nlohmann::json> s2 = traces::ReadJsonFile(File("second.json"));
  ASSERT_TRUE(s2.ok()) << s2.status().ToString();
  EXPECT_GT((*s2)["keep_again_step_ns"].get<int64_t>(), 0);
  for (const nlohmann::json& r : (*s2)["rows"]) EXPECT_TRUE(r["verified"].is_null()) << r.dump();
  EXPECT_TRUE(fs::is_empty(dir_ / "offload"));
}

TEST_F(DemoCli, MissingOffloadDirectoryIsAnErrorNamingIt) {
  const CliResult r = RunSsdtrain("demo --model " + File("micro-gpt.json") + " --dir " +
                                  File("nowhere") + " --report " + File("r") + " --no-plots");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(File("nowhere")), std::string::npos) << r.output;
}

TEST_F(DemoCli, SigtermRemovesItsTemporaryOffloadDirectory) {
  // Without --dir the demo offloads into a directory of its own under TMPDIR;
  // stopped by SIGTERM mid-run it removes that directory too (the engine's
  // run directory inside it first), then dies by the signal.
  fs::create_directories(dir_ / "tmp");
  const std::string tmp = File("tmp");
  const CliResult r =
      testing::Shell("TMPDIR=" + tmp + " " + testing::SsdtrainBinary() + " demo --model " +
                     File("micro-gpt.json") + " --report " + File("r") +
                     " --no-plots --rounds 50 >/dev/null 2>&1 & pid=$!; "
                     "for i in $(seq 100); do ls " +
                     tmp +
                     " | grep -q ssdtrain-demo- && break; sleep 0.1; done; "
                     "sleep 2; ls " +
                     tmp + "; kill -TERM $pid; wait $pid; echo exit=$?");
  EXPECT_NE(r.output.find("ssdtrain-demo-"), std::string::npos)
      << "the demo never made its directory: " << r.output;
  EXPECT_NE(r.output.find("exit=143"), std::string::npos) << r.output;  // 128 + SIGTERM
  EXPECT_TRUE(fs::is_empty(tmp)) << "left in TMPDIR after SIGTERM";
}

}  // namespace
}  // namespace ssdtrain

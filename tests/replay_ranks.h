// What the multi-rank replay tests share: the hardware they plan with (the
// cpu-local preset with the CPU backend's memory as calibrate records it,
// 64-byte arena granularity and the GEMM workspace counted, so that a plan's
// peaks are the replay's to the byte), and the mpirun line that replays a plan.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sim/hardware.h"
#include "tests/cli_util.h"
#include "traces/io.h"
#include "traces/report.h"
#include "traces/status.h"

namespace ssdtrain::testing {

// Writes that hardware config, made from the preset at `preset`, to `path`.
inline Status WriteReplayHardware(const std::string& preset, const std::string& path) {
  SSDTRAIN_ASSIGN_OR_RETURN(sim::HardwareOptions hw, sim::LoadHardware(preset));
  hw.gpu.allocation_alignment_bytes = 64;
  hw.gpu.replay_workspace = true;
  return traces::WriteJsonFile(sim::ToJson(hw), path);
}

// The bytes of each data-parallel bucket in a prediction's Chrome timeline
// (`plan --timeline`), in its order: the all-reduces (ZeRO-0), reduce-scatters
// (ZeRO-1) or HSDP's replica all-reduces (ZeRO-2/3) of sim/simulate.cc.
inline std::vector<int64_t> PredictedBucketBytes(const std::string& timeline_path) {
  std::ifstream file(timeline_path);
  const nlohmann::json timeline = nlohmann::json::parse(file);
  std::vector<int64_t> bytes;
  for (const nlohmann::json& e : timeline.at("traceEvents")) {
    const std::string name = e.value("name", "");
    if (name == "data-parallel all-reduce" || name == "data-parallel reduce-scatter" ||
        name == "replica all-reduce (HSDP)") {
      bytes.push_back(e.at("args").at("bytes").get<int64_t>());
    }
  }
  return bytes;
}

// A CLI test of replays on ranks: its folder holds an empty offload/ and that
// hardware as hw.json.
class ReplayRanksTest : public CliTest {
 protected:
  explicit ReplayRanksTest(std::string prefix) : CliTest(std::move(prefix)) {}
  void SetUp() override {
    CliTest::SetUp();
    std::filesystem::create_directories(dir_ / "offload");
    const Status written = WriteReplayHardware(Hardware("cpu-local"), File("hw.json"));
    ASSERT_TRUE(written.ok()) << written.ToString();
  }
  // The run's report (run.json) and the plan's prediction (predicted.json).
  void ReadReports() {
    auto report = traces::ReadStepReport(File("run.json"));
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    report_ = *report;
    auto predicted = traces::ReadStepReport(File("predicted.json"));
    ASSERT_TRUE(predicted.ok()) << predicted.status().ToString();
    predicted_ = *predicted;
  }
  // The report's ranks (`ranks` of them, the run verified) and the
  // prediction's stages (`pp` of them).
  void ExpectRanksAndStages(int ranks, int pp) const {
    EXPECT_TRUE(report_.verified.value_or(false));
    ASSERT_EQ(report_.extra.at("ranks").size(), static_cast<size_t>(ranks));
    ASSERT_EQ(predicted_.extra.at("details").at("stages").size(), static_cast<size_t>(pp));
  }
  // `rank` (an entry of the report's ranks) runs stage `stage`, verified,
  // with that stage's predicted peaks to the byte.
  void ExpectRankOfStage(const nlohmann::json& rank, int stage) const {
    const nlohmann::json& predicted = predicted_.extra.at("details").at("stages")[stage];
    EXPECT_EQ(rank.at("stage").get<int>(), stage);
    EXPECT_TRUE(rank.at("verified").get<bool>());
    EXPECT_EQ(rank.at("peak_device_bytes"), predicted.at("peak_gpu_bytes"));
    EXPECT_EQ(rank.at("peak_activation_bytes"), predicted.at("peak_activation_bytes"));
  }
  // `plan --model model --hardware hw.json flags` with the plan, its
  // prediction and its timeline written here; checks that it prints the
  // replay line for `ranks` ranks, replays the plan on them (MpiReplay) and
  // reads both reports.
  void PlanThenReplay(const std::string& model, const std::string& flags, int ranks);
  traces::StepReport report_, predicted_;
};

// A replay of this size ends in seconds; one still running after this has hung.
inline constexpr int kReplayHangGuardSeconds = 300;

// `mpirun -np ranks ssdtrain replay --model model --plan plan --dir dir
// --steps 1 --verify -o out`, as root where the container runs so (Open MPI
// asks for both variables), ended after kReplayHangGuardSeconds.
inline CliResult MpiReplay(int ranks, const std::string& model, const std::string& plan,
                           const std::string& dir, const std::string& out) {
  return Shell("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout " +
               std::to_string(kReplayHangGuardSeconds) + " mpirun --oversubscribe -np " +
               std::to_string(ranks) + " " + SsdtrainBinary() + " replay --model " + model +
               " --plan " + plan + " --dir " + dir + " --steps 1 --verify -o " + out);
}

inline void ReplayRanksTest::PlanThenReplay(const std::string& model, const std::string& flags,
                                            int ranks) {
  const CliResult planned =
      RunSsdtrain("plan --model " + model + " --hardware " + File("hw.json") + flags + " -o " +
                  File("plan.json") + " --prediction " + File("predicted.json") + " --timeline " +
                  File("predicted-timeline.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  const std::string n = std::to_string(ranks);
  EXPECT_NE(planned.output.find("replay this plan: mpirun -np " + n + " "), std::string::npos)
      << planned.output;
  const CliResult r = MpiReplay(ranks, model, File("plan.json"), File("offload"), File("run.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("x " + n + " ranks"), std::string::npos) << r.output;
  ASSERT_NO_FATAL_FAILURE(ReadReports());
}

}  // namespace ssdtrain::testing

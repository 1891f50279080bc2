// A node's several drives from the command line (traces/drives.h): `plan`
// records the hardware's arrays and stripe in the plan, `replay --dir A --dir B`
// stripes every tensor over them as the simulator predicted, each drive's
// bytes to the byte, verified, nothing left in any directory; under mpirun
// each rank uses its own array's directories; a --dir count the plan does not
// have is refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/replay_ranks.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;

class DrivesCli : public testing::ReplayRanksTest {
 protected:
  DrivesCli() : ReplayRanksTest("drives-cli") {}
  // hw.json with storage.arrays `arrays` and 64 KiB requests, as hw-drives.json.
  std::string DrivesHardware(const std::vector<int>& arrays) {
    std::ifstream in(File("hw.json"));
    nlohmann::json hw = nlohmann::json::parse(in);
    hw["storage"]["arrays"] = arrays;
    hw["storage"]["gpus_per_array"] = 1;
    hw["storage"]["drive"]["request_KiB"] = 64;
    const std::string path = File("hw-drives.json");
    std::ofstream(path) << hw.dump();
    return path;
  }
  // `n` empty directories ssd0.. under the test's folder, as repeated --dir flags.
  std::string DirFlags(int n) {
    std::string flags;
    for (int d = 0; d < n; ++d) {
      const std::string dir = File("ssd" + std::to_string(d));
      fs::create_directories(dir);
      flags += " --dir " + dir;
    }
    return flags;
  }
  // plan.json and predicted.json: `model` offloaded to one array of two drives.
  void PlanOffloadOnTwoDrives(const std::string& model) {
    auto planned = RunSsdtrain("plan --model " + model + " --hardware " + DrivesHardware({2}) +
                               " --gpus 1 --policy offload-ssd --micro-batch 2 --seq-len 256 "
                               "--num-micro-batches 2 -o " +
                               File("plan.json") + " --prediction " + File("predicted.json"));
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
  }
  void ExpectEmpty(int n) {
    for (int d = 0; d < n; ++d) {
      EXPECT_TRUE(fs::is_empty(File("ssd" + std::to_string(d)))) << "ssd" << d;
    }
  }
};

TEST_F(DrivesCli, APlanForTwoDrivesReplaysStripedWithEachDrivesBytesPredicted) {
  const std::string model = Model("tiny-gpt");
  ASSERT_NO_FATAL_FAILURE(PlanOffloadOnTwoDrives(model));
  auto plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->storage.arrays, (std::vector<int>{2}));
  EXPECT_EQ(plan->storage.stripe_bytes, 64 * 1024);

  auto run =
      RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") + " --backend cpu" +
                  DirFlags(2) + " --steps 1 --verify -o " + File("run.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("striped over 2 directories in 64 KiB stripes"), std::string::npos)
      << run.output;
  ASSERT_NO_FATAL_FAILURE(ReadReports());
  EXPECT_TRUE(report_.verified.value_or(false));
  const std::vector<int64_t>& want = predicted_.metrics.ssd_bytes_written_per_drive;
  ASSERT_EQ(want.size(), 2u);
  EXPECT_GT(want[0], 0);
  EXPECT_GT(want[1], 0);
  EXPECT_EQ(want[0] + want[1], predicted_.metrics.ssd_bytes_written);
  EXPECT_EQ(report_.metrics.ssd_bytes_written_per_drive, want);
  // The path the bytes took, said in the run file (exec/cufile.h).
  EXPECT_EQ(report_.extra.at("storage_path"),
            "the CPU backend's files (no GPU, no GPUDirect Storage)");
  // The bytes bounce through the replay's pinned staging (--staging-memory's default).
  EXPECT_EQ(report_.extra.at("staging_bytes"), int64_t{256} << 20);
  ExpectEmpty(2);
}

// GPUDirect Storage (exec/cufile_backend.h) through the stand-in libcufile
// (exec/tests/fake_cufile.cc, whose cuFileRead/cuFileWrite move the CPU
// arena's bytes with pread/pwrite): the replay writes and reads the device
// buffers themselves, no staging copy, verified on the device, each drive's
// bytes the prediction's; a cuFile that does not load under --gds on is an
// error naming it, with nothing written.
TEST_F(DrivesCli, AReplayThroughGpuDirectStorageMovesTheDeviceBuffersThemselves) {
  const std::string model = Model("tiny-gpt");
  ASSERT_NO_FATAL_FAILURE(PlanOffloadOnTwoDrives(model));
  const std::string library = std::string(SSDTRAIN_FAKE_CUFILE_DIR) + "/libfake_cufile_ok.so";
  auto run = RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") +
                         " --backend cpu --gds on --cufile-library " + library + DirFlags(2) +
                         " --steps 2 --verify -o " + File("run.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string said = "GPUDirect Storage: cuFile 1.13 (" + library +
                           "), device memory to the files and back without a host copy";
  EXPECT_NE(run.output.find("replay: storage path: " + said), std::string::npos) << run.output;
  ASSERT_NO_FATAL_FAILURE(ReadReports());
  EXPECT_TRUE(report_.verified.value_or(false));
  EXPECT_EQ(report_.extra.at("storage_path"), said);
  EXPECT_EQ(report_.extra.at("gds"), true);
  EXPECT_EQ(report_.extra.at("io_backend"), "cufile 1.13");
  EXPECT_EQ(report_.extra.at("staging_bytes"), 0);  // nothing bounces: no staging pinned
  ASSERT_EQ(predicted_.metrics.ssd_bytes_written_per_drive.size(), 2u);
  EXPECT_GT(predicted_.metrics.ssd_bytes_written, 0);
  EXPECT_EQ(report_.metrics.ssd_bytes_written_per_drive,
            predicted_.metrics.ssd_bytes_written_per_drive);
  EXPECT_EQ(report_.metrics.ssd_bytes_read, predicted_.metrics.ssd_bytes_read);
  ExpectEmpty(2);

  auto absent = RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") +
                            " --backend cpu --gds on --cufile-library /nonexistent/libcufile.so.0" +
                            DirFlags(2) + " --steps 1 -o " + File("run2.json"));
  EXPECT_EQ(absent.exit_code, 1);
  EXPECT_NE(absent.output.find("--gds on: /nonexistent/libcufile.so.0 was not found"),
            std::string::npos)
      << absent.output;
  EXPECT_FALSE(fs::exists(File("run2.json")));
  ExpectEmpty(2);
}

TEST_F(DrivesCli, ADirectoryCountThePlanDoesNotHaveIsRefused) {
  const std::string model = Model("tiny-gpt");
  auto planned = RunSsdtrain("plan --model " + model + " --hardware " + DrivesHardware({2}) +
                             " --gpus 1 --policy offload-ssd --micro-batch 2 --seq-len 256 -o " +
                             File("plan.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto run = RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") +
                         " --backend cpu" + DirFlags(3) + " --steps 1 -o " + File("run.json"));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.output.find("--dir: the plan's storage has 2 drives in 1 array, but 3 offload "
                            "directories were given; give one directory per drive"),
            std::string::npos)
      << run.output;
  EXPECT_FALSE(fs::exists(File("run.json")));
  ExpectEmpty(3);
}

// `calibrate` over two directories measures each alone and both together, and
// records one array of two drives; a plan on it records that array, and its
// replay over the same two directories writes each drive's predicted bytes.
TEST_F(DrivesCli, CalibrateMeasuresEachDirectoryAndTheirSumForAPlanOfTwoDrives) {
  const std::string dirs = DirFlags(2);
  auto calibrated = RunSsdtrain("calibrate" + dirs +
                                " --backend cpu --io-size 16777216 "
                                "--repeats 1 -o " +
                                File("calibrated.json"));
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  for (int d = 0; d < 2; ++d) {
    EXPECT_NE(calibrated.output.find(File("ssd" + std::to_string(d)) + " alone: "),
              std::string::npos)
        << calibrated.output;
  }
  EXPECT_NE(calibrated.output.find("recorded as one array of 2 drives"), std::string::npos)
      << calibrated.output;
  std::ifstream in(File("calibrated.json"));
  const nlohmann::json hw = nlohmann::json::parse(in);
  EXPECT_EQ(hw.at("storage").at("arrays"), nlohmann::json::array({2}));
  EXPECT_GT(hw.at("storage").at("drive").at("write_GBps").get<double>(), 0);
  ExpectEmpty(2);

  const std::string model = Model("tiny-gpt");
  auto planned = RunSsdtrain("plan --model " + model + " --hardware " + File("calibrated.json") +
                             " --gpus 1 --policy offload-ssd --micro-batch 2 --seq-len 256 -o " +
                             File("plan.json") + " --prediction " + File("predicted.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto run = RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") +
                         " --backend cpu" + dirs + " --steps 1 --verify -o " + File("run.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  ASSERT_NO_FATAL_FAILURE(ReadReports());
  ASSERT_EQ(predicted_.metrics.ssd_bytes_written_per_drive.size(), 2u);
  EXPECT_EQ(report_.metrics.ssd_bytes_written_per_drive,
            predicted_.metrics.ssd_bytes_written_per_drive);
  ExpectEmpty(2);
}

#ifdef SSDTRAIN_TEST_MPI
// Two arrays of one drive each, dp 2 on two ranks: rank r is GPU slot r and
// uses array r's directory alone (its report says which), verified, nothing
// left in either.
TEST_F(DrivesCli, EachRankUsesItsArraysDirectory) {
  const std::string model = Model("tiny-gpt");
  auto planned = RunSsdtrain("plan --model " + model + " --hardware " + DrivesHardware({1, 1}) +
                             " --gpus 2 --dp 2 --tp 1 --pp 1 --policy offload-ssd --micro-batch 2 "
                             "--seq-len 256 -o " +
                             File("plan.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto r = testing::Shell(
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout " +
      std::to_string(testing::kReplayHangGuardSeconds) + " mpirun --oversubscribe -np 2 " +
      testing::SsdtrainBinary() + " replay --model " + model + " --plan " + File("plan.json") +
      " --backend cpu" + DirFlags(2) + " --steps 1 --verify -o " + File("run.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = traces::ReadStepReport(File("run.json"));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->verified.value_or(false));
  const nlohmann::json& ranks = report->extra.at("ranks");
  ASSERT_EQ(ranks.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json& dirs = ranks[static_cast<size_t>(rank)].at("offload_dirs");
    ASSERT_EQ(dirs.size(), 1u);
    EXPECT_EQ(dirs[0].get<std::string>(),
              File("ssd" + std::to_string(rank)) + "/rank-" + std::to_string(rank));
    EXPECT_GT(ranks[static_cast<size_t>(rank)].at("ssd_bytes_written").get<int64_t>(), 0);
  }
  ExpectEmpty(2);
}
#endif

}  // namespace
}  // namespace ssdtrain

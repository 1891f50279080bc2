// scripts/gpu-check.sh without a GPU: its summary (scripts/gpu_check_summary.py)
// on real run files of the CPU backend, and its "is there a GPU?" stage on this
// build with the PCI bus, the driver's /proc folder and nvidia-smi pointed at
// stand-ins (SSDTRAIN_PCI_DEVICES, SSDTRAIN_NVIDIA_PROC, SSDTRAIN_NVIDIA_SMI):
// no NVIDIA GPU skips (exit 77); a GPU CUDA cannot start on fails (exit 1)
// naming the driver version.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include "cmake/build_paths.h"
#include "exec/cuda_device.h"
#include "tests/cli_util.h"
#include "tests/micro_gpt.h"
#include "traces/io.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::RunSsdtrain;
using testing::Shell;
using testing::SourceDir;

void WriteFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

class GpuCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ssdtrain-gpu-check-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "offload");
    fs::create_directories(dir_ / "out");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // The run files gpu-check.sh makes on the GPU, made here on the CPU backend
  // from a two-layer model: run-POLICY.json with --verify, time-POLICY.json without.
  void MakeRunFiles() {
    const nlohmann::json model = testing::MicroGptConfig();
    ASSERT_TRUE(traces::WriteJsonFile(model, Path("micro-gpt.json")).ok());
    CliResult t =
        RunSsdtrain("trace --model " + Path("micro-gpt.json") + " -o " + Path("trace.json"));
    ASSERT_EQ(t.exit_code, 0) << t.output;
    for (const std::string policy : {"keep", "offload-ssd"}) {
      const std::string common = "replay --trace " + Path("trace.json") + " --policy " + policy +
                                 " --dir " + Path("offload") + " --backend cpu --steps 1 ";
      CliResult v = RunSsdtrain(common + "--verify -o " + Path("out/run-" + policy + ".json"));
      ASSERT_EQ(v.exit_code, 0) << v.output;
      // The policy names are today's (offload-all would be renamed with a note).
      EXPECT_EQ(v.output.find("note: --policy"), std::string::npos) << v.output;
      CliResult u = RunSsdtrain(common + "-o " + Path("out/time-" + policy + ".json"));
      ASSERT_EQ(u.exit_code, 0) << u.output;
    }
  }
  CliResult Summary() const {
    return Shell("python3 " + SourceDir() + "/scripts/gpu_check_summary.py " + Path("out"));
  }
  // gpu-check.sh's probe stage only, on this build's exec_device_test.
  CliResult Probe(const std::string& env) const {
    return Shell("env SSDTRAIN_GPU_CHECK_PROBE_ONLY=1 SSDTRAIN_GPU_BUILD_DIR=" +
                 std::string(ConfiguredBinaryDir()) + " " + env + " " + SourceDir() +
                 "/scripts/gpu-check.sh " + Path("offload"));
  }
  fs::path dir_;
};

TEST_F(GpuCheck, SummaryReadsTheRunFilesOfTheCpuBackend) {
  MakeRunFiles();
  // The count of checked tensors is under "extra" in a run file; the row
  // shows it beside `verified`.
  Result<nlohmann::json> run = traces::ReadJsonFile(Path("out/run-offload-ssd.json"));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const int64_t checked = (*run)["extra"]["tensors_checked"].get<int64_t>();
  EXPECT_GT(checked, 0);
  const CliResult r = Summary();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("True (" + std::to_string(checked) + ")"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("offload/keep step time"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;
}

TEST_F(GpuCheck, SummaryFailsWhenAReplayDidNotVerify) {
  MakeRunFiles();
  Result<nlohmann::json> run = traces::ReadJsonFile(Path("out/run-keep.json"));
  ASSERT_TRUE(run.ok());
  (*run)["verified"] = false;
  ASSERT_TRUE(traces::WriteJsonFile(*run, Path("out/run-keep.json")).ok());
  const CliResult r = Summary();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("the --verify replay of keep did not verify"), std::string::npos)
      << r.output;
}

TEST_F(GpuCheck, SummaryNamesTheFileAndFieldItLacks) {
  MakeRunFiles();
  Result<nlohmann::json> run = traces::ReadJsonFile(Path("out/run-offload-ssd.json"));
  ASSERT_TRUE(run.ok());
  (*run)["extra"].erase("tensors_checked");
  ASSERT_TRUE(traces::WriteJsonFile(*run, Path("out/run-offload-ssd.json")).ok());
  const CliResult r = Summary();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(
      r.output.find(Path("out/run-offload-ssd.json") + ": no field \"extra.tensors_checked\""),
      std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("Traceback"), std::string::npos) << r.output;
}

TEST_F(GpuCheck, NoNvidiaGpuSkipsWithExit77) {
  std::string why;
  if (exec::CudaAvailable(&why)) GTEST_SKIP() << "a GPU is usable here";
  // A PCI bus with only a non-NVIDIA display controller (Matrox, 0x102b).
  WriteFile(dir_ / "pci/0000:00:02.0/vendor", "0x102b\n");
  WriteFile(dir_ / "pci/0000:00:02.0/class", "0x030000\n");
  const CliResult r =
      Probe("SSDTRAIN_PCI_DEVICES=" + Path("pci") + " SSDTRAIN_NVIDIA_PROC=" + Path("no-proc") +
            " SSDTRAIN_NVIDIA_SMI=" + Path("no-nvidia-smi"));
  EXPECT_EQ(r.exit_code, 77) << r.output;
  EXPECT_NE(r.output.find("SKIPPED: no NVIDIA GPU on this machine"), std::string::npos) << r.output;
}

TEST_F(GpuCheck, GpuPresentButCudaCannotStartFailsNamingTheDriverVersion) {
  std::string why;
  if (exec::CudaAvailable(&why)) GTEST_SKIP() << "a GPU is usable here";
  // An H200 on the bus (vendor 0x10de, 3D controller 0x0302) with a driver
  // older than this CUDA needs, as its /proc file reports it.
  WriteFile(dir_ / "pci/0000:19:00.0/vendor", "0x10de\n");
  WriteFile(dir_ / "pci/0000:19:00.0/class", "0x030200\n");
  WriteFile(dir_ / "proc/version",
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC "
            "2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n");
  const CliResult r =
      Probe("SSDTRAIN_PCI_DEVICES=" + Path("pci") + " SSDTRAIN_NVIDIA_PROC=" + Path("proc") +
            " SSDTRAIN_NVIDIA_SMI=" + Path("no-nvidia-smi"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("an NVIDIA GPU is present, but CUDA cannot start"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("0000:19:00.0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("NVIDIA driver version: 535.104.05"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no usable GPU: " + why), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("this build uses "), std::string::npos) << r.output;

  // The open kernel module words its line differently ("for x86_64" before
  // the version).
  WriteFile(dir_ / "proc/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:16:49 UTC 2024\n");
  const CliResult open =
      Probe("SSDTRAIN_PCI_DEVICES=" + Path("pci") + " SSDTRAIN_NVIDIA_PROC=" + Path("proc") +
            " SSDTRAIN_NVIDIA_SMI=" + Path("no-nvidia-smi"));
  EXPECT_EQ(open.exit_code, 1) << open.output;
  EXPECT_NE(open.output.find("NVIDIA driver version: 550.54.15 (from"), std::string::npos)
      << open.output;

  // Without the /proc file the version comes from nvidia-smi.
  WriteFile(dir_ / "bin/nvidia-smi", "#!/bin/sh\necho 550.54.15\n");
  ::chmod(Path("bin/nvidia-smi").c_str(), 0755);
  const CliResult smi =
      Probe("SSDTRAIN_PCI_DEVICES=" + Path("pci") + " SSDTRAIN_NVIDIA_PROC=" + Path("no-proc") +
            " SSDTRAIN_NVIDIA_SMI=" + Path("bin/nvidia-smi"));
  EXPECT_EQ(smi.exit_code, 1) << smi.output;
  EXPECT_NE(smi.output.find("NVIDIA driver version: 550.54.15 (from " + Path("bin/nvidia-smi")),
            std::string::npos)
      << smi.output;
}

// scripts/gemm_precision_summary.py on Google Benchmark's JSON as the GEMM
// bench writes it: one row per shape with each mode's TFLOP/s from the GPU's
// time and FP8's speed-up; a GEMM that did not run fails it, named.
TEST_F(GpuCheck, GemmSummaryPrintsEachShapeAndFailsOnAGemmThatDidNotRun) {
  const double flops = 2.0 * 8192 * 4096 * 4096;  // 274.9 GFLOP
  nlohmann::json out = {{"context", nlohmann::json::object()},
                        {"benchmarks", nlohmann::json::array()}};
  const std::string shape = "/8192x4096x4096/nemo-gpt3-5b/tp1/cp1/mb4/manual_time";
  // 500 µs: 549.8 TFLOP/s (56% of 989); 300 µs: 916.3 (46% of 1979); 250 µs: 1099.5.
  for (const auto& [mode, us, peak] :
       {std::tuple{"bf16", 500.0, 989.0}, std::tuple{"fp8", 300.0, 1979.0},
        std::tuple{"fp8-fastacc", 250.0, 1979.0}}) {
    out["benchmarks"].push_back({{"name", std::string("BM_Gemm/") + mode + shape},
                                 {"real_time", us},
                                 {"time_unit", "us"},
                                 {"flops", flops},
                                 {"peak_TFLOPs", peak}});
  }
  ASSERT_TRUE(traces::WriteJsonFile(out, Path("gemm.json")).ok());
  const std::string summary =
      "python3 " + SourceDir() + "/scripts/gemm_precision_summary.py " + Path("gemm.json");
  const CliResult r = Shell(summary);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("  8192   4096   4096     550 ( 56%)     916 ( 46%)    1100 ( 56%)      "
                          "1.67  nemo-gpt3-5b/tp1/cp1/mb4"),
            std::string::npos)
      << r.output;

  out["benchmarks"].push_back({{"name", "BM_Gemm/fp8/16x16x16/x/manual_time"},
                               {"error_occurred", true},
                               {"error_message", "cuBLASLt has no algorithm for this shape"}});
  ASSERT_TRUE(traces::WriteJsonFile(out, Path("gemm.json")).ok());
  const CliResult failed = Shell(summary);
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_NE(failed.output.find("error: BM_Gemm/fp8/16x16x16/x/manual_time: cuBLASLt has no "
                               "algorithm for this shape"),
            std::string::npos)
      << failed.output;
}

// The GEMM bench's shapes are the published FP8 runs' traced GEMMs (built
// where the CUDA toolkit is): GPT-3 5B at micro-batch 4 × 2048 tokens has its
// QKV projection, 8192 × 12288 × 4096, in all three modes.
TEST_F(GpuCheck, GemmBenchTimesThePublishedRunsTracedShapes) {
  const std::string bench = std::string(ConfiguredBinaryDir()) + "/bench/gemm_precision_bench";
  if (!fs::exists(bench)) GTEST_SKIP() << "built only with the CUDA toolkit";
  const CliResult r = Shell(bench + " --benchmark_list_tests");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const std::string mode : {"bf16", "fp8", "fp8-fastacc"}) {
    EXPECT_NE(r.output.find("BM_Gemm/" + mode + "/8192x12288x4096/nemo-gpt3-5b/tp1/cp1/mb4/"),
              std::string::npos)
        << r.output;
  }
  // Llama-2 70B at tp 4: 4096 tokens, its fc1 (gate and up) 2 × 28672 / 4 wide.
  // Llama-3 70B at tp 4, cp 2 has 4096 tokens a rank too: the same shapes,
  // each timed once.
  EXPECT_NE(r.output.find("/4096x14336x8192/llama-2-70b/tp4/cp1/mb1/"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("/llama-3-70b/"), std::string::npos) << r.output;
  const CliResult bad =
      Shell("SSDTRAIN_GEMM_RUNS=" + Path("none.json") + " " + bench + " --benchmark_list_tests");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find(Path("none.json") + ": cannot open"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace ssdtrain

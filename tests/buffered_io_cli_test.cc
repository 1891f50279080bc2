// End to end: an offload directory that refuses O_DIRECT (tmpfs before Linux
// 6.6, ramfs) is an error naming it for `ssdtrain bench-io` and `ssdtrain
// replay`, unless --allow-buffered-io is given; then every figure measured
// there says it went through the page cache. No offload file is left either way.
// bench-io also says whether its buffers went to the kernel registered.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "exec/tests/io_test_util.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "tests/cli_util.h"
#include "tests/micro_gpt.h"
#include "traces/io.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using exec::testing::DirectIoRefusingDir;
using exec::testing::ListTree;
using exec::testing::TempDir;
using testing::CliResult;
using testing::RunSsdtrain;

// The refusing directory is a tmpfs or a ramfs: refused as a file system in
// memory before the engine's O_DIRECT probe (exec/offload_dir.h).
constexpr const char* kRefusal = " is on ";
constexpr const char* kOptIn = "pass --allow-buffered-io to run there anyway";

TEST(BufferedIoCli, BenchIoRefusesTheDirectoryUnlessBufferedIoIsAllowed) {
  DirectIoRefusingDir dir;
  if (!dir.ok()) GTEST_SKIP() << dir.why();
  // 1 MiB in 64 KiB requests: 16 requests each way.
  const std::string args =
      "bench-io --dir " + dir.path() + " --size 1M --block-size 64k --queue-depth 4";
  CliResult refused = RunSsdtrain(args);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("offload directory " + dir.path() + kRefusal), std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find(kOptIn), std::string::npos) << refused.output;
  EXPECT_TRUE(ListTree(dir.path()).empty());

  CliResult allowed = RunSsdtrain(args + " --allow-buffered-io");
  ASSERT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("direct=0"), std::string::npos) << allowed.output;
  EXPECT_NE(allowed.output.find("buffered I/O: these figures are the page cache's, not the "
                                "drive's"),
            std::string::npos)
      << allowed.output;
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

// bench-io's header says whether the kernel took the staging slots as fixed
// buffers (fio's --fixedbufs): io_uring registers them unless refused (with a
// warning saying so); the posix backend has none, whatever the engine asked.
TEST(BufferedIoCli, BenchIoSaysWhetherTheKernelTookFixedBuffers) {
  TempDir dir;
  const std::string args =
      "bench-io --dir " + dir.path() + " --size 1M --block-size 64k --queue-depth 4";
  CliResult posix = RunSsdtrain(args + " --io-backend posix");
  ASSERT_EQ(posix.exit_code, 0) << posix.output;
  EXPECT_NE(posix.output.find("backend=posix direct=1 fixed_buffers=0"), std::string::npos)
      << posix.output;
  CliResult chosen = RunSsdtrain(args);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.output;
  if (chosen.output.find("backend=io_uring") != std::string::npos) {
    const bool refused = chosen.output.find("using unregistered buffers") != std::string::npos;
    EXPECT_NE(chosen.output.find(refused ? "fixed_buffers=0" : "fixed_buffers=1"),
              std::string::npos)
        << chosen.output;
  } else {
    EXPECT_NE(chosen.output.find("fixed_buffers=0"), std::string::npos) << chosen.output;
  }
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

TEST(BufferedIoCli, ReplayRefusesTheDirectoryUnlessBufferedIoIsAllowedAndTheRunFileSaysSo) {
  DirectIoRefusingDir dir;
  if (!dir.ok()) GTEST_SKIP() << dir.why();
  TempDir work;
  Result<models::ModelConfig> config =
      models::ModelConfigFromJson(testing::MicroGptConfig(), "micro-gpt");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  Result<traces::Trace> trace = models::BuildTrace(*config, 0);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  const std::string trace_path = work.path() + "/trace.json";
  ASSERT_TRUE(traces::WriteTrace(*trace, trace_path).ok());
  const std::string run_path = work.path() + "/run.json";
  const std::string args = "replay --trace " + trace_path +
                           " --policy offload-ssd --backend cpu --steps 1 --device-memory 0.25 "
                           "--staging-memory 16 --dir " +
                           dir.path() + " -o " + run_path;

  CliResult refused = RunSsdtrain(args);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("offload directory " + dir.path() + kRefusal), std::string::npos)
      << refused.output;
  EXPECT_FALSE(fs::exists(run_path));
  EXPECT_TRUE(ListTree(dir.path()).empty());

  CliResult allowed = RunSsdtrain(args + " --allow-buffered-io");
  ASSERT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("(buffered I/O: through the page cache, not the drive)"),
            std::string::npos)
      << allowed.output;
  Result<nlohmann::json> run = traces::ReadJsonFile(run_path);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  // The run file's executor figures ("extra") carry the engine's direct_io.
  ASSERT_TRUE(run->contains("extra") && (*run)["extra"].contains("direct_io")) << run->dump();
  EXPECT_EQ((*run)["extra"]["direct_io"], false);
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

}  // namespace
}  // namespace ssdtrain

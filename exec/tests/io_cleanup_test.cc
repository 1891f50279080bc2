// Cleanup: SIGTERM removes the offload files (and a scratch directory
// holding the run directory) and still ends the process; an ignored SIGINT
// stays ignored; the process-wide cleanup table's limits; a new engine sweeps
// the files of a killed process and leaves live engines' runs alone.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "exec/detail/cleanup_registry.h"
#include "exec/fault_backend.h"
#include "exec/offload_engine.h"
#include "exec/signal_cleanup.h"
#include "exec/tests/io_fault_util.h"
#include "exec/tests/io_test_util.h"

namespace ssdtrain::exec {
namespace {

using testing::FaultTest;
using testing::kBlock;
using testing::kDepth;
using testing::Key;
using testing::ListTree;
using testing::RandomBytes;
using testing::TempDir;

TEST_F(FaultTest, SigtermRemovesTheOffloadFilesAndStillKillsTheProcess) {
  // A child writes two tensors, then receives SIGTERM with the engine alive: the
  // handler removes the run directory and re-raises, so the child dies by SIGTERM.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    OffloadOptions o;
    o.dirs = {tmp_.path()};
    o.block_size = kBlock;
    o.queue_depth = kDepth;
    o.staging_bytes = 0;
    auto engine = OffloadEngine::Create(o);
    if (!engine.ok()) ::_exit(3);
    const auto data = RandomBytes(3 * kBlock, 9);
    if (!(*engine)->Write(Key(0), data.data(), 3 * kBlock).ok()) ::_exit(4);
    if (!(*engine)->Write(Key(1), data.data(), 1000).ok()) ::_exit(5);
    if (ListTree(tmp_.path()).size() != 3) ::_exit(6);  // run dir + 2 files
    ::raise(SIGTERM);
    ::_exit(7);  // not reached: SIGTERM's default action ends the process
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
}

TEST_F(FaultTest, SigtermAlsoRemovesAScratchDirectoryHoldingTheRunDirectory) {
  // `ssdtrain demo`'s temporary --dir: registered before the engine makes its
  // run directory inside it, so the handler meets the scratch directory first,
  // cannot remove it while the run directory is there, and comes back to it.
  const std::string scratch = tmp_.path() + "/scratch";
  ASSERT_TRUE(std::filesystem::create_directory(scratch));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto guard = ScopedSignalCleanup::Make(scratch);
    if (!guard.ok()) ::_exit(3);
    OffloadOptions o;
    o.dirs = {scratch};
    o.block_size = kBlock;
    o.queue_depth = kDepth;
    o.staging_bytes = 0;
    auto engine = OffloadEngine::Create(o);
    if (!engine.ok()) ::_exit(4);
    const auto data = RandomBytes(kBlock, 10);
    if (!(*engine)->Write(Key(0), data.data(), kBlock).ok()) ::_exit(5);
    if (ListTree(scratch).size() != 2) ::_exit(6);  // run dir + 1 file
    ::raise(SIGTERM);
    ::_exit(7);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_FALSE(std::filesystem::exists(scratch));
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
}

TEST(CleanupSignals, IgnoredSigintStaysIgnoredAndKeepsTheFiles) {
  // A background job of a shell script starts with SIGINT ignored. Before the
  // fix the engine's handler replaced SIG_IGN: Ctrl-C deleted the live files
  // and the process kept running without them. Run in a fresh process (a
  // death test re-executes the binary) so no earlier engine installed anything.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir tmp;
  const std::string dir = tmp.path();
  EXPECT_EXIT(
      {
        ::signal(SIGINT, SIG_IGN);
        OffloadOptions o;
        o.dirs = {dir};
        o.staging_bytes = 0;
        auto engine = OffloadEngine::Create(o);
        if (!engine.ok()) ::_exit(3);
        const auto data = RandomBytes(5000, 29);
        if (!(*engine)->Write(Key(0), data.data(), 5000).ok()) ::_exit(4);
        ::raise(SIGINT);
        auto path = (*engine)->FilePath(0);
        if (!path.ok() || ::access(path->c_str(), F_OK) != 0) ::_exit(7);  // file deleted
        std::vector<char> back(5000);
        if (!(*engine)->Read(Key(0), back.data(), 5000).ok()) ::_exit(5);
        ::_exit(back == data ? 0 : 6);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CleanupRegistry, AFullTableIsAnErrorTheEngineReports) {
  // Every free slot of the process-wide table (64 at most) is taken; an engine
  // then cannot register its run directory for Ctrl-C cleanup: Create fails,
  // says why, and leaves no run directory. Before the fix it went on silently,
  // with files that Ctrl-C would not remove.
  TempDir tmp;
  std::vector<int> held;
  Status full;
  while (full.ok()) {
    Result<int> slot =
        detail::RegisterCleanupDir(tmp.path() + "/fake-" + std::to_string(held.size()));
    if (slot.ok()) {
      held.push_back(*slot);
      ASSERT_LE(held.size(), static_cast<size_t>(detail::kMaxCleanupDirs));
    } else {
      full = slot.status();
    }
  }
  EXPECT_NE(full.message().find("64 run directories are live"), std::string::npos)
      << full.message();
  OffloadOptions o;
  o.dirs = {tmp.path()};
  o.staging_bytes = 0;
  auto refused = OffloadEngine::Create(o);
  for (int slot : held) detail::UnregisterCleanupDir(slot);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("SIGINT/SIGTERM"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(ListTree(tmp.path()).empty());
  // With the slots free again the same engine is made.
  EXPECT_TRUE(OffloadEngine::Create(o).ok());
}

TEST(CleanupRegistry, APathLongerThanPathMaxIsRefusedByName) {
  Result<int> slot = detail::RegisterCleanupDir("/" + std::string(5000, 'a'));
  ASSERT_FALSE(slot.ok());
  EXPECT_EQ(slot.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(slot.status().message().find("shorter path"), std::string::npos);
}

TEST_F(FaultTest, ANewEngineSweepsTheFilesOfAKilledProcess) {
  // A child writes a tensor and is killed with SIGKILL (no handler runs): its
  // run directory and file stay. The next engine in the same directory
  // removes them (and says so once); its own run directory is all that is left.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    OffloadOptions o;
    o.dirs = {tmp_.path()};
    o.staging_bytes = 0;
    auto engine = OffloadEngine::Create(o);
    if (!engine.ok()) ::_exit(3);
    const auto data = RandomBytes(5000, 30);
    if (!(*engine)->Write(Key(0), data.data(), 5000).ok()) ::_exit(4);
    const char byte = 1;
    if (::write(ready[1], &byte, 1) != 1) ::_exit(5);
    ::pause();
    ::_exit(6);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ::close(ready[1]);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_EQ(ListTree(tmp_.path()).size(), 2u);  // the killed run's directory and file
  auto engine = Make(tmp_.path(), FaultOptions{});
  const std::vector<std::string> left = ListTree(tmp_.path());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0], std::filesystem::path(engine->run_dirs()[0]).filename().string());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("ssdtrain-" + std::to_string(child) + "-"), std::string::npos)
      << warnings_[0];
}

TEST_F(FaultTest, SweepingLeavesTheRunsOfLiveEnginesAlone) {
  // Two live engines in one directory: making the second removes nothing.
  auto first = Make(tmp_.path(), FaultOptions{});
  const auto data = RandomBytes(5000, 31);
  ASSERT_TRUE(first->Write(Key(0), data.data(), 5000).ok());
  std::vector<std::string> removed;
  ASSERT_TRUE(SweepDeadRuns(tmp_.path(), &removed).ok());
  EXPECT_TRUE(removed.empty());
  auto second = Make(tmp_.path(), FaultOptions{});
  std::vector<char> back(5000);
  ASSERT_TRUE(first->Read(Key(0), back.data(), 5000).ok());
  EXPECT_EQ(back, data);
  EXPECT_TRUE(warnings_.empty());
}

}  // namespace
}  // namespace ssdtrain::exec

// The fault matrix's signal cells (docs/HARDENING.md), on both real backends,
// io_uring and posix: SIGINT and SIGKILL arriving in each phase (preallocate,
// write, read, remove) of a child process; nothing is left once the next
// engine starts. The request and phase faults: io_fault_matrix_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "exec/detail/test_points.h"
#include "exec/fault_backend.h"
#include "exec/offload_engine.h"
#include "exec/tests/io_fault_util.h"
#include "exec/tests/io_test_util.h"

namespace ssdtrain::exec {
namespace {

using testing::kBlock;
using testing::kDepth;
using testing::Key;
using testing::Kind;
using testing::ListTree;
using testing::MakeEngine;
using testing::RandomBytes;
using testing::TempDir;

// ---- SIGINT and SIGKILL in each phase ----

enum class Phase { kPreallocate, kWrite, kRead, kRemove };

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kPreallocate:
      return "preallocate";
    case Phase::kWrite:
      return "write";
    case Phase::kRead:
      return "read";
    case Phase::kRemove:
      return "remove";
  }
  return "?";
}

// The child's end of the "in the phase now" pipe, and the test point it stops
// at (preallocate, remove): one write, then it waits there for the signal.
int g_ready_fd = -1;
detail::TestPoint g_stop_at = detail::TestPoint::kFallocate;

void SayReady() {
  const char byte = 1;
  if (::write(g_ready_fd, &byte, 1) != 1) ::_exit(20);
}

int StopHere(detail::TestPoint point, int64_t) {
  if (point != g_stop_at) return 0;
  SayReady();
  while (true) ::pause();
}

// The child: an engine on `dir` with `backend`, inside `phase` when it says it
// is ready. Preallocate and remove stop inside the engine call (test points);
// write and read have a request in flight on a 1 MB/s capped link, where
// 128 KiB take 131 ms: the signal comes well before it could complete.
[[noreturn]] void RunChild(const std::string& dir, const std::string& backend, Phase phase) {
  constexpr int64_t kInFlightBytes = 128 * 1024;
  OffloadOptions o;
  o.dirs = {dir};
  o.backend = Kind(backend);
  o.block_size = kBlock;
  o.queue_depth = kDepth;
  o.staging_bytes = 0;
  o.warn = [](std::string_view) {};
  if (phase == Phase::kWrite || phase == Phase::kRead) o.bandwidth_cap_bytes_per_s = 1e6;
  auto engine = OffloadEngine::Create(o);
  if (!engine.ok()) ::_exit(3);
  const auto data = RandomBytes(kInFlightBytes, 43);
  std::vector<char> back(static_cast<size_t>(kInFlightBytes));
  // A tensor on disk in every phase, so that there is something to remove.
  if (!(*engine)->Write(Key(0), data.data(), 4096).ok()) ::_exit(4);
  switch (phase) {
    case Phase::kPreallocate:
    case Phase::kRemove:
      g_stop_at =
          phase == Phase::kPreallocate ? detail::TestPoint::kFallocate : detail::TestPoint::kUnlink;
      detail::SetTestHook(StopHere);
      if (phase == Phase::kPreallocate) {
        (void)(*engine)->Preallocate("plan.bin", 0, 1 << 20);  // stops inside
      } else {
        (void)(*engine)->Remove(0);  // stops inside
      }
      ::_exit(5);
    case Phase::kWrite: {
      auto t = (*engine)->WriteAsync(Key(1), data.data(), kInFlightBytes);
      if (!t.ok()) ::_exit(6);
      break;
    }
    case Phase::kRead: {
      if (!(*engine)->Write(Key(1), data.data(), kInFlightBytes).ok()) ::_exit(7);
      auto t = (*engine)->ReadAsync(Key(1), back.data(), kInFlightBytes);
      if (!t.ok()) ::_exit(8);
      break;
    }
  }
  SayReady();
  while (true) ::pause();
}

using SignalParam = std::tuple<int, Phase, std::string>;

class SignalInPhase : public ::testing::TestWithParam<SignalParam> {};

// SIGINT: the handler removes the run directory and re-raises; nothing is
// left. SIGKILL: no handler runs, the run directory stays, and the next engine
// in the directory removes it (and says so).
TEST_P(SignalInPhase, LeavesNothingOnceTheNextEngineStarts) {
  const auto& [sig, phase, backend] = GetParam();
  if (!MakeIoBackend(Kind(backend), kDepth, [](std::string_view) {}).ok()) {
    GTEST_SKIP() << backend << " unavailable here";
  }
  TempDir tmp;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    g_ready_fd = ready[1];
    RunChild(tmp.path(), backend, phase);
  }
  ::close(ready[1]);
  char byte = 0;
  const ssize_t got = ::read(ready[0], &byte, 1);
  ::close(ready[0]);
  if (got != 1) {
    int status = 0;
    ::waitpid(child, &status, 0);
    FAIL() << "the child never reached the phase; exit status " << WEXITSTATUS(status);
  }
  ASSERT_FALSE(ListTree(tmp.path()).empty());  // the child's run directory and files
  ASSERT_EQ(::kill(child, sig), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), sig);
  if (sig == SIGINT) {
    EXPECT_TRUE(ListTree(tmp.path()).empty());
    return;
  }
  EXPECT_GE(ListTree(tmp.path()).size(), 2u);  // SIGKILL: its run directory and file(s) stay
  std::vector<std::string> warnings;
  std::string skip;
  auto next = MakeEngine(backend, tmp.path(), {}, nullptr, &warnings, &skip);
  ASSERT_NE(next, nullptr) << skip;
  const std::vector<std::string> left = ListTree(tmp.path());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0], std::filesystem::path(next->run_dirs()[0]).filename().string());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("ssdtrain-" + std::to_string(child) + "-"), std::string::npos)
      << warnings[0];
}

std::vector<SignalParam> SignalCases() {
  std::vector<SignalParam> out;
  for (int sig : {SIGINT, SIGKILL}) {
    for (Phase phase : {Phase::kPreallocate, Phase::kWrite, Phase::kRead, Phase::kRemove}) {
      for (const char* backend : {"io_uring", "posix"}) out.emplace_back(sig, phase, backend);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, SignalInPhase, ::testing::ValuesIn(SignalCases()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) == SIGINT ? "sigint"
                                                                                : "sigkill") +
                                  "_" + PhaseName(std::get<1>(info.param)) + "_" +
                                  std::get<2>(info.param);
                         });

}  // namespace
}  // namespace ssdtrain::exec

// The cells of the fault matrix (docs/HARDENING.md) that need both real
// backends, io_uring and posix: every request fault in the write and read
// phases, EIO and ENOSPC while preallocating, EIO while removing, and SIGINT
// and SIGKILL arriving in each phase. Each case checks what the caller sees and
// what is left on disk.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "exec/detail/test_points.h"
#include "exec/fault_backend.h"
#include "exec/offload_engine.h"
#include "exec/tests/io_test_util.h"

namespace ssdtrain::exec {
namespace {

using testing::ListTree;
using testing::RandomBytes;
using testing::SmallTmpfs;
using testing::TempDir;

constexpr int64_t kBlock = 64 * 1024;
constexpr int kDepth = 4;
// 3 blocks and a 100-byte tail: 4 requests; on disk 3 * 65536 + 4096 = 200704 bytes.
constexpr int64_t kTensorBytes = 3 * kBlock + 100;
constexpr int64_t kTensorDiskBytes = 3 * kBlock + 4096;

TensorKey Key(traces::TensorId t) {
  TensorKey k;
  k.tensor = t;
  return k;
}

BackendKind Kind(const std::string& name) { return *ParseBackendKind(name); }

// An engine on `dir` over `backend` ("io_uring" or "posix"), optionally wrapped
// in a fault backend with `rules`; nullptr (and `skip` says why) where the
// backend cannot be made here.
std::unique_ptr<OffloadEngine> MakeEngine(const std::string& backend, const std::string& dir,
                                          std::vector<FaultRule> rules, FaultBackend** fault,
                                          std::vector<std::string>* warnings, std::string* skip,
                                          bool allow_buffered_io = false) {
  auto inner = MakeIoBackend(Kind(backend), kDepth, [](std::string_view) {});
  if (!inner.ok()) {
    *skip = inner.status().message();
    return nullptr;
  }
  FaultOptions f;
  f.rules = std::move(rules);
  auto wrapped = std::make_unique<FaultBackend>(std::move(*inner), std::move(f));
  if (fault != nullptr) *fault = wrapped.get();
  OffloadOptions o;
  o.dirs = {dir};
  o.block_size = kBlock;
  o.queue_depth = kDepth;
  o.staging_bytes = 0;
  o.allow_buffered_io = allow_buffered_io;
  o.warn = [warnings](std::string_view w) { warnings->emplace_back(w); };
  auto e = OffloadEngine::Create(std::move(o), std::move(wrapped));
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return nullptr;
  EXPECT_EQ((*e)->BackendName(), "fault(" + backend + ")");
  return std::move(*e);
}

// Only the engine's (empty) run directory may remain while it lives.
void ExpectOnlyTheRunDirectory(const std::string& dir) {
  for (const std::string& entry : ListTree(dir)) {
    EXPECT_EQ(entry.find('/'), std::string::npos) << "left behind: " << entry;
  }
}

// ---- Request faults in the write and read phases ----

using RequestFaultParam = std::tuple<std::string, FaultKind, IoOp>;

std::string KindName(FaultKind k) {
  switch (k) {
    case FaultKind::kEio:
      return "eio";
    case FaultKind::kEnospc:
      return "enospc";
    case FaultKind::kShort:
      return "short";
    case FaultKind::kEagain:
      return "eagain";
    default:
      return "other";
  }
}

class RequestFaults : public ::testing::TestWithParam<RequestFaultParam> {
 protected:
  TempDir tmp_;
  std::vector<std::string> warnings_;
};

// The fault hits the second request of the phase's direction (nth = 1), twice
// in a row for the transparent kinds (short, EAGAIN): the first request has
// already landed, so a failure must also undo a partly written tensor.
TEST_P(RequestFaults, FailLoudlyWithNothingLeftOrContinueTransparently) {
  const auto& [backend, kind, op] = GetParam();
  const int64_t count = kind == FaultKind::kShort || kind == FaultKind::kEagain ? 2 : 1;
  FaultRule rule;
  rule.op = op;
  rule.nth = 1;
  rule.kind = kind;
  rule.count = count;
  FaultBackend* fault = nullptr;
  std::string skip;
  auto engine = MakeEngine(backend, tmp_.path(), {rule}, &fault, &warnings_, &skip);
  if (engine == nullptr && !skip.empty()) GTEST_SKIP() << skip;
  ASSERT_NE(engine, nullptr);
  const auto data = RandomBytes(kTensorBytes, 40);
  std::vector<char> back(static_cast<size_t>(kTensorBytes));
  Status s = engine->Write(Key(0), data.data(), kTensorBytes);
  if (op == IoOp::kRead) {
    ASSERT_TRUE(s.ok()) << s.ToString();  // the rule only hits reads
    s = engine->Read(Key(0), back.data(), kTensorBytes);
  }
  const std::string verb = op == IoOp::kWrite ? "writing" : "reading";
  switch (kind) {
    case FaultKind::kEio: {
      EXPECT_EQ(fault->injected(), 1);
      EXPECT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
      EXPECT_NE(s.message().find(verb + " tensor 0 "), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(tmp_.path() + "/ssdtrain-"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("(errno 5)"), std::string::npos) << s.message();
      ExpectOnlyTheRunDirectory(tmp_.path());
      // Sticky: later calls say the engine stopped.
      Status later = engine->Write(Key(1), data.data(), 100);
      EXPECT_NE(later.message().find("stopped after an earlier failure"), std::string::npos)
          << later.ToString();
      break;
    }
    case FaultKind::kEnospc: {
      EXPECT_EQ(fault->injected(), 1);
      EXPECT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
      EXPECT_NE(s.message().find("disk full: " + std::to_string(kTensorDiskBytes) +
                                 " bytes needed in " + tmp_.path()),
                std::string::npos)
          << s.message();
      ExpectOnlyTheRunDirectory(tmp_.path());
      break;
    }
    case FaultKind::kShort:
    case FaultKind::kEagain: {
      ASSERT_TRUE(s.ok()) << s.ToString();
      if (op == IoOp::kWrite) {
        ASSERT_TRUE(engine->Read(Key(0), back.data(), kTensorBytes).ok());
      }
      EXPECT_EQ(back, data);
      EXPECT_EQ(fault->injected(), count);
      const OffloadStats stats = engine->Stats();
      EXPECT_EQ(kind == FaultKind::kShort ? stats.short_continuations : stats.eagain_resubmits,
                count);
      // The tensor's file is there until it is removed.
      auto path = engine->FilePath(0);
      ASSERT_TRUE(path.ok());
      EXPECT_EQ(::access(path->c_str(), F_OK), 0);
      ASSERT_TRUE(engine->Remove(0).ok());
      ExpectOnlyTheRunDirectory(tmp_.path());
      break;
    }
    default:
      FAIL() << "no expectation for this fault";
  }
  engine.reset();
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
}

// ENOSPC on a read is left out: a read allocates nothing, and the kernel does
// not answer it with ENOSPC (docs/HARDENING.md says n/a).
std::vector<RequestFaultParam> RequestFaultCases() {
  std::vector<RequestFaultParam> out;
  for (const char* backend : {"io_uring", "posix"}) {
    for (FaultKind kind :
         {FaultKind::kEio, FaultKind::kEnospc, FaultKind::kShort, FaultKind::kEagain}) {
      for (IoOp op : {IoOp::kWrite, IoOp::kRead}) {
        if (kind == FaultKind::kEnospc && op == IoOp::kRead) continue;
        out.emplace_back(backend, kind, op);
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, RequestFaults, ::testing::ValuesIn(RequestFaultCases()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  KindName(std::get<1>(info.param)) + "_" +
                                  (std::get<2>(info.param) == IoOp::kWrite ? "write" : "read");
                         });

// ---- Preallocate and remove ----

class PhaseFaults : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override { detail::SetTestHook(nullptr); }
  TempDir tmp_;
  std::vector<std::string> warnings_;
};

TEST_P(PhaseFaults, RealEnospcWhilePreallocatingSaysDiskFullAndLeavesNothing) {
  // 4 MiB cannot be reserved on a 1 MiB tmpfs: fallocate fails with ENOSPC.
  SmallTmpfs fs(1 << 20);
  if (!fs.ok()) GTEST_SKIP() << fs.why();
  std::string skip;
  // tmpfs refuses O_DIRECT before Linux 6.6; this test is about the full disk.
  auto engine = MakeEngine(GetParam(), fs.path(), {}, nullptr, &warnings_, &skip,
                           /*allow_buffered_io=*/true);
  if (engine == nullptr && !skip.empty()) GTEST_SKIP() << skip;
  ASSERT_NE(engine, nullptr);
  const auto data = RandomBytes(5000, 41);
  ASSERT_TRUE(engine->Write(Key(0), data.data(), 5000).ok());
  Status s = engine->Preallocate("plan.bin", 0, int64_t{4} << 20);
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("disk full: 4194304 bytes needed in " + fs.path()), std::string::npos)
      << s.message();
  // The failure is sticky and removed every file, the tensor written before too.
  ExpectOnlyTheRunDirectory(fs.path());
  engine.reset();
  EXPECT_TRUE(ListTree(fs.path()).empty());
}

int FallocateEio(detail::TestPoint point, int64_t) {
  return point == detail::TestPoint::kFallocate ? EIO : 0;
}

TEST_P(PhaseFaults, EioWhilePreallocatingNamesTheFileAndLeavesNothing) {
  std::string skip;
  auto engine = MakeEngine(GetParam(), tmp_.path(), {}, nullptr, &warnings_, &skip);
  if (engine == nullptr && !skip.empty()) GTEST_SKIP() << skip;
  ASSERT_NE(engine, nullptr);
  detail::SetTestHook(FallocateEio);
  Status s = engine->Preallocate("plan.bin", 0, 1 << 20);
  detail::SetTestHook(nullptr);
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("preallocating " + engine->run_dirs()[0] + "/plan.bin"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("(errno 5)"), std::string::npos) << s.message();
  ExpectOnlyTheRunDirectory(tmp_.path());
  engine.reset();
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
}

int UnlinkEio(detail::TestPoint point, int64_t) {
  return point == detail::TestPoint::kUnlink ? EIO : 0;
}

TEST_P(PhaseFaults, EioWhileRemovingIsReportedAndTheFileGoesAtTheEngineEnd) {
  // Remove(0)'s unlink fails: the caller hears of it (naming the file), the
  // tensor is forgotten, the engine goes on. RemoveAll's does too. What the
  // failed unlinks left goes with the run directory when the engine ends.
  std::string skip;
  auto engine = MakeEngine(GetParam(), tmp_.path(), {}, nullptr, &warnings_, &skip);
  if (engine == nullptr && !skip.empty()) GTEST_SKIP() << skip;
  ASSERT_NE(engine, nullptr);
  const auto data = RandomBytes(5000, 42);
  ASSERT_TRUE(engine->Write(Key(0), data.data(), 5000).ok());
  const std::string path = *engine->FilePath(0);
  detail::SetTestHook(UnlinkEio);
  Status s = engine->Remove(0);
  detail::SetTestHook(nullptr);
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("removing tensor 0: cannot unlink " + path), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("(errno 5)"), std::string::npos) << s.message();
  EXPECT_EQ(engine->FilePath(0).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(::access(path.c_str(), F_OK), 0);  // still on disk

  ASSERT_TRUE(engine->Write(Key(1), data.data(), 5000).ok());  // not sticky
  const std::string path1 = *engine->FilePath(1);
  detail::SetTestHook(UnlinkEio);
  Status all = engine->RemoveAll();
  detail::SetTestHook(nullptr);
  EXPECT_EQ(all.code(), Status::Code::kIoError) << all.ToString();
  EXPECT_NE(all.message().find("RemoveAll: cannot unlink " + path1), std::string::npos)
      << all.message();
  EXPECT_EQ(::access(path1.c_str(), F_OK), 0);
  engine.reset();
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
  EXPECT_TRUE(warnings_.empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, PhaseFaults, ::testing::Values("io_uring", "posix"),
                         [](const auto& info) { return info.param; });

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

// Faults: EIO, ENOSPC, short transfers and -EAGAIN through the fault backend;
// a real ENOSPC on a 1 MiB tmpfs; O_DIRECT refused (an error, or buffered I/O
// when allowed); unusable directories. After every failure no offload file is left.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec/detail/cleanup_registry.h"
#include "exec/detail/staging_pool.h"
#include "exec/detail/test_points.h"
#include "exec/fault_backend.h"
#include "exec/offload_engine.h"
#include "exec/signal_cleanup.h"
#include "exec/tests/io_test_util.h"
#include "exec/uring_backend.h"

namespace ssdtrain::exec {
namespace {

using testing::ListTree;
using testing::RandomBytes;
using testing::SmallTmpfs;
using testing::TempDir;

TensorKey Key(traces::TensorId t) {
  TensorKey k;
  k.tensor = t;
  return k;
}

FaultOptions Rules(std::vector<FaultRule> rules) {
  FaultOptions f;
  f.rules = std::move(rules);
  return f;
}

FaultRule Rule(IoOp op, int64_t nth, FaultKind kind, int64_t count = 1) {
  FaultRule r;
  r.op = op;
  r.nth = nth;
  r.kind = kind;
  r.count = count;
  return r;
}

constexpr int64_t kBlock = 64 * 1024;
constexpr int kDepth = 4;

class FaultTest : public ::testing::Test {
 protected:
  // An engine on `dir` over a fault backend wrapping io_uring (or posix where
  // io_uring is refused). `fault` points at the backend for its counters.
  std::unique_ptr<OffloadEngine> Make(const std::string& dir, FaultOptions faults,
                                      bool allow_buffered_io = false) {
    auto inner = MakeIoBackend(BackendKind::kAuto, kDepth, [](std::string_view) {});
    EXPECT_TRUE(inner.ok());
    auto backend = std::make_unique<FaultBackend>(std::move(*inner), std::move(faults));
    fault_ = backend.get();
    OffloadOptions o;
    o.dirs = {dir};
    o.block_size = kBlock;
    o.queue_depth = kDepth;
    o.staging_bytes = 1 << 20;
    o.allow_buffered_io = allow_buffered_io;
    o.warn = [this](std::string_view w) { warnings_.emplace_back(w); };
    auto e = OffloadEngine::Create(std::move(o), std::move(backend));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(*e) : nullptr;
  }

  // Only the (empty) run directory may remain while the engine lives.
  void ExpectNoOffloadFiles(const std::string& dir) {
    for (const std::string& entry : ListTree(dir)) {
      EXPECT_EQ(entry.find('/'), std::string::npos) << "left behind: " << entry;
    }
  }

  TempDir tmp_;
  FaultBackend* fault_ = nullptr;
  std::vector<std::string> warnings_;
};

TEST_F(FaultTest, EioOnWriteFailsLoudlyAndLeavesNoFile) {
  // Three tensors of 3 blocks; the 5th write request (tensor 1's 2nd block) fails.
  auto engine = Make(tmp_.path(), Rules({Rule(IoOp::kWrite, 4, FaultKind::kEio)}));
  const auto data = RandomBytes(3 * kBlock, 1);
  Status last;
  for (int t = 0; t < 3 && last.ok(); ++t) last = engine->Write(Key(t), data.data(), 3 * kBlock);
  EXPECT_EQ(fault_->injected(), 1);
  EXPECT_EQ(last.code(), Status::Code::kIoError);
  EXPECT_NE(last.message().find("tensor 1"), std::string::npos) << last.message();
  EXPECT_NE(last.message().find("errno 5"), std::string::npos) << last.message();
  ExpectNoOffloadFiles(tmp_.path());
  // The failure is sticky: later calls say so.
  EXPECT_FALSE(engine->Write(Key(9), data.data(), 10).ok());
  engine.reset();
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
}

TEST_F(FaultTest, EioOnReadNeverHandsBackTheBuffer) {
  auto engine = Make(tmp_.path(), Rules({Rule(IoOp::kRead, 1, FaultKind::kEio)}));
  const auto data = RandomBytes(2 * kBlock, 2);
  ASSERT_TRUE(engine->Write(Key(0), data.data(), 2 * kBlock).ok());
  std::vector<char> back(2 * kBlock, 0);
  Status s = engine->Read(Key(0), back.data(), 2 * kBlock);
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("reading tensor 0"), std::string::npos) << s.message();
  ExpectNoOffloadFiles(tmp_.path());
}

TEST_F(FaultTest, ShortWritesAndReadsContinueTransparently) {
  // The first four write and the first four read requests are cut to half
  // (aligned); the engine continues each from where it stopped. How many cuts
  // land depends on the order completions come back in (a continuation of a
  // 4 KiB tail cannot be halved again), so the test counts 1..8 cuts and checks
  // that every one of them was continued.
  auto engine = Make(tmp_.path(), Rules({Rule(IoOp::kWrite, 0, FaultKind::kShort, 4),
                                         Rule(IoOp::kRead, 0, FaultKind::kShort, 4)}));
  const int64_t n = 2 * kBlock + 5000;
  const auto data = RandomBytes(n, 3);
  ASSERT_TRUE(engine->Write(Key(0), data.data(), n).ok());
  std::vector<char> back(static_cast<size_t>(n));
  ASSERT_TRUE(engine->Read(Key(0), back.data(), n).ok());
  EXPECT_EQ(back, data);
  EXPECT_GE(fault_->injected(), 1);
  EXPECT_LE(fault_->injected(), 8);
  EXPECT_EQ(engine->Stats().short_continuations, fault_->injected());
}

TEST_F(FaultTest, EagainIsResubmittedTransparently) {
  auto engine = Make(tmp_.path(), Rules({Rule(IoOp::kWrite, 1, FaultKind::kEagain, 3),
                                         Rule(IoOp::kRead, 0, FaultKind::kEagain, 2)}));
  const int64_t n = 3 * kBlock;
  const auto data = RandomBytes(n, 4);
  ASSERT_TRUE(engine->Write(Key(0), data.data(), n).ok());
  std::vector<char> back(static_cast<size_t>(n));
  ASSERT_TRUE(engine->Read(Key(0), back.data(), n).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(fault_->injected(), 5);
  EXPECT_EQ(engine->Stats().eagain_resubmits, 5);
}

TEST_F(FaultTest, InjectedEnospcSaysDiskFullWithBytesAndDirectory) {
  auto engine = Make(tmp_.path(), Rules({Rule(IoOp::kWrite, 0, FaultKind::kEnospc)}));
  const auto data = RandomBytes(10000, 5);
  Status s = engine->Write(Key(0), data.data(), 10000);
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted);
  // 10000 bytes pad to 12288 on disk.
  EXPECT_NE(s.message().find("disk full: 12288 bytes needed in " + tmp_.path()), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("point --dir elsewhere"), std::string::npos);
  ExpectNoOffloadFiles(tmp_.path());
}

TEST_F(FaultTest, RealEnospcOnASmallTmpfs) {
  SmallTmpfs fs(1 << 20);
  if (!fs.ok()) GTEST_SKIP() << fs.why();
  // tmpfs refuses O_DIRECT before Linux 6.6; this test is about the full disk.
  auto engine = Make(fs.path(), FaultOptions{}, /*allow_buffered_io=*/true);
  // 4 tensors of 400 KiB cannot fit in 1 MiB: the third fails.
  const auto data = RandomBytes(400 * 1024, 6);
  Status s;
  for (int t = 0; t < 4 && s.ok(); ++t) s = engine->Write(Key(t), data.data(), 400 * 1024);
  EXPECT_EQ(s.code(), Status::Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("disk full"), std::string::npos) << s.message();
  ExpectNoOffloadFiles(fs.path());
  engine.reset();
  EXPECT_TRUE(ListTree(fs.path()).empty());
}

TEST_F(FaultTest, RefusedODirectIsAnErrorNamingTheDirectory) {
  // Without the opt-in, a directory that refuses O_DIRECT fails engine creation
  // (figures measured there would be the page cache's), says which directory
  // and how to opt in, and leaves nothing behind. Before the fix the engine
  // warned and went on with buffered I/O.
  FaultOptions f;
  f.refuse_direct = true;
  OffloadOptions o;
  o.dirs = {tmp_.path()};
  o.staging_bytes = 0;
  o.warn = [this](std::string_view w) { warnings_.emplace_back(w); };
  auto inner = MakeIoBackend(BackendKind::kAuto, kDefaultQueueDepth, o.warn);
  ASSERT_TRUE(inner.ok()) << inner.status().ToString();
  auto e = OffloadEngine::Create(o, std::make_unique<FaultBackend>(std::move(*inner), f));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Status::Code::kUnavailable);
  EXPECT_EQ(
      e.status().message().rfind(tmp_.path() + ": the filesystem refused O_DIRECT (EINVAL", 0), 0u)
      << e.status().message();
  EXPECT_NE(e.status().message().find("pass --allow-buffered-io to measure through the page cache"),
            std::string::npos)
      << e.status().message();
  EXPECT_TRUE(warnings_.empty());
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
}

TEST_F(FaultTest, RefusedODirectWithTheOptInIsBufferedWithOneWarning) {
  FaultOptions f;
  f.refuse_direct = true;
  auto engine = Make(tmp_.path(), f, /*allow_buffered_io=*/true);
  EXPECT_FALSE(engine->direct_io());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find(tmp_.path() + ": the filesystem refused O_DIRECT"), std::string::npos)
      << warnings_[0];
  EXPECT_NE(warnings_[0].find("the page cache, not the drive"), std::string::npos) << warnings_[0];
  const auto data = RandomBytes(kBlock + 77, 7);
  for (int t = 0; t < 3; ++t) ASSERT_TRUE(engine->Write(Key(t), data.data(), kBlock + 77).ok());
  std::vector<char> back(kBlock + 77);
  ASSERT_TRUE(engine->Read(Key(2), back.data(), kBlock + 77).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(warnings_.size(), 1u);  // said once, not per file
}

// A real filesystem's refusal, on each real backend: an error without the
// opt-in; with it, bytes written and read back through the page cache.
class RealODirectRefusal : public ::testing::TestWithParam<std::string> {};

TEST_P(RealODirectRefusal, IsAnErrorUnlessBufferedIoIsAllowed) {
  testing::DirectIoRefusingDir dir;
  if (!dir.ok()) GTEST_SKIP() << dir.why();
  std::vector<std::string> warnings;
  OffloadOptions o;
  o.dirs = {dir.path()};
  o.block_size = kBlock;
  o.queue_depth = kDepth;
  o.staging_bytes = 0;
  o.warn = [&](std::string_view w) { warnings.emplace_back(w); };
  auto backend = MakeIoBackend(*ParseBackendKind(GetParam()), kDepth, o.warn);
  if (!backend.ok()) GTEST_SKIP() << backend.status().message();
  auto refused = OffloadEngine::Create(o, std::move(*backend));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(refused.status().message().find(dir.path() + ": the filesystem refused O_DIRECT"),
            std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(ListTree(dir.path()).empty());

  o.allow_buffered_io = true;
  backend = MakeIoBackend(*ParseBackendKind(GetParam()), kDepth, o.warn);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  auto engine = OffloadEngine::Create(o, std::move(*backend));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_FALSE((*engine)->direct_io());
  const auto data = RandomBytes(2 * kBlock + 100, 8);
  ASSERT_TRUE((*engine)->Write(Key(0), data.data(), 2 * kBlock + 100).ok());
  std::vector<char> back(data.size());
  ASSERT_TRUE((*engine)->Read(Key(0), back.data(), 2 * kBlock + 100).ok());
  EXPECT_EQ(back, data);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("--allow-buffered-io"), std::string::npos) << warnings[0];
  engine->reset();
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, RealODirectRefusal, ::testing::Values("io_uring", "posix"),
                         [](const auto& info) { return info.param; });

TEST_F(FaultTest, MissingDirectoryIsRefusedWithAHint) {
  OffloadOptions o;
  o.dirs = {tmp_.path() + "/does-not-exist"};
  auto e = OffloadEngine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("does-not-exist"), std::string::npos);
  EXPECT_NE(e.status().message().find("point --dir elsewhere"), std::string::npos);
}

TEST_F(FaultTest, ReadOnlyDirectoryIsRefusedAsUnwritable) {
  // Root ignores permission bits, so use a read-only mount where possible.
  SmallTmpfs probe(1 << 20);
  if (!probe.ok()) GTEST_SKIP() << probe.why();
  ASSERT_EQ(std::system(("mount -o remount,ro " + probe.path()).c_str()), 0);
  OffloadOptions o;
  o.dirs = {probe.path()};
  auto e = OffloadEngine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("not writable"), std::string::npos) << e.status().message();
  EXPECT_TRUE(ListTree(probe.path()).empty());
}

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

// ---- Issue #17: races and unwinds ----

// The hook of RemoveAllDuringAWritesFallocateWaitsForThatWrite: while the
// write has the engine's lock dropped around fallocate, another thread calls
// RemoveAll; the write then goes on after 100 ms, enough for RemoveAll to
// have finished had it not waited for the write.
std::atomic<OffloadEngine*> g_engine{nullptr};
std::atomic<bool> g_remover_started{false};
std::thread g_remover;
Status g_remove_status;

int RemoveAllMeanwhile(detail::TestPoint point, int64_t) {
  if (point != detail::TestPoint::kWriteUnlocked || g_remover_started.exchange(true)) return 0;
  g_remover = std::thread([] { g_remove_status = g_engine.load()->RemoveAll(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

TEST_F(FaultTest, RemoveAllDuringAWritesFallocateWaitsForThatWrite) {
  // Before the fix RemoveAll saw an empty queue, freed the tensor and closed
  // the file under the write, which then wrote through a closed fd (ASan: a
  // heap-use-after-free). Now RemoveAll waits: the write lands, then every
  // file goes.
  auto engine = Make(tmp_.path(), FaultOptions{});
  g_engine = engine.get();
  g_remover_started = false;
  const auto data = RandomBytes(2 * kBlock, 21);
  detail::SetTestHook(RemoveAllMeanwhile);
  auto ticket = engine->WriteAsync(Key(0), data.data(), 2 * kBlock);
  detail::SetTestHook(nullptr);
  ASSERT_TRUE(ticket.ok()) << ticket.status().ToString();
  EXPECT_TRUE(engine->Wait(*ticket).ok());
  ASSERT_TRUE(g_remover_started);
  g_remover.join();
  EXPECT_TRUE(g_remove_status.ok()) << g_remove_status.ToString();
  EXPECT_EQ(engine->FilePath(0).status().code(), Status::Code::kNotFound);
  ExpectNoOffloadFiles(tmp_.path());
  // The engine still works.
  ASSERT_TRUE(engine->Write(Key(1), data.data(), 1000).ok());
  std::vector<char> back(1000);
  ASSERT_TRUE(engine->Read(Key(1), back.data(), 1000).ok());
  EXPECT_TRUE(std::equal(back.begin(), back.end(), data.begin()));
}

TEST_F(FaultTest, NegativeTensorIdIsRefused) {
  // With two directories, -3 % 2 = -1 indexed dirs[-1] before the fix.
  OffloadOptions o;
  o.dirs = {tmp_.Sub("a"), tmp_.Sub("b")};
  o.block_size = kBlock;
  o.queue_depth = kDepth;
  o.staging_bytes = 0;
  auto engine = OffloadEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const auto data = RandomBytes(5000, 22);
  Status s = (*engine)->Write(Key(-3), data.data(), 5000);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("tensor id -3 is negative"), std::string::npos) << s.message();
  ExpectNoOffloadFiles(o.dirs[0]);
  ExpectNoOffloadFiles(o.dirs[1]);
}

TEST_F(FaultTest, SubmitFailureFailsOnlyWhatWasNotQueuedAndNothingTwice) {
  // A 3-block write is one batch: request 0 is answered -EAGAIN (queued as a
  // synthetic completion), the submit is refused from request 1 on. Requests
  // 1 and 2 fail at once; request 0 still comes back (and is then cancelled),
  // so every queued request is reaped exactly once: outstanding() ends at 0.
  // Before the fix the fault backend queued request 0's completion although
  // the engine unwound the whole batch; it was later reaped for a freed slot.
  auto engine = Make(tmp_.path(), Rules({Rule(IoOp::kWrite, 0, FaultKind::kEagain),
                                         Rule(IoOp::kWrite, 1, FaultKind::kSubmitError)}));
  const auto data = RandomBytes(3 * kBlock, 23);
  Status s = engine->Write(Key(0), data.data(), 3 * kBlock);
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("submitting I/O"), std::string::npos) << s.message();
  EXPECT_EQ(fault_->outstanding(), 0);
  ExpectNoOffloadFiles(tmp_.path());
  engine.reset();
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
}

TEST_F(FaultTest, FailedWaitForCompletionsKeepsReapingUntilEveryRequestIsBack) {
  // The first read request arms a failing Reap: waiting fails while the read's
  // three requests are in flight. The engine must not release them (the
  // kernel still writes into their memory): the read returns only once every
  // queued request has been reaped (outstanding() == 0 when Read returns).
  // Before the fix it marked them done at once with the error and the caller
  // got its buffer back while the reads still targeted it. The requests
  // themselves succeed, so the read may return OK with the right bytes; the
  // failure is sticky for every later call either way.
  auto engine = Make(tmp_.path(), Rules({Rule(IoOp::kRead, 0, FaultKind::kReapError)}));
  const auto data = RandomBytes(3 * kBlock, 24);
  ASSERT_TRUE(engine->Write(Key(0), data.data(), 3 * kBlock).ok());
  std::vector<char> back(3 * kBlock);
  Status s = engine->Read(Key(0), back.data(), 3 * kBlock);
  EXPECT_EQ(fault_->outstanding(), 0);
  EXPECT_EQ(fault_->injected(), 1);
  if (s.ok()) {
    EXPECT_EQ(back, data);
  }
  Status later = engine->Write(Key(1), data.data(), 1000);
  EXPECT_EQ(later.code(), Status::Code::kIoError) << later.ToString();
  EXPECT_NE(later.message().find("waiting for I/O completions"), std::string::npos)
      << later.message();
  // The purge runs on the I/O thread once the last request is back, which may
  // be just after the sticky error reached this thread (seen: t0.bin still
  // there in 1 of 9 runs); the engine's end waits for it.
  engine.reset();
  ExpectNoOffloadFiles(tmp_.path());
}

TEST_F(FaultTest, RepeatedEagainBacksOffExponentially) {
  // One request (one block) answered -EAGAIN five times in a row: resubmitted
  // at once, then after 50, 100, 200 and 400 us: 750 us of backoff in all.
  auto engine = Make(tmp_.path(), Rules({Rule(IoOp::kWrite, 0, FaultKind::kEagain, 5)}));
  const auto data = RandomBytes(kBlock, 25);
  ASSERT_TRUE(engine->Write(Key(0), data.data(), kBlock).ok());
  EXPECT_EQ(fault_->injected(), 5);
  EXPECT_EQ(engine->Stats().eagain_resubmits, 5);
  EXPECT_EQ(engine->Stats().eagain_backoff_ns, 750'000);
  std::vector<char> back(kBlock);
  ASSERT_TRUE(engine->Read(Key(0), back.data(), kBlock).ok());
  EXPECT_EQ(back, data);
}

TEST_F(FaultTest, ShortODirectTransferInsideABlockIsAClearError) {
  // The first write request reports 32768 - 512 = 32256 of 65536 bytes: an
  // O_DIRECT continuation at byte 32256 is not 4096-aligned, which the kernel
  // would refuse with a bare EINVAL. The engine names the file and the offset.
  auto engine = Make(tmp_.path(), Rules({Rule(IoOp::kWrite, 0, FaultKind::kShortUnaligned)}));
  if (!engine->direct_io()) GTEST_SKIP() << tmp_.path() << " refuses O_DIRECT";
  const auto data = RandomBytes(kBlock, 26);
  Status s = engine->Write(Key(0), data.data(), kBlock);
  EXPECT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
  EXPECT_NE(s.message().find("transferred 32256 of 65536 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("O_DIRECT cannot continue"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("/t0.bin"), std::string::npos) << s.message();
  ExpectNoOffloadFiles(tmp_.path());
}

TEST_F(FaultTest, ShortBufferedTransferInsideABlockContinues) {
  // The same cut on buffered I/O (O_DIRECT refused) is fine: it continues.
  FaultOptions f = Rules({Rule(IoOp::kWrite, 0, FaultKind::kShortUnaligned)});
  f.refuse_direct = true;
  auto engine = Make(tmp_.path(), f, /*allow_buffered_io=*/true);
  const auto data = RandomBytes(kBlock, 27);
  ASSERT_TRUE(engine->Write(Key(0), data.data(), kBlock).ok());
  std::vector<char> back(kBlock);
  ASSERT_TRUE(engine->Read(Key(0), back.data(), kBlock).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(engine->Stats().short_continuations, 1);
}

TEST_F(FaultTest, RefusedOverlappingWriteLeavesNoFileAndNoFd) {
  // Tensor 1 overlaps tensor 0 in shared.bin and is refused; once tensor 0 is
  // removed, neither the file nor an fd of it is left.
  auto engine = Make(tmp_.path(), FaultOptions{});
  auto count_fds = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                         std::filesystem::directory_iterator{});
  };
  const auto before = count_fds();
  const auto data = RandomBytes(8192, 28);
  TensorKey a = Key(0), b = Key(1);
  a.file = b.file = "shared.bin";
  b.offset = 4096;  // inside a's [0, 8192)
  ASSERT_TRUE(engine->Write(a, data.data(), 8192).ok());
  Status s = engine->Write(b, data.data(), 8192);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("overlaps"), std::string::npos) << s.message();
  ASSERT_TRUE(engine->Remove(0).ok());
  ExpectNoOffloadFiles(tmp_.path());
  EXPECT_EQ(count_fds(), before);
}

TEST(OffloadOptions, BandwidthCapMustBeFiniteAndAtLeastOneMBPerSecond) {
  // NaN, infinity and rates under 1e6 bytes/s are refused by name: before the
  // fix a NaN or tiny cap overflowed the double -> int64 ns conversion.
  TempDir tmp;
  for (double cap : {std::nan(""), std::numeric_limits<double>::infinity(), 1e-300, 5e5, -1.0}) {
    OffloadOptions o;
    o.dirs = {tmp.path()};
    o.staging_bytes = 0;
    o.bandwidth_cap_bytes_per_s = cap;
    auto e = OffloadEngine::Create(o);
    ASSERT_FALSE(e.ok()) << cap;
    EXPECT_EQ(e.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(e.status().message().find("--ssd-bandwidth"), std::string::npos)
        << e.status().message();
  }
  for (double cap : {0.0, 1e6}) {
    OffloadOptions o;
    o.dirs = {tmp.path()};
    o.staging_bytes = 0;
    o.bandwidth_cap_bytes_per_s = cap;
    EXPECT_TRUE(OffloadEngine::Create(o).ok()) << cap;
  }
}

TEST(FixedBuffers, ExternalStagingOverOneGibIsRegisteredInPieces) {
  // 2.5 units with a limit of 1 unit (4096 bytes here; 1 GiB in the engine):
  // pieces of 4096, 4096 and 2048 bytes. A range inside one piece gets that
  // piece's index; one straddling two pieces gets -1 (it goes unregistered).
  alignas(4096) static char region[10240];
  const std::vector<iovec> pieces = detail::SplitForRegistration({region, 10240}, 4096);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].iov_base, region);
  EXPECT_EQ(pieces[1].iov_base, region + 4096);
  EXPECT_EQ(pieces[2].iov_base, region + 8192);
  EXPECT_EQ(pieces[0].iov_len, 4096u);
  EXPECT_EQ(pieces[2].iov_len, 2048u);
  EXPECT_EQ(detail::ChunkOf(region, region, 4096, 4096), 0);
  EXPECT_EQ(detail::ChunkOf(region, region + 8192, 2048, 4096), 2);
  EXPECT_EQ(detail::ChunkOf(region, region + 4000, 200, 4096), -1);
  EXPECT_EQ(detail::kMaxFixedBufferBytes, int64_t{1} << 30);
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

// Faults: EIO, ENOSPC, short transfers and -EAGAIN through the fault backend;
// a real ENOSPC on a 1 MiB tmpfs; the buffered fallback where O_DIRECT is
// refused; unusable directories. After every failure no offload file is left.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "exec/fault_backend.h"
#include "exec/offload_engine.h"
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
  std::unique_ptr<OffloadEngine> Make(const std::string& dir, FaultOptions faults) {
    auto inner = MakeIoBackend(BackendKind::kAuto, kDepth, [](std::string_view) {});
    EXPECT_TRUE(inner.ok());
    auto backend = std::make_unique<FaultBackend>(std::move(*inner), std::move(faults));
    fault_ = backend.get();
    OffloadOptions o;
    o.dirs = {dir};
    o.block_size = kBlock;
    o.queue_depth = kDepth;
    o.staging_bytes = 1 << 20;
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
  auto engine = Make(fs.path(), FaultOptions{});
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

TEST_F(FaultTest, RefusedODirectFallsBackToBufferedWithOneWarning) {
  FaultOptions f;
  f.refuse_direct = true;
  auto engine = Make(tmp_.path(), f);
  EXPECT_FALSE(engine->direct_io());
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("O_DIRECT"), std::string::npos) << warnings_[0];
  const auto data = RandomBytes(kBlock + 77, 7);
  for (int t = 0; t < 3; ++t) ASSERT_TRUE(engine->Write(Key(t), data.data(), kBlock + 77).ok());
  std::vector<char> back(kBlock + 77);
  ASSERT_TRUE(engine->Read(Key(2), back.data(), kBlock + 77).ok());
  EXPECT_EQ(back, data);
  EXPECT_EQ(warnings_.size(), 1u);  // said once, not per file
}

TEST_F(FaultTest, TmpfsEitherTakesODirectOrFallsBackWithAWarning) {
  // Kernels before 6.6 refuse O_DIRECT on tmpfs (EINVAL); newer ones accept it.
  SmallTmpfs fs(8 << 20);
  if (!fs.ok()) GTEST_SKIP() << fs.why();
  auto engine = Make(fs.path(), FaultOptions{});
  EXPECT_EQ(warnings_.size(), engine->direct_io() ? 0u : 1u);
  const auto data = RandomBytes(5000, 8);
  ASSERT_TRUE(engine->Write(Key(0), data.data(), 5000).ok());
  std::vector<char> back(5000);
  ASSERT_TRUE(engine->Read(Key(0), back.data(), 5000).ok());
  EXPECT_EQ(back, data);
}

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

}  // namespace
}  // namespace ssdtrain::exec

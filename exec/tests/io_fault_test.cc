// Faults through the fault backend: EIO, ENOSPC, short transfers and -EAGAIN;
// a real ENOSPC on a 1 MiB tmpfs; O_DIRECT refused (an error, or buffered I/O
// when allowed); unusable directories. After every failure no offload file is
// left. Races and unwinds: io_unwind_test.cc; signals and the cleanup of
// killed runs: io_cleanup_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "exec/fault_backend.h"
#include "exec/offload_engine.h"
#include "exec/tests/io_fault_util.h"
#include "exec/tests/io_test_util.h"
#include "exec/uring_backend.h"

namespace ssdtrain::exec {
namespace {

using testing::FaultTest;
using testing::kBlock;
using testing::kDepth;
using testing::Key;
using testing::ListTree;
using testing::RandomBytes;
using testing::Rule;
using testing::Rules;
using testing::SmallTmpfs;

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

}  // namespace
}  // namespace ssdtrain::exec

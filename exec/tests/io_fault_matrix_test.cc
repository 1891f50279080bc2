// The cells of the fault matrix (docs/HARDENING.md) that need both real
// backends, io_uring and posix: every request fault in the write and read
// phases, EIO and ENOSPC while preallocating, EIO while removing. Each case
// checks what the caller sees and what is left on disk. SIGINT and SIGKILL in
// each phase: io_signal_matrix_test.cc.
#include <gtest/gtest.h>

#include <cerrno>
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

using testing::ExpectOnlyTheRunDirectory;
using testing::Key;
using testing::kTensorBytes;
using testing::kTensorDiskBytes;
using testing::ListTree;
using testing::MakeEngine;
using testing::RandomBytes;
using testing::SmallTmpfs;
using testing::TempDir;

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

}  // namespace
}  // namespace ssdtrain::exec

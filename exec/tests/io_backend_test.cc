// Conformance of every IoBackend at the raw-request level: results are byte
// counts or -errno, user_data comes back unchanged, Notify wakes Reap.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "exec/detail/test_points.h"
#include "exec/fault_backend.h"
#include "exec/posix_backend.h"
#include "exec/tests/io_test_util.h"
#include "exec/uring_backend.h"

namespace ssdtrain::exec {
namespace {

constexpr int kDepth = 4;
constexpr int64_t kBlock = 64 * 1024;

std::unique_ptr<IoBackend> MakeBackend(const std::string& name) {
  Result<std::unique_ptr<IoBackend>> b =
      name == "posix" ? MakePosixBackend(kDepth) : MakeUringBackend(kDepth);
  if (!b.ok()) return nullptr;
  if (name == "fault") return std::make_unique<FaultBackend>(std::move(*b), FaultOptions{});
  return std::move(*b);
}

class IoBackendConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = MakeBackend(GetParam());
    if (backend_ == nullptr) GTEST_SKIP() << GetParam() << " is refused on this machine";
    path_ = dir_.path() + "/f.bin";
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(::posix_memalign(&buf_, 4096, kBlock), 0);
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
    std::free(buf_);
  }
  // Submits `requests`; OK only when every one of them was queued.
  Status SubmitAll(std::span<const IoRequest> requests) {
    size_t queued = 0;
    Status s = backend_->Submit(requests, &queued);
    EXPECT_EQ(queued, s.ok() ? requests.size() : queued);
    return s.ok() && queued == requests.size() ? Status::Ok() : Status::Internal("not queued");
  }
  IoCompletion ReapOne() {
    IoCompletion c;
    Result<int> n = backend_->Reap({&c, 1}, 1, -1);
    EXPECT_TRUE(n.ok());
    EXPECT_EQ(*n, 1);
    return c;
  }

  testing::TempDir dir_;
  std::unique_ptr<IoBackend> backend_;
  std::string path_;
  int fd_ = -1;
  void* buf_ = nullptr;
};

TEST_P(IoBackendConformance, WriteThenReadReturnsByteCountsAndUserData) {
  std::memset(buf_, 0x5A, kBlock);
  IoRequest w{IoOp::kWrite, fd_, buf_, static_cast<uint32_t>(kBlock), 0, -1, 77};
  ASSERT_TRUE(SubmitAll({&w, 1}).ok());
  IoCompletion c = ReapOne();
  EXPECT_EQ(c.user_data, 77u);
  EXPECT_EQ(c.result, kBlock);
  std::memset(buf_, 0, kBlock);
  IoRequest r{IoOp::kRead, fd_, buf_, static_cast<uint32_t>(kBlock), 0, -1, 78};
  ASSERT_TRUE(SubmitAll({&r, 1}).ok());
  c = ReapOne();
  EXPECT_EQ(c.user_data, 78u);
  EXPECT_EQ(c.result, kBlock);
  EXPECT_EQ(static_cast<unsigned char*>(buf_)[kBlock - 1], 0x5A);
}

TEST_P(IoBackendConformance, ReadPastEndOfFileReturnsZeroBytes) {
  IoRequest r{IoOp::kRead, fd_, buf_, static_cast<uint32_t>(kBlock), 1 << 20, -1, 5};
  ASSERT_TRUE(SubmitAll({&r, 1}).ok());
  EXPECT_EQ(ReapOne().result, 0);
}

TEST_P(IoBackendConformance, BadDescriptorIsNegativeErrno) {
  IoRequest r{IoOp::kRead, 987654, buf_, 4096, 0, -1, 6};
  ASSERT_TRUE(SubmitAll({&r, 1}).ok());
  EXPECT_EQ(ReapOne().result, -EBADF);
}

TEST_P(IoBackendConformance, NotifyWakesABlockedReap) {
  backend_->Notify();
  IoCompletion c;
  Result<int> n = backend_->Reap({&c, 1}, 1, -1);  // would block forever without the wake
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0);
}

TEST_P(IoBackendConformance, ReapTimesOutWithNothingInFlight) {
  IoCompletion c;
  Result<int> n = backend_->Reap({&c, 1}, 1, 1000000);  // 1 ms
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0);
}

TEST_P(IoBackendConformance, ManyRequestsAllComplete) {
  // kDepth writes of 4 KiB at distinct offsets: each user_data exactly once.
  IoRequest reqs[kDepth];
  for (int i = 0; i < kDepth; ++i) {
    reqs[i] = IoRequest{IoOp::kWrite,      fd_, static_cast<char*>(buf_) + i * 4096, 4096,
                        int64_t{i} * 4096, -1,  static_cast<uint64_t>(100 + i)};
  }
  ASSERT_TRUE(SubmitAll(reqs).ok());
  int seen[kDepth] = {};
  for (int got = 0; got < kDepth;) {
    IoCompletion c[kDepth];
    Result<int> n = backend_->Reap(c, 1, -1);
    ASSERT_TRUE(n.ok());
    for (int i = 0; i < *n; ++i) {
      EXPECT_EQ(c[i].result, 4096);
      seen[c[i].user_data - 100]++;
    }
    got += *n;
  }
  for (int i = 0; i < kDepth; ++i) EXPECT_EQ(seen[i], 1);
}

// The test hook below fails every io_uring_submit while it is installed.
int FailUringSubmit(detail::TestPoint point, int64_t) {
  return point == detail::TestPoint::kUringSubmit ? EAGAIN : 0;
}

TEST(UringBackend, RequestsOfAFailedSubmitNeverReachTheKernel) {
  // Two reads are prepared but io_uring_submit fails (EAGAIN, every retry):
  // Submit reports 0 queued. A later read that is submitted must be the only
  // completion, and the two failed reads must never touch their buffers
  // (the file holds 0x5A; the buffers keep 0x11) -- before the fix they stayed
  // in the ring and went to the kernel with the next submit.
  auto made = MakeUringBackend(kDepth);
  if (!made.ok()) GTEST_SKIP() << made.status().ToString();
  std::unique_ptr<IoBackend> backend = std::move(*made);
  testing::TempDir dir;
  const std::string path = dir.path() + "/f.bin";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  std::vector<char> data(3 * 4096, 0x5A);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  std::vector<char> a(4096, 0x11), b(4096, 0x11), c(4096, 0x11);
  IoRequest failed[2] = {{IoOp::kRead, fd, a.data(), 4096, 0, -1, 1},
                         {IoOp::kRead, fd, b.data(), 4096, 4096, -1, 2}};
  detail::SetTestHook(FailUringSubmit);
  size_t queued = 99;
  Status s = backend->Submit(failed, &queued);
  detail::SetTestHook(nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unsent"), std::string::npos) << s.message();
  EXPECT_EQ(queued, 0u);
  IoRequest good{IoOp::kRead, fd, c.data(), 4096, 8192, -1, 3};
  ASSERT_TRUE(backend->Submit({&good, 1}, &queued).ok());
  EXPECT_EQ(queued, 1u);
  std::vector<uint64_t> seen;
  IoCompletion out[4];
  // Reap until the good read is back, then once more briefly for strays.
  while (std::find(seen.begin(), seen.end(), 3u) == seen.end()) {
    Result<int> n = backend->Reap(out, 1, -1);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    for (int i = 0; i < *n; ++i) seen.push_back(out[i].user_data);
  }
  Result<int> n = backend->Reap(out, 1, 20'000'000);  // 20 ms
  ASSERT_TRUE(n.ok());
  for (int i = 0; i < *n; ++i) seen.push_back(out[i].user_data);
  EXPECT_EQ(seen, std::vector<uint64_t>{3});
  EXPECT_EQ(c[0], 0x5A);
  EXPECT_EQ(a, std::vector<char>(4096, 0x11));
  EXPECT_EQ(b, std::vector<char>(4096, 0x11));
  ::close(fd);
}

// The test hook below makes every ring made while it is installed act as on
// a kernel without IORING_FEAT_EXT_ARG.
int WithoutExtArg(detail::TestPoint point, int64_t) {
  return point == detail::TestPoint::kUringInit ? 1 : 0;
}

// A Reap that a Notify wakes returns at once; a hang past this is the failure.
constexpr unsigned kHangGuardSeconds = 20;

TEST(UringBackend, NotifyWakesAnIdleReapOnAKernelWithoutExtArg) {
  // There (Linux before 5.11) liburing drops every completion tagged
  // LIBURING_UDATA_TIMEOUT; a wake read tagged so is never seen, and a
  // Reap with no timeout blocks for good (the engine's destructor hung on
  // its I/O thread). Notify, then an idle Reap: it returns 0 completions.
  // Run in a child process that an alarm ends if it hangs.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        detail::SetTestHook(WithoutExtArg);
        auto made = MakeUringBackend(kDepth);
        detail::SetTestHook(nullptr);
        if (!made.ok()) std::_Exit(0);  // io_uring refused here: nothing to check
        ::alarm(kHangGuardSeconds);
        (*made)->Notify();
        IoCompletion out[4];
        Result<int> n = (*made)->Reap(out, 1, -1);
        std::_Exit(n.ok() && *n == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

INSTANTIATE_TEST_SUITE_P(AllBackends, IoBackendConformance,
                         ::testing::Values("io_uring", "posix", "fault"));

}  // namespace
}  // namespace ssdtrain::exec

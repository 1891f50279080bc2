#include "exec/uring_backend.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <string>

#include "exec/detail/errno_text.h"
#include "exec/detail/test_points.h"

namespace ssdtrain::exec {
namespace {

// user_data of the eventfd read that Notify completes; engine tags never use it.
// Not ~0: that is LIBURING_UDATA_TIMEOUT, whose completions liburing drops on
// kernels without IORING_FEAT_EXT_ARG (a Notify would never wake a Reap).
constexpr uint64_t kWakeTag = ~uint64_t{0} - 2;
// user_data of the NOPs that overwrite requests prepared in the ring but not
// sent (a failed or short io_uring_submit): they reach the kernel with the next
// submit, touch no memory and no fd, and their completions are dropped.
constexpr uint64_t kUnsentTag = ~uint64_t{0} - 1;
static_assert(kWakeTag != LIBURING_UDATA_TIMEOUT && kUnsentTag != LIBURING_UDATA_TIMEOUT,
              "liburing reserves LIBURING_UDATA_TIMEOUT for its own timeouts");
// io_uring_submit attempts before the unsent rest of a batch is given up; each
// retry first moves ready completions aside, which frees the completion-queue
// room an -EBUSY asks for.
constexpr int kSubmitAttempts = 4;

using detail::ErrnoText;

// One checking macro for liburing calls: they return -errno.
#define SSDTRAIN_URING_TRY(call)                                                          \
  do {                                                                                    \
    const int ssdtrain_rc_ = (call);                                                      \
    if (ssdtrain_rc_ < 0) {                                                               \
      return Status::IoError(std::string(#call) + " failed at " + __FILE__ + ":" +        \
                             std::to_string(__LINE__) + ": " + ErrnoText(-ssdtrain_rc_)); \
    }                                                                                     \
  } while (0)

class UringBackend : public IoBackend {
 public:
  UringBackend() = default;
  ~UringBackend() override {
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (event_fd_ >= 0) ::close(event_fd_);
  }

  Status Init(int queue_depth) {
    // +1 SQE/CQE for the armed eventfd read.
    const int rc = io_uring_queue_init(static_cast<unsigned>(queue_depth + 1), &ring_, 0);
    if (rc < 0) {
      return Status::Unavailable(
          "io_uring is refused here (io_uring_queue_init: " + ErrnoText(-rc) + ")");
    }
    ring_ready_ = true;
    if (detail::HitTestPoint(detail::TestPoint::kUringInit) != 0) {
      ring_.features &= ~IORING_FEAT_EXT_ARG;
    }
    event_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (event_fd_ < 0) return Status::IoError("eventfd failed: " + ErrnoText(errno));
    return ArmWakeAndFlush();
  }

  std::string Name() const override { return "io_uring"; }

  Status RegisterBuffers(std::span<const iovec> buffers) override {
    SSDTRAIN_URING_TRY(
        io_uring_register_buffers(&ring_, buffers.data(), static_cast<unsigned>(buffers.size())));
    return Status::Ok();
  }

  Status Submit(std::span<const IoRequest> requests, size_t* queued) override {
    *queued = 0;
    while (*queued < requests.size()) {
      size_t chunk = std::min<size_t>(requests.size() - *queued, io_uring_sq_space_left(&ring_));
      if (chunk == 0) {
        // Earlier unsent entries (the wake read, NOPs) fill the ring: send them first.
        SSDTRAIN_RETURN_IF_ERROR(Flush());
        chunk = std::min<size_t>(requests.size() - *queued, io_uring_sq_space_left(&ring_));
        if (chunk == 0) return Status::Internal("io_uring submission queue full");
      }
      for (size_t i = 0; i < chunk; ++i) Prep(requests[*queued + i]);
      Status s = Flush();
      // The kernel takes entries in ring order, so the unsent ones are the last.
      const size_t unsent = std::min<size_t>(chunk, io_uring_sq_ready(&ring_));
      if (unsent > 0) {
        DisarmLast(unsent);
        *queued += chunk - unsent;
        return s.ok() ? Status::IoError("io_uring_submit sent only part of a batch") : s;
      }
      *queued += chunk;
    }
    return Status::Ok();
  }

  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_ns) override {
    int n = Take(out);
    if (n >= min_complete || woken_) {
      woken_ = false;
      return n;
    }
    // The wake read must be in the kernel before blocking, or a Notify is lost.
    if (Status s = ArmWakeAndFlush(); !s.ok()) {
      if (n > 0) return n;  // hand back what was reaped; the error comes again
      return s;
    }
    while (n < min_complete && n < static_cast<int>(out.size())) {
      io_uring_cqe* cqe = nullptr;
      int rc;
      if (timeout_ns < 0) {
        rc = io_uring_wait_cqe(&ring_, &cqe);
      } else {
        __kernel_timespec ts{};
        ts.tv_sec = timeout_ns / 1000000000;
        ts.tv_nsec = timeout_ns % 1000000000;
        rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
      }
      if (rc == -ETIME || rc == -EINTR) break;
      if (rc < 0) {
        if (n > 0) break;  // completions already taken must reach the caller
        return Status::IoError("io_uring_wait_cqe failed: " + ErrnoText(-rc));
      }
      n += Take(out.subspan(static_cast<size_t>(n)));
      if (woken_) break;
    }
    woken_ = false;
    return n;
  }

  void Notify() override {
    const uint64_t one = 1;
    // A full counter (impossible at 2^64-1 wakes) is the only failure; ignore it.
    [[maybe_unused]] ssize_t rc = ::write(event_fd_, &one, sizeof(one));
  }

 private:
  void Prep(const IoRequest& r) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // the caller checked the space
    const bool fixed = r.buf_index >= 0;
    if (r.op == IoOp::kRead) {
      if (fixed) {
        io_uring_prep_read_fixed(sqe, r.fd, r.buf, r.len, static_cast<__u64>(r.offset),
                                 r.buf_index);
      } else {
        io_uring_prep_read(sqe, r.fd, r.buf, r.len, static_cast<__u64>(r.offset));
      }
    } else {
      if (fixed) {
        io_uring_prep_write_fixed(sqe, r.fd, r.buf, r.len, static_cast<__u64>(r.offset),
                                  r.buf_index);
      } else {
        io_uring_prep_write(sqe, r.fd, r.buf, r.len, static_cast<__u64>(r.offset));
      }
    }
    io_uring_sqe_set_data64(sqe, r.user_data);
  }

  // Sends every prepared entry to the kernel; retries short counts, EINTR,
  // EAGAIN and EBUSY a few times. Entries it could not send stay in the ring.
  Status Flush() {
    int rc = 0;
    for (int attempt = 0; attempt < kSubmitAttempts; ++attempt) {
      const int injected = detail::HitTestPoint(detail::TestPoint::kUringSubmit);
      rc = injected != 0 ? -injected : io_uring_submit(&ring_);
      if (io_uring_sq_ready(&ring_) == 0) return Status::Ok();
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) break;
      MoveReadyAside();
    }
    const std::string why = rc < 0 ? ErrnoText(-rc) : "the kernel took " + std::to_string(rc);
    return Status::IoError("io_uring_submit left " + std::to_string(io_uring_sq_ready(&ring_)) +
                           " requests unsent (" + why + ")");
  }

  // Overwrites the last `count` prepared, unsent entries with NOPs.
  void DisarmLast(size_t count) {
    for (size_t i = 1; i <= count; ++i) {
      const unsigned pos = ring_.sq.sqe_tail - static_cast<unsigned>(i);
      io_uring_sqe* sqe = &ring_.sq.sqes[pos & ring_.sq.ring_mask];
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kUnsentTag);
    }
  }

  Status ArmWakeAndFlush() {
    if (!wake_armed_) {
      if (io_uring_sq_space_left(&ring_) == 0) SSDTRAIN_RETURN_IF_ERROR(Flush());
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return Status::Internal("io_uring submission queue full");
      io_uring_prep_read(sqe, event_fd_, &wake_buf_, sizeof(wake_buf_), 0);
      io_uring_sqe_set_data64(sqe, kWakeTag);
      wake_armed_ = true;
    }
    if (io_uring_sq_ready(&ring_) > 0) return Flush();
    return Status::Ok();
  }

  // Moves ready completions to `aside_`, the first thing Take hands out.
  void MoveReadyAside() {
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (Keep(tag)) aside_.push_back(IoCompletion{tag, res});
    }
  }

  // Moves completions (set aside ones first, then ready ones) into `out`.
  int Take(std::span<IoCompletion> out) {
    int n = 0;
    while (n < static_cast<int>(out.size()) && !aside_.empty()) {
      out[static_cast<size_t>(n++)] = aside_.front();
      aside_.pop_front();
    }
    io_uring_cqe* cqe = nullptr;
    while (n < static_cast<int>(out.size()) && io_uring_peek_cqe(&ring_, &cqe) == 0) {
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (Keep(tag)) out[static_cast<size_t>(n++)] = IoCompletion{tag, res};
    }
    return n;
  }

  // False for the ring's own completions: the wake read (re-armed before the
  // next blocking wait) and the NOPs of unsent requests.
  bool Keep(uint64_t tag) {
    if (tag == kWakeTag) {
      woken_ = true;
      wake_armed_ = false;
      return false;
    }
    return tag != kUnsentTag;
  }

  io_uring ring_{};
  bool ring_ready_ = false;
  int event_fd_ = -1;
  uint64_t wake_buf_ = 0;
  bool wake_armed_ = false;  // the wake read is prepared (sent or about to be)
  bool woken_ = false;
  std::deque<IoCompletion> aside_;  // reaped while retrying a submit
};

}  // namespace

Result<std::unique_ptr<IoBackend>> MakeUringBackend(int queue_depth) {
  if (queue_depth < 1) {
    return Status::InvalidArgument("queue depth must be at least 1, got " +
                                   std::to_string(queue_depth));
  }
  auto backend = std::make_unique<UringBackend>();
  SSDTRAIN_RETURN_IF_ERROR(backend->Init(queue_depth));
  return std::unique_ptr<IoBackend>(std::move(backend));
}

}  // namespace ssdtrain::exec

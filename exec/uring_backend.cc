#include "exec/uring_backend.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "exec/detail/errno_text.h"

namespace ssdtrain::exec {
namespace {

// user_data of the eventfd read that Notify completes; engine tags never use it.
constexpr uint64_t kWakeTag = ~uint64_t{0};

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
    event_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (event_fd_ < 0) return Status::IoError("eventfd failed: " + ErrnoText(errno));
    SSDTRAIN_RETURN_IF_ERROR(ArmWake());
    SSDTRAIN_URING_TRY(io_uring_submit(&ring_));
    return Status::Ok();
  }

  std::string Name() const override { return "io_uring"; }

  Status RegisterBuffers(std::span<const iovec> buffers) override {
    SSDTRAIN_URING_TRY(
        io_uring_register_buffers(&ring_, buffers.data(), static_cast<unsigned>(buffers.size())));
    return Status::Ok();
  }

  Status Submit(std::span<const IoRequest> requests) override {
    for (const IoRequest& r : requests) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {
        SSDTRAIN_URING_TRY(io_uring_submit(&ring_));
        sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) return Status::Internal("io_uring submission queue full");
      }
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
    SSDTRAIN_URING_TRY(io_uring_submit(&ring_));
    return Status::Ok();
  }

  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_ns) override {
    int n = Drain(out);
    if (n >= min_complete || woken_) {
      woken_ = false;
      return n;
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
      if (rc < 0) return Status::IoError("io_uring_wait_cqe failed: " + ErrnoText(-rc));
      n += Drain(out.subspan(static_cast<size_t>(n)));
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
  Status ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      SSDTRAIN_URING_TRY(io_uring_submit(&ring_));
      sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return Status::Internal("io_uring submission queue full");
    }
    io_uring_prep_read(sqe, event_fd_, &wake_buf_, sizeof(wake_buf_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
    return Status::Ok();
  }

  // Moves ready completions into `out`; re-arms the wake read when it fired.
  int Drain(std::span<IoCompletion> out) {
    int n = 0;
    io_uring_cqe* cqe = nullptr;
    while (n < static_cast<int>(out.size()) && io_uring_peek_cqe(&ring_, &cqe) == 0) {
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (tag == kWakeTag) {
        woken_ = true;
        // Re-armed at the next Submit; if that fails, Submit reports it.
        if (ArmWake().ok()) io_uring_submit(&ring_);
        continue;
      }
      out[static_cast<size_t>(n++)] = IoCompletion{tag, res};
    }
    return n;
  }

  io_uring ring_{};
  bool ring_ready_ = false;
  int event_fd_ = -1;
  uint64_t wake_buf_ = 0;
  bool woken_ = false;
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

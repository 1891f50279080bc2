#include "exec/posix_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "exec/detail/thread_pool_backend.h"

namespace ssdtrain::exec {
namespace detail {

ThreadPoolBackend::ThreadPoolBackend(int threads) {
  workers_.reserve(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPoolBackend::~ThreadPoolBackend() { StopWorkers(); }

void ThreadPoolBackend::StopWorkers() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.NotifyAll();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

Status ThreadPoolBackend::Submit(std::span<const IoRequest> requests, size_t* queued) {
  {
    MutexLock lock(&mu_);
    for (const IoRequest& r : requests) work_.push_back(r);
  }
  *queued = requests.size();
  work_cv_.NotifyAll();
  return Status::Ok();
}

Result<int> ThreadPoolBackend::Reap(std::span<IoCompletion> out, int min_complete,
                                    int64_t timeout_ns) {
  MutexLock lock(&mu_);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::nanoseconds(std::max<int64_t>(timeout_ns, 0));
  while (!woken_ && static_cast<int>(done_.size()) < min_complete && done_.size() < out.size()) {
    if (timeout_ns < 0) {
      done_cv_.Wait(&mu_);
    } else if (!done_cv_.WaitUntil(&mu_, deadline)) {
      break;
    }
  }
  woken_ = false;
  int n = 0;
  while (n < static_cast<int>(out.size()) && !done_.empty()) {
    out[static_cast<size_t>(n++)] = done_.front();
    done_.pop_front();
  }
  return n;
}

void ThreadPoolBackend::Notify() {
  {
    MutexLock lock(&mu_);
    woken_ = true;
  }
  done_cv_.NotifyAll();
}

void ThreadPoolBackend::WorkerLoop() {
  MutexLock lock(&mu_);
  while (true) {
    while (!stopping_ && work_.empty()) work_cv_.Wait(&mu_);
    if (stopping_) return;
    const IoRequest r = work_.front();
    work_.pop_front();
    lock.Unlock();
    const int64_t result = Transfer(r);
    lock.Lock();
    done_.push_back(IoCompletion{r.user_data, result});
    done_cv_.NotifyAll();
  }
}

int64_t PreadPwrite(const IoRequest& r) {
  ssize_t rc;
  do {
    rc = r.op == IoOp::kRead ? ::pread(r.fd, r.buf, r.len, r.offset)
                             : ::pwrite(r.fd, r.buf, r.len, r.offset);
  } while (rc < 0 && errno == EINTR);
  return rc >= 0 ? static_cast<int64_t>(rc) : -static_cast<int64_t>(errno);
}

}  // namespace detail

namespace {

class PosixBackend : public detail::ThreadPoolBackend {
 public:
  using ThreadPoolBackend::ThreadPoolBackend;
  ~PosixBackend() override { StopWorkers(); }  // no worker calls Transfer from here on
  std::string Name() const override { return "posix"; }

 protected:
  int64_t Transfer(const IoRequest& r) override {
    // GPU memory is not the kernel's to read: only cuFile takes it.
    return r.device_memory ? -EINVAL : detail::PreadPwrite(r);
  }
};

}  // namespace

Result<std::unique_ptr<IoBackend>> MakePosixBackend(int threads) {
  if (threads < 1) {
    return Status::InvalidArgument("posix backend needs at least 1 thread, got " +
                                   std::to_string(threads));
  }
  return std::unique_ptr<IoBackend>(std::make_unique<PosixBackend>(threads));
}

}  // namespace ssdtrain::exec

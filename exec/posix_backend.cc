#include "exec/posix_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include "exec/detail/annotated_mutex.h"

namespace ssdtrain::exec {
namespace {

using detail::CondVar;
using detail::Mutex;
using detail::MutexLock;

class PosixBackend : public IoBackend {
 public:
  explicit PosixBackend(int threads) {
    workers_.reserve(static_cast<size_t>(threads));
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }

  ~PosixBackend() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    work_cv_.NotifyAll();
    for (std::thread& t : workers_) t.join();
  }

  std::string Name() const override { return "posix"; }

  Status RegisterBuffers(std::span<const iovec>) override { return Status::Ok(); }

  Status Submit(std::span<const IoRequest> requests, size_t* queued) override {
    {
      MutexLock lock(&mu_);
      for (const IoRequest& r : requests) work_.push_back(r);
    }
    *queued = requests.size();
    work_cv_.NotifyAll();
    return Status::Ok();
  }

  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_ns) override {
    MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::nanoseconds(std::max<int64_t>(timeout_ns, 0));
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

  void Notify() override {
    {
      MutexLock lock(&mu_);
      woken_ = true;
    }
    done_cv_.NotifyAll();
  }

 private:
  void WorkerLoop() {
    MutexLock lock(&mu_);
    while (true) {
      while (!stopping_ && work_.empty()) work_cv_.Wait(&mu_);
      if (stopping_) return;
      const IoRequest r = work_.front();
      work_.pop_front();
      lock.Unlock();
      ssize_t rc;
      do {
        rc = r.op == IoOp::kRead ? ::pread(r.fd, r.buf, r.len, r.offset)
                                 : ::pwrite(r.fd, r.buf, r.len, r.offset);
      } while (rc < 0 && errno == EINTR);
      const int64_t result = rc >= 0 ? static_cast<int64_t>(rc) : -static_cast<int64_t>(errno);
      lock.Lock();
      done_.push_back(IoCompletion{r.user_data, result});
      done_cv_.NotifyAll();
    }
  }

  Mutex mu_;
  CondVar work_cv_;  // work queued, or stopping
  CondVar done_cv_;  // a completion, or Notify
  std::deque<IoRequest> work_ SSDTRAIN_GUARDED_BY(mu_);
  std::deque<IoCompletion> done_ SSDTRAIN_GUARDED_BY(mu_);
  bool woken_ SSDTRAIN_GUARDED_BY(mu_) = false;
  bool stopping_ SSDTRAIN_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
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

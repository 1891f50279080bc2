#include "exec/posix_backend.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace ssdtrain::exec {
namespace {

class PosixBackend : public IoBackend {
 public:
  explicit PosixBackend(int threads) {
    workers_.reserve(static_cast<size_t>(threads));
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }

  ~PosixBackend() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  std::string Name() const override { return "posix"; }

  Status RegisterBuffers(std::span<const iovec>) override { return Status::Ok(); }

  Status Submit(std::span<const IoRequest> requests, size_t* queued) override {
    {
      std::lock_guard lock(mu_);
      for (const IoRequest& r : requests) work_.push_back(r);
    }
    *queued = requests.size();
    work_cv_.notify_all();
    return Status::Ok();
  }

  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_ns) override {
    std::unique_lock lock(mu_);
    auto ready = [&] {
      return woken_ || static_cast<int>(done_.size()) >= min_complete || done_.size() >= out.size();
    };
    if (timeout_ns < 0) {
      done_cv_.wait(lock, ready);
    } else {
      done_cv_.wait_for(lock, std::chrono::nanoseconds(timeout_ns), ready);
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
      std::lock_guard lock(mu_);
      woken_ = true;
    }
    done_cv_.notify_all();
  }

 private:
  void WorkerLoop() {
    std::unique_lock lock(mu_);
    while (true) {
      work_cv_.wait(lock, [&] { return stopping_ || !work_.empty(); });
      if (stopping_) return;
      const IoRequest r = work_.front();
      work_.pop_front();
      lock.unlock();
      ssize_t rc;
      do {
        rc = r.op == IoOp::kRead ? ::pread(r.fd, r.buf, r.len, r.offset)
                                 : ::pwrite(r.fd, r.buf, r.len, r.offset);
      } while (rc < 0 && errno == EINTR);
      const int64_t result = rc >= 0 ? static_cast<int64_t>(rc) : -static_cast<int64_t>(errno);
      lock.lock();
      done_.push_back(IoCompletion{r.user_data, result});
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<IoRequest> work_;
  std::deque<IoCompletion> done_;
  bool woken_ = false;
  bool stopping_ = false;
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

// ThreadPoolBackend: an IoBackend whose requests each run on one of a pool of
// worker threads, blocking, one at a time per thread; a request's raw result
// (bytes, short counts, -errno) comes from Transfer. The posix backend
// (pread/pwrite, posix_backend.h) and the cuFile backend (cufile_backend.h)
// are this pool with their own Transfer.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "exec/detail/annotated_mutex.h"
#include "exec/io_backend.h"

namespace ssdtrain::exec::detail {

class ThreadPoolBackend : public IoBackend {
 public:
  // Starts `threads` workers (>= 1). A subclass's Transfer is first called
  // after its constructor has returned (Submit comes after construction).
  explicit ThreadPoolBackend(int threads);
  // Stops and joins the workers (nothing may be in flight, io_backend.h).
  ~ThreadPoolBackend() override;

  Status RegisterBuffers(std::span<const iovec>) override { return Status::Ok(); }
  Status Submit(std::span<const IoRequest> requests, size_t* queued) override;
  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_ns) override;
  void Notify() override;

 protected:
  // Moves one request's bytes, blocking: bytes transferred (maybe short) or
  // -errno. Called on a worker thread, several at once.
  virtual int64_t Transfer(const IoRequest& r) = 0;
  // Subclasses whose Transfer reads their own members call this first in
  // their destructor, so that no worker runs while they are destroyed.
  void StopWorkers();

 private:
  void WorkerLoop();

  Mutex mu_;
  CondVar work_cv_;  // work queued, or stopping
  CondVar done_cv_;  // a completion, or Notify
  std::deque<IoRequest> work_ SSDTRAIN_GUARDED_BY(mu_);
  std::deque<IoCompletion> done_ SSDTRAIN_GUARDED_BY(mu_);
  bool woken_ SSDTRAIN_GUARDED_BY(mu_) = false;
  bool stopping_ SSDTRAIN_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

// pread(2) or pwrite(2) of one request, EINTR retried: bytes or -errno.
int64_t PreadPwrite(const IoRequest& r);

}  // namespace ssdtrain::exec::detail

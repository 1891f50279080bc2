// An in-order work queue on its own thread: the CPU backend's stand-in for a
// CUDA stream. Tasks run in the order enqueued; the first task that fails makes
// the error sticky (later tasks are skipped and Synchronize reports it), as a
// CUDA stream's error does.
//
// Thread-safety: Enqueue and Synchronize may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "traces/status.h"

namespace ssdtrain::exec::detail {

class StreamWorker {
 public:
  using Task = std::function<Status()>;

  explicit StreamWorker(std::string name);
  ~StreamWorker();  // drains the queue, then joins
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  // `run_after_error`: run even after an earlier task failed (event records and
  // waits, so that nobody waiting on this stream hangs).
  void Enqueue(Task task, bool run_after_error = false);
  // Blocks until every task enqueued so far has run; returns the sticky error.
  Status Synchronize();
  // The sticky error without waiting.
  Status error() const;

 private:
  void Loop();

  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<std::pair<Task, bool>> queue_;
  uint64_t enqueued_ = 0;
  uint64_t finished_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread thread_;
};

}  // namespace ssdtrain::exec::detail

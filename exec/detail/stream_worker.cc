#include "exec/detail/stream_worker.h"

#include <utility>

namespace ssdtrain::exec::detail {

StreamWorker::StreamWorker(std::string name)
    : name_(std::move(name)), thread_([this] { Loop(); }) {}

StreamWorker::~StreamWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void StreamWorker::Enqueue(Task task, bool run_after_error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(task), run_after_error);
    ++enqueued_;
  }
  work_cv_.notify_one();
}

Status StreamWorker::Synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  idle_cv_.wait(lock, [&] { return finished_ >= target; });
  return error_;
}

Status StreamWorker::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void StreamWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    auto [task, run_after_error] = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = !error_.ok() && !run_after_error;
    lock.unlock();
    Status status = skip ? Status::Ok() : task();
    lock.lock();
    if (!status.ok() && error_.ok()) error_ = status.WithPrefix(name_ + " stream");
    ++finished_;
    idle_cv_.notify_all();
  }
}

}  // namespace ssdtrain::exec::detail

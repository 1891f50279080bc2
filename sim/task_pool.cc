#include "sim/detail/task_pool.h"

namespace ssdtrain::sim::detail {

TaskPool::TaskPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { Work(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void TaskPool::Run(std::unique_lock<std::mutex>& lock, Task t) {
  lock.unlock();
  (*t.group->f)(t.index);
  lock.lock();
  if (--t.group->remaining == 0) cv_.notify_all();
}

void TaskPool::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Task t = queue_.front();
    queue_.pop_front();
    Run(lock, t);
  }
}

void TaskPool::ForEach(size_t n, const std::function<void(size_t)>& f) {
  if (workers_.empty() || n <= 1) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  Group group{&f, n};
  std::unique_lock<std::mutex> lock(mu_);
  for (size_t i = 0; i < n; ++i) queue_.push_back(Task{&group, i});
  cv_.notify_all();
  while (group.remaining > 0) {
    if (!queue_.empty()) {
      Task t = queue_.front();
      queue_.pop_front();
      Run(lock, t);
    } else {
      cv_.wait(lock, [&] { return group.remaining == 0 || !queue_.empty(); });
    }
  }
}

}  // namespace ssdtrain::sim::detail

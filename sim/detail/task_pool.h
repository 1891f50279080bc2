// A small pool for the planner's independent searches (layouts of a window,
// the stages of one plan): ForEach runs f(0..n−1) on the pool's threads and
// the caller's, and returns when all n have run. ForEach may be called from
// inside a task (a layout's stages from its layout's task): a caller that
// waits runs queued tasks meanwhile, its own or others', so nested calls
// neither deadlock nor leave a core idle. Results are the caller's to place
// by index, so they do not depend on the number of threads.
//
// Thread-safety: ForEach may be called from any thread, concurrently.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ssdtrain::sim::detail {

class TaskPool {
 public:
  // `threads` in all, the callers of ForEach included (threads − 1 workers);
  // 1 or less: ForEach runs everything on its caller, in order.
  explicit TaskPool(int threads);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void ForEach(size_t n, const std::function<void(size_t)>& f);

 private:
  struct Group {
    const std::function<void(size_t)>* f = nullptr;
    size_t remaining = 0;  // under mu_
  };
  struct Task {
    Group* group = nullptr;
    size_t index = 0;
  };
  void Run(std::unique_lock<std::mutex>& lock, Task t);  // unlocks while f runs
  void Work();

  std::mutex mu_;
  std::condition_variable cv_;  // a task queued, a group done, or stopping
  std::deque<Task> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace ssdtrain::sim::detail

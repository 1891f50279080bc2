// sim/detail/task_pool.h: every index runs once, nested calls finish, and
// the work spreads over the pool's threads. Run under ThreadSanitizer too
// (scripts/sanitize.sh tsan).
#include "sim/detail/task_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace ssdtrain::sim::detail {
namespace {

TEST(TaskPool, EveryIndexRunsOnceAndTheCallReturnsAfterAll) {
  for (int threads : {1, 2, 4}) {
    TaskPool pool(threads);
    std::vector<int> runs(100, 0);
    pool.ForEach(runs.size(), [&](size_t i) { ++runs[i]; });  // each index its own slot
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i], 1) << threads << " " << i;
  }
}

// A layout's task planning its stages as tasks of the same pool, with every
// thread busy in an outer task: the waiting callers run the inner tasks.
TEST(TaskPool, NestedCallsFromEveryThreadFinish) {
  TaskPool pool(3);
  std::vector<std::vector<int>> inner(6, std::vector<int>(5, 0));
  pool.ForEach(inner.size(), [&](size_t i) {
    pool.ForEach(inner[i].size(), [&](size_t j) { inner[i][j] = static_cast<int>(i * 10 + j); });
  });
  for (size_t i = 0; i < inner.size(); ++i) {
    for (size_t j = 0; j < inner[i].size(); ++j)
      EXPECT_EQ(inner[i][j], static_cast<int>(i * 10 + j));
  }
}

// Tasks that wait for one another can only finish when they run at once.
TEST(TaskPool, TasksRunOnThePoolsThreadsAtOnce) {
  TaskPool pool(2);
  std::atomic<int> arrived{0};
  std::mutex mu;
  std::set<std::thread::id> ids;
  pool.ForEach(2, [&](size_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    }
    ++arrived;
    while (arrived.load() < 2) std::this_thread::yield();
  });
  EXPECT_EQ(ids.size(), 2u);
}

TEST(TaskPool, OneThreadRunsInOrderOnTheCaller) {
  TaskPool pool(1);
  std::vector<size_t> order;
  const std::thread::id caller = std::this_thread::get_id();
  pool.ForEach(4, [&](size_t i) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    order.push_back(i);
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace ssdtrain::sim::detail

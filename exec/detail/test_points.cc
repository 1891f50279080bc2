#include "exec/detail/test_points.h"

#include <atomic>

namespace ssdtrain::exec::detail {
namespace {

std::atomic<TestHook> g_hook{nullptr};

}  // namespace

void SetTestHook(TestHook hook) { g_hook.store(hook, std::memory_order_release); }

int HitTestPoint(TestPoint point, int64_t id) {
  const TestHook hook = g_hook.load(std::memory_order_acquire);
  return hook == nullptr ? 0 : hook(point, id);
}

}  // namespace ssdtrain::exec::detail

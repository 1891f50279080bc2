#include "sim/event_queue.h"

#include <algorithm>
#include <cassert>

namespace ssdtrain::sim {
namespace {

// std::push_heap builds a max-heap; "greater" puts the earliest event on top.
bool Later(const Event& a, const Event& b) {
  if (a.time != b.time) return a.time > b.time;
  return a.sequence > b.sequence;
}

}  // namespace

void HeapEventQueue::Push(Event event) {
  heap_.push_back(std::move(event));
  std::push_heap(heap_.begin(), heap_.end(), Later);
}

Event HeapEventQueue::Pop() {
  assert(!heap_.empty());
  std::pop_heap(heap_.begin(), heap_.end(), Later);
  Event event = std::move(heap_.back());
  heap_.pop_back();
  return event;
}

void MapEventQueue::Push(Event event) {
  events_.emplace(std::make_pair(event.time.ns(), event.sequence), std::move(event.action));
}

Event MapEventQueue::Pop() {
  assert(!events_.empty());
  auto it = events_.begin();
  Event event{Time::Ns(it->first.first), it->first.second, std::move(it->second)};
  events_.erase(it);
  return event;
}

}  // namespace ssdtrain::sim

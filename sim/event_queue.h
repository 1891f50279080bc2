// Event queues for the discrete-event engine. A queue orders events by
// (time, insertion sequence): equal times pop in the order they were pushed, so
// nothing about memory addresses or hashing can change a simulation's result
// (ns-3 scheduler.h, SimGrid's stable heap). Two implementations share one
// conformance suite (sim/tests/event_queue_test.cc).
//
// Thread-safety: none; a queue belongs to one Engine.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "sim/time.h"

namespace ssdtrain::sim {

struct Event {
  Time time;
  uint64_t sequence = 0;  // assigned by the engine, strictly increasing
  std::function<void()> action;
};

class EventQueue {
 public:
  virtual ~EventQueue() = default;
  virtual void Push(Event event) = 0;
  // Removes and returns the earliest event. Requires !Empty().
  virtual Event Pop() = 0;
  virtual bool Empty() const = 0;
  virtual size_t Size() const = 0;
};

// A binary min-heap on (time, sequence). O(log n) push and pop. The default.
class HeapEventQueue final : public EventQueue {
 public:
  void Push(Event event) override;
  Event Pop() override;
  bool Empty() const override { return heap_.empty(); }
  size_t Size() const override { return heap_.size(); }

 private:
  std::vector<Event> heap_;
};

// A balanced tree keyed on (time, sequence). Slower; a second implementation to
// hold the heap to the same contract.
class MapEventQueue final : public EventQueue {
 public:
  void Push(Event event) override;
  Event Pop() override;
  bool Empty() const override { return events_.empty(); }
  size_t Size() const override { return events_.size(); }

 private:
  std::map<std::pair<int64_t, uint64_t>, std::function<void()>> events_;
};

}  // namespace ssdtrain::sim

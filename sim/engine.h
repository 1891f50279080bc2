// The discrete-event engine: a clock and an event queue, as an object passed by
// reference (no global clock). Actions run in (time, insertion sequence) order;
// an action may schedule more events. The engine prints nothing: observers
// subscribe through AddObserver and see every event as it runs.
//
// Thread-safety: none. One engine per simulation; simulations may run on
// different threads with different engines.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "sim/event_queue.h"
#include "sim/time.h"
#include "traces/status.h"

namespace ssdtrain::sim {

class Engine {
 public:
  // Called after each event's action runs, with its time and sequence number.
  using Observer = std::function<void(Time time, uint64_t sequence)>;

  // Uses a HeapEventQueue.
  Engine();
  explicit Engine(std::unique_ptr<EventQueue> queue);
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Time Now() const { return now_; }
  // Runs `action` at Now() + delay. A negative delay is InvalidArgument (the
  // event is not scheduled).
  Status Schedule(Time delay, std::function<void()> action);
  // Runs `action` at `when`; a time before Now() is InvalidArgument.
  Status ScheduleAt(Time when, std::function<void()> action);

  // Runs events until the queue is empty. Time never goes backwards (asserted).
  void Run();
  // Runs one event; false when there was none.
  bool Step();

  void AddObserver(Observer observer) { observers_.push_back(std::move(observer)); }
  uint64_t events_processed() const { return events_processed_; }
  size_t pending() const { return queue_->Size(); }

 private:
  std::unique_ptr<EventQueue> queue_;
  Time now_;
  uint64_t next_sequence_ = 0;
  uint64_t events_processed_ = 0;
  std::vector<Observer> observers_;
};

}  // namespace ssdtrain::sim

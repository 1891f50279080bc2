#include "sim/engine.h"

#include <cassert>
#include <string>

namespace ssdtrain::sim {

Engine::Engine() : Engine(std::make_unique<HeapEventQueue>()) {}

Engine::Engine(std::unique_ptr<EventQueue> queue) : queue_(std::move(queue)) {}

Status Engine::Schedule(Time delay, std::function<void()> action) {
  if (delay < Time()) {
    return Status::InvalidArgument("Engine::Schedule: negative delay " +
                                   std::to_string(delay.ns()) + " ns");
  }
  queue_->Push(Event{now_ + delay, next_sequence_++, std::move(action)});
  return Status::Ok();
}

Status Engine::ScheduleAt(Time when, std::function<void()> action) {
  if (when < now_) {
    return Status::InvalidArgument("Engine::ScheduleAt: time " + std::to_string(when.ns()) +
                                   " ns is before now (" + std::to_string(now_.ns()) + " ns)");
  }
  queue_->Push(Event{when, next_sequence_++, std::move(action)});
  return Status::Ok();
}

bool Engine::Step() {
  if (queue_->Empty()) return false;
  Event event = queue_->Pop();
  assert(event.time >= now_ && "simulated time went backwards");
  now_ = event.time;
  event.action();
  ++events_processed_;
  for (const Observer& observer : observers_) observer(event.time, event.sequence);
  return true;
}

void Engine::Run() {
  while (Step()) {
  }
}

}  // namespace ssdtrain::sim

#include "sim/fluid.h"

#include <algorithm>
#include <cassert>
#include <string>
#include <utility>

namespace ssdtrain::sim {

FluidNetwork::ResourceId FluidNetwork::AddResource(std::string name, int max_active) {
  resources_.push_back(Resource{std::move(name), max_active, 0, Time()});
  return static_cast<ResourceId>(resources_.size() - 1);
}

FluidNetwork::FlowId FluidNetwork::Start(Bytes bytes, std::vector<Demand> demands, Time latency,
                                         std::function<void()> on_done) {
  const FlowId id = static_cast<FlowId>(flows_.size());
  const std::string what = "FluidNetwork::Start: flow " + std::to_string(id);
  Status invalid;
  if (bytes.value < 0) {
    invalid = Status::InvalidArgument(what + ": negative size " + std::to_string(bytes.value));
  } else if (latency < Time()) {
    invalid = Status::InvalidArgument(what + ": negative latency " + std::to_string(latency.ns()) +
                                      " ns");
  }
  for (const Demand& d : demands) {
    if (!invalid.ok()) break;
    if (d.resource < 0 || static_cast<size_t>(d.resource) >= resources_.size()) {
      invalid = Status::InvalidArgument(what + ": no resource " + std::to_string(d.resource) +
                                        " (" + std::to_string(resources_.size()) + " exist)");
    } else if (d.rate.value <= 0) {
      invalid = Status::InvalidArgument(what + ": rate " + std::to_string(d.rate.value) +
                                        " B/s on " + ResourceName(d.resource) + " (must be > 0)");
    }
  }
  Flow flow;
  flow.remaining = bytes.value;
  flow.demands = std::move(demands);
  flow.latency = latency;
  flow.on_done = std::move(on_done);
  // A rejected flow keeps its id (callers hold it) but is never admitted.
  flow.cancelled = !invalid.ok();
  flows_.push_back(std::move(flow));
  if (!invalid.ok()) {
    RecordError(std::move(invalid));
    return id;
  }
  waiting_.push_back(id);
  AdmitWaiting();
  return id;
}

void FluidNetwork::RecordError(Status error) {
  if (status_.ok()) status_ = std::move(error);
}

bool FluidNetwork::Cancel(FlowId id) {
  Flow& flow = flows_[static_cast<size_t>(id)];
  if (flow.admitted || flow.cancelled) return false;
  flow.cancelled = true;
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  return true;
}

bool FluidNetwork::CanAdmit(const Flow& flow) const {
  for (const Demand& d : flow.demands) {
    const Resource& r = resources_[static_cast<size_t>(d.resource)];
    if (r.max_active > 0 && r.admitted >= r.max_active) return false;
  }
  return true;
}

void FluidNetwork::AdmitWaiting() {
  // FIFO without overtaking per resource: a flow blocked on a full resource
  // also blocks later flows that need that resource, and only that one (its
  // other resources stay open to flows that do not need the full one, as the
  // offload engine's per-direction queues are: exec/engine_io_loop.cc).
  if (waiting_.empty()) return;
  std::vector<char>& blocked = scratch_blocked_;
  blocked.assign(resources_.size(), 0);
  std::vector<FlowId>& still_waiting = scratch_still_waiting_;
  still_waiting.clear();
  for (FlowId id : waiting_) {
    Flow& flow = flows_[static_cast<size_t>(id)];
    bool admit = CanAdmit(flow);
    for (const Demand& d : flow.demands) admit = admit && !blocked[static_cast<size_t>(d.resource)];
    if (!admit) {
      for (const Demand& d : flow.demands) {
        const Resource& r = resources_[static_cast<size_t>(d.resource)];
        if (r.max_active > 0 && r.admitted >= r.max_active) {
          blocked[static_cast<size_t>(d.resource)] = 1;
        }
      }
      still_waiting.push_back(id);
      continue;
    }
    flow.admitted = true;
    for (const Demand& d : flow.demands) ++resources_[static_cast<size_t>(d.resource)].admitted;
    const Status s = engine_.Schedule(flow.latency, [this, id] { BeginMoving(id); });
    if (!s.ok()) RecordError(s.WithPrefix("FluidNetwork: flow " + std::to_string(id)));
  }
  waiting_.swap(still_waiting);
}

void FluidNetwork::BeginMoving(FlowId id) {
  Advance();
  Flow& flow = flows_[static_cast<size_t>(id)];
  flow.begin = engine_.Now();
  moving_.insert(std::upper_bound(moving_.begin(), moving_.end(), id), id);
  Reschedule();
}

void FluidNetwork::Advance() {
  const Time now = engine_.Now();
  const Time dt = now - last_update_;
  if (dt > Time()) {
    for (FlowId id : moving_) {
      Flow& flow = flows_[static_cast<size_t>(id)];
      flow.remaining = std::max<int64_t>(0, flow.remaining - BytesMoved(flow.rate, dt).value);
    }
    // Busy: some flow moved bytes through it (a flow waiting in a queue does not).
    std::vector<int>& used = scratch_counts_;
    used.assign(resources_.size(), 0);
    for (FlowId id : moving_) {
      const Flow& flow = flows_[static_cast<size_t>(id)];
      if (flow.rate.value == 0) continue;
      for (const Demand& d : flow.demands) used[static_cast<size_t>(d.resource)] = 1;
    }
    for (size_t r = 0; r < resources_.size(); ++r) {
      if (used[r] != 0) resources_[r].busy += dt;
    }
  }
  last_update_ = now;
}

void FluidNetwork::Reschedule() {
  ++generation_;
  // A queued flow behind an older one in its queue waits (moving_ is in start
  // order, so the first flow seen in a queue is its head). Few queues are in
  // use at once (an SSD's two), so the heads are a short list.
  std::vector<std::pair<ResourceId, int>>& heads = scratch_heads_;
  std::vector<char>& waits = scratch_waits_;
  heads.clear();
  waits.assign(moving_.size(), 0);
  for (size_t i = 0; i < moving_.size(); ++i) {
    for (const Demand& d : flows_[static_cast<size_t>(moving_[i])].demands) {
      if (d.queue < 0) continue;
      const std::pair<ResourceId, int> q{d.resource, d.queue};
      if (std::find(heads.begin(), heads.end(), q) != heads.end()) {
        waits[i] = 1;
      } else {
        heads.push_back(q);
      }
    }
  }
  // Shares: every flow that moves counts once on each of its resources.
  std::vector<int>& sharing = scratch_counts_;
  sharing.assign(resources_.size(), 0);
  for (size_t i = 0; i < moving_.size(); ++i) {
    if (waits[i] != 0) continue;
    for (const Demand& d : flows_[static_cast<size_t>(moving_[i])].demands) {
      ++sharing[static_cast<size_t>(d.resource)];
    }
  }
  Time next = Time::Max();
  for (size_t i = 0; i < moving_.size(); ++i) {
    Flow& flow = flows_[static_cast<size_t>(moving_[i])];
    if (waits[i] != 0) {
      flow.rate = BytesPerSec{0};
      continue;
    }
    int64_t rate = INT64_MAX;
    for (const Demand& d : flow.demands) {
      const int n = sharing[static_cast<size_t>(d.resource)];
      rate = std::min(rate, std::max<int64_t>(1, d.rate.value / n));
    }
    flow.rate = BytesPerSec{rate};
    next = std::min(next, TransferTime(Bytes{flow.remaining}, flow.rate));
  }
  if (moving_.empty()) return;
  const uint64_t generation = generation_;
  const Status s = engine_.Schedule(next, [this, generation] { OnCompletion(generation); });
  if (!s.ok()) RecordError(s.WithPrefix("FluidNetwork: next completion"));
}

void FluidNetwork::OnCompletion(uint64_t generation) {
  if (generation != generation_) return;  // rates changed since this was scheduled
  Advance();
  std::vector<FlowId> finished;
  std::vector<FlowId> still_moving;
  for (FlowId id : moving_) {
    (flows_[static_cast<size_t>(id)].remaining == 0 ? finished : still_moving).push_back(id);
  }
  assert(!finished.empty() && "a completion event found no finished flow");
  moving_ = std::move(still_moving);
  for (FlowId id : finished) {
    Flow& flow = flows_[static_cast<size_t>(id)];
    flow.done = true;
    flow.rate = BytesPerSec{0};
    for (const Demand& d : flow.demands) --resources_[static_cast<size_t>(d.resource)].admitted;
  }
  AdmitWaiting();
  Reschedule();
  for (FlowId id : finished) {
    // Move the callback out first: it may start flows, which can grow flows_.
    std::function<void()> done = std::move(flows_[static_cast<size_t>(id)].on_done);
    if (done) done();
  }
}

}  // namespace ssdtrain::sim

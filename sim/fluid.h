// Fluid resources (SimGrid's EngineImpl::solve, simplified): shared links whose
// bandwidth is divided among the transfers ("flows") crossing them. Each flow
// names the resources it crosses and, for each, the rate it would get there
// alone (an SSD writes slower than it reads, so one device carries different
// rates per direction). With n active flows on a resource, each gets 1/n of
// its own rate there, and a flow moves at the minimum over its resources. Rates
// are re-divided whenever a flow starts or ends, and the network schedules one
// engine event for its next completion (older completion events are ignored
// by generation number).
//
// Queues: a demand may name a queue on its resource (Demand::queue >= 0). Flows
// in one queue take the resource one after another, oldest first, each at the
// full share of its queue: an SSD serves large requests in the order they were
// queued, each striped across the whole drive, rather than all at once at a
// fraction of the rate each. Queue heads and unqueued flows divide the resource
// as above (an SSD's read queue and write queue split it evenly); a flow that
// waits in a queue moves nothing and takes no share of its other resources.
//
// Admission: a resource may cap how many flows are admitted at once
// (`max_active`, e.g. tensors in flight to one SSD); further flows wait FIFO and
// may be cancelled until admitted. An admitted flow first waits its latency,
// then moves bytes.
//
// Arithmetic is integer (sim/time.h): progress rounds down, completion times
// round up, so a flow's completion event always finds it done.
//
// Thread-safety: none; the network and its engine belong to one simulation.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sim/engine.h"
#include "sim/time.h"
#include "traces/status.h"

namespace ssdtrain::sim {

class FluidNetwork {
 public:
  using ResourceId = int;
  using FlowId = int64_t;
  struct Demand {
    ResourceId resource = 0;
    BytesPerSec rate;  // this flow's rate on the resource when it is alone there; > 0
    int queue = -1;    // >= 0: served in order with the other flows of this queue here
  };

  explicit FluidNetwork(Engine& engine) : engine_(engine) {}
  FluidNetwork(const FluidNetwork&) = delete;
  FluidNetwork& operator=(const FluidNetwork&) = delete;

  // max_active == 0: no admission cap.
  ResourceId AddResource(std::string name, int max_active = 0);

  // Queues a flow of `bytes` now; `on_done` runs (from an engine event) when its
  // last byte has moved. Demands must name distinct, existing resources with a
  // positive rate; bytes and latency must be >= 0. A flow that breaks these is
  // not started (it never completes, Cancel returns false) and status() says why.
  FlowId Start(Bytes bytes, std::vector<Demand> demands, Time latency,
               std::function<void()> on_done);
  // Cancels a flow that has not been admitted yet; false (and no effect) once
  // it is admitted, in its latency or moving bytes.
  bool Cancel(FlowId flow);
  bool Admitted(FlowId flow) const { return flows_[static_cast<size_t>(flow)].admitted; }
  // When the flow began moving bytes (after admission and latency); valid once it has.
  Time BeginTime(FlowId flow) const { return flows_[static_cast<size_t>(flow)].begin; }

  // The flow's current rate (0 while waiting or in latency). For tests.
  BytesPerSec CurrentRate(FlowId flow) const { return flows_[static_cast<size_t>(flow)].rate; }
  // Time each resource had at least one flow moving bytes, up to the last update.
  Time BusyTime(ResourceId r) const { return resources_[static_cast<size_t>(r)].busy; }
  const std::string& ResourceName(ResourceId r) const {
    return resources_[static_cast<size_t>(r)].name;
  }

  // OK, or the first failure: a flow Start rejected, or an event the engine
  // refused to schedule. Checked in every build (not an assert): after a failure
  // some flows never complete, so the owner must check this once the engine has
  // run and discard its results when it is not OK.
  const Status& status() const { return status_; }

 private:
  struct Resource {
    std::string name;
    int max_active = 0;
    int admitted = 0;  // flows admitted (in latency or moving)
    Time busy;
  };
  struct Flow {
    int64_t remaining = 0;
    std::vector<Demand> demands;
    Time latency;
    std::function<void()> on_done;
    bool admitted = false;
    bool done = false;
    bool cancelled = false;
    BytesPerSec rate;
    Time begin;
  };

  bool CanAdmit(const Flow& flow) const;
  void AdmitWaiting();
  void BeginMoving(FlowId id);
  void Advance();     // moves every moving flow's bytes up to Now()
  void Reschedule();  // re-divides rates and schedules the next completion
  void OnCompletion(uint64_t generation);
  void RecordError(Status error);  // keeps the first

  Engine& engine_;
  std::vector<Resource> resources_;
  std::vector<Flow> flows_;
  std::vector<FlowId> waiting_;  // FIFO
  std::vector<FlowId> moving_;   // ascending id
  Time last_update_;
  uint64_t generation_ = 0;
  Status status_;
  // Reused by Advance, Reschedule and AdmitWaiting (the simulator's hot loop): no
  // allocation per event.
  std::vector<int> scratch_counts_;
  std::vector<char> scratch_waits_;
  std::vector<std::pair<ResourceId, int>> scratch_heads_;
  std::vector<char> scratch_blocked_;          // AdmitWaiting's, per resource
  std::vector<FlowId> scratch_still_waiting_;  // AdmitWaiting's
};

}  // namespace ssdtrain::sim

// The plans that need no planner, decided once: the simulator's "keep" and
// "offload-ssd" policies and the executor's built-in plans (`ssdtrain replay
// --policy keep|offload-all`, its tests and benchmarks) are these functions, so
// that a prediction and a run of "offload everything" are of one plan.
// Also the pieces every policy builds its placements from: which tensors may
// move, and how an offload-ssd placement is filled.
#pragma once

#include <cstdint>
#include <vector>

#include "traces/plan.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

// The tensors a plan may move, one per storage: saved-for-backward,
// offloadable activations inside a layer (the embedding, head and loss, layer
// kNoLayer, stay) whose storage is not resident all step (IsPersistent, the
// rule ResolvePlan applies) and holds at least `min_bytes`. A view without a
// producer op qualifies (its storage's producer writes it) but cannot be
// recomputed: recompute policies skip it. Each storage is represented by its
// root when the root qualifies, else by its lowest qualifying member. In
// ascending id order.
std::vector<TensorId> OffloadCandidates(const Trace& trace, int64_t min_bytes = 0);

// An offload-ssd placement of t's storage: file OffloadFileName(storage) at
// offset 0 on SSD directory 0, read back before `prefetch_before`.
Placement SsdPlacement(const Trace& trace, TensorId t, OpId prefetch_before);

// `layout` (its micro-batch, sequence, tp / pp / dp, micro-batch count,
// schedule and memory budget) with policy "keep", the trace's model and
// fingerprint, no placements and no prediction. Every fixed policy starts here.
Plan KeepAllPlan(const Trace& trace, Plan layout);
// KeepAllPlan on PlanTemplate(trace)'s layout.
Plan KeepAllPlan(const Trace& trace);

struct OffloadAllOptions {
  int64_t min_bytes = 0;  // smaller storages stay on the device
  // Reads issued this many modules ahead (prefetch.h; FlashTrain's 2).
  int prefetch_lookahead_modules = 2;
};

// KeepAllPlan with policy "offload-ssd" and every OffloadCandidates(min_bytes)
// storage offloaded to the SSD (SsdPlacement), each prefetched at its
// LookaheadPrefetchOp.
Plan OffloadAllPlan(const Trace& trace, Plan layout, const OffloadAllOptions& options = {});
// OffloadAllPlan on PlanTemplate(trace)'s layout.
Plan OffloadAllPlan(const Trace& trace, const OffloadAllOptions& options = {});

}  // namespace ssdtrain::traces

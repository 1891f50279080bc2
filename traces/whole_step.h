// A whole training step of one pipeline stage: its m micro-batches in the
// schedule's order (gradient accumulation), unrolled into one trace and one
// plan that the simulator and the executor both run as they run a single
// micro-batch. Decided here, once: the order of a stage's forward and backward
// passes under each schedule, which tensors each micro-batch has of its own,
// and where each micro-batch's offloaded tensors live.
//
// The rules:
// - Order (StageOrder): GPipe runs the m forwards, then the m backwards. 1F1B
//   runs min(p − 1 − stage, m) forwards (warm-up), then alternates one forward
//   and one backward, then the remaining backwards (Narayanan et al. 2021,
//   PipeDream-Flush; Megatron-LM's forward_backward_pipelining_without_
//   interleaving). Backwards run in micro-batch order under both.
// - Tensors: storages resident all step (IsPersistent: weights, weight
//   gradients, optimizer state, step inputs) are shared by the micro-batches;
//   every other storage exists once per micro-batch. Micro-batch 0 keeps the
//   single-micro-batch trace's ids; micro-batch k >= 1 gets new ids, appended in
//   the order of the original tensors. A weight gradient is produced by the
//   first backward that writes it and accumulated into by the later ones (its
//   later writers list it as an output: traces/FORMAT.md, "Accumulation").
//   The step inputs (token ids, labels) are one storage for all micro-batches.
// - Ops: in the order above, each pass's ops in the single-micro-batch trace's
//   order; the optimizer's ops once, at the end. Op::micro_batch and
//   Tensor::micro_batch say whose they are; names gain "mb<k>." when m > 1.
// - Plan: each placement applies to every micro-batch's copy; its prefetch op is
//   that micro-batch's copy of it, and so is its eviction point, except a point
//   in backward (the end of the forward pass, traces/storage_plan.h), which
//   becomes the first op issued after that micro-batch's forward pass; micro-batch k >= 1 writes
//   its offload file under "mb<k>-" + the file's name, at the same offset (so extents that did not
//   overlap still do not).
// With m == 1 the trace and plan come back unchanged (same fingerprint).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

enum class Schedule { kGpipe, kOneFOneB };
// "gpipe" or "1f1b"; the error names `field`.
Result<Schedule> ParseSchedule(std::string_view s, const std::string& field = "schedule");
std::string_view ToString(Schedule s);

struct StageTask {
  bool forward = true;
  int64_t micro_batch = 0;
  bool operator==(const StageTask&) const = default;
};

// The order in which stage `stage` of `p` runs the passes of `m` micro-batches.
std::vector<StageTask> StageOrder(Schedule schedule, int64_t p, int64_t stage, int64_t m);

struct WholeStep {
  Trace trace;
  Plan plan;
  // For each op of `trace`, the op of the single-micro-batch trace it repeats
  // (its micro-batch is Op::micro_batch).
  std::vector<OpId> original_op;
};

// Unrolls `trace` (one micro-batch of stage trace.header.stage of
// trace.header.pp) and `plan` (checked against it) into the stage's whole step
// of plan.num_micro_batches micro-batches under plan.schedule. Errors name
// `plan_source` and the field.
Result<WholeStep> UnrollStep(const Trace& trace, const Plan& plan, const std::string& plan_source);

// Micro-batches in a trace: 1 + the largest Op::micro_batch.
int64_t MicroBatchesIn(const Trace& trace);

}  // namespace ssdtrain::traces

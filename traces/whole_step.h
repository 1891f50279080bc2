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
//   Interleaved 1F1B (Megatron-LM's forward_backward_pipelining_with_
//   interleaving, Narayanan et al. SC21) gives each stage v model chunks
//   (virtual stage c·p + stage holds chunk c) and counts passes in chunk steps,
//   m·v forwards and m·v backwards: the k-th forward step runs micro-batch
//   (k / (p·v))·p + k mod p on chunk (k mod (p·v)) / p, the k-th backward step
//   the same micro-batch on chunk v − 1 − (k mod (p·v)) / p; warm-up is
//   min((p − stage − 1)·2 + (v − 1)·p, m·v) forward steps, then one forward and
//   one backward alternate, then the remaining backwards. It requires m a
//   multiple of p and v >= 2 (InterleavedError).
// - Tensors: storages resident all step (IsPersistent: weights, weight
//   gradients, optimizer state, step inputs) and the weight gradients under
//   set_to_none (allocated by micro-batch 0's backward) are shared by the micro-batches;
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
// - Interleaved: the stage's trace split into its v model chunks first
//   (traces/chunks.h: each chunk boundary a send and a recv, the taking chunk
//   reading a copy of its own), each chunk step running its chunk's ops of
//   the phase; an eviction point in backward becomes the first op issued after
//   the forward pass of that micro-batch's chunk that made the storage. A
//   boundary tensor's placement applies to the copy its taking chunk saves.
// With m == 1 (and no interleaving) the trace and plan come back unchanged (same fingerprint).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

enum class Schedule { kGpipe, kOneFOneB, kInterleaved };
// "gpipe", "1f1b" or "interleaved"; the error names `field`.
Result<Schedule> ParseSchedule(std::string_view s, const std::string& field = "schedule");
std::string_view ToString(Schedule s);

// Why `v` model chunks per stage cannot run interleaved over `p` stages, `m`
// micro-batches and `layers` blocks (empty when they can): v >= 2, p >= 2,
// layers divisible by p·v (each chunk layers / (p·v) blocks, Megatron's
// --num-layers-per-virtual-pipeline-stage), m a multiple of p (Megatron's
// rule). The reason names the quantities, not the caller's flags or fields.
std::string InterleavedError(int64_t p, int64_t m, int64_t v, int64_t layers);

struct StageTask {
  bool forward = true;
  int64_t micro_batch = 0;
  int64_t chunk = 0;  // interleaved: the model chunk (0 .. v − 1); else 0
  bool operator==(const StageTask&) const = default;
};

// The order in which stage `stage` of `p` runs the passes of `m` micro-batches;
// `v`: model chunks per stage (interleaved only, which needs InterleavedError
// empty; 1 for the others).
std::vector<StageTask> StageOrder(Schedule schedule, int64_t p, int64_t stage, int64_t m,
                                  int64_t v = 1);

// The most chunk passes stage `stage` holds at once (forwarded, not yet
// backwarded) in StageOrder: a chunk holds 1/v of the stage's activations of one
// micro-batch. With v = 1 these are micro-batches: 1F1B min(p − stage, m), GPipe
// m. Interleaved: min((p − stage − 1)·2 + (v − 1)·p + 1, m·v); on stage 0
// v·p + p − 1 chunks, p + (p − 1)/v micro-batches' worth (Korthikanti et al.
// 2022), where 1F1B holds p.
int64_t ChunksInFlight(Schedule schedule, int64_t p, int64_t stage, int64_t m, int64_t v = 1);

// What a stage's other passes hold while one micro-batch runs all its v chunks
// (a single-micro-batch simulation holds the v chunks itself): the stage holds
// `chunks_in_flight` chunks, each 1/v of `between_passes_bytes` (one
// micro-batch's storages between its passes), so the others hold
// ceil((chunks_in_flight − v) · between_passes_bytes / v); 0 when
// chunks_in_flight <= v. With v = 1: (k − 1) · between_passes_bytes.
int64_t HeldByOtherChunks(int64_t between_passes_bytes, int64_t chunks_in_flight, int64_t v);

struct WholeStep {
  Trace trace;
  Plan plan;
  // For each op of `trace`, the op of the single-micro-batch trace it repeats
  // (its micro-batch is Op::micro_batch).
  // kNoOp for the send and recv of an interleaved chunk boundary, which repeat none.
  std::vector<OpId> original_op;
  // For each op of `trace`, its model chunk (0 without interleaving; -1: the optimizer's).
  std::vector<int64_t> chunk;
};

// Unrolls `trace` (one micro-batch of stage trace.header.stage of
// trace.header.pp) and `plan` (checked against it) into the stage's whole step
// of plan.num_micro_batches micro-batches under plan.schedule. Errors name
// `plan_source` and the field.
Result<WholeStep> UnrollStep(const Trace& trace, const Plan& plan, const std::string& plan_source);

// Micro-batches in a trace: 1 + the largest Op::micro_batch.
int64_t MicroBatchesIn(const Trace& trace);

}  // namespace ssdtrain::traces

// What a plan means, decided once: a plan resolved against its trace, per
// storage. The simulator (sim/stage_sim.cc, the policies, the planner) and the
// executor (exec/tensor_cache, the replay) both consume this; neither derives
// placements, lifetimes or residency on its own. DESIGN.md, "One meaning of a
// plan".
//
// Storages: a tensor and every tensor whose alias_of chain ends at it share one
// storage, keyed by that root tensor. A plan's placement names any member; it
// applies to the whole storage (deduplication: written once, read once).
//
// The rules, in one place:
// - Residency (StorageRole): step inputs (no producer), weights, weight
//   gradients (a gradient read by the optimizer, or by nothing: the step's
//   result) and optimizer state are resident all step. Every other storage is
//   allocated when its producer is issued and freed after its last use.
//   Under the header's weight_grads "set_to_none" a weight gradient is such a
//   storage too (kWeightGradient): allocated by the backward op that first
//   writes it (its producer; in a whole step the first micro-batch's, the later
//   ones accumulate into it), freed after its last use, the optimizer's op that
//   reads it last (one read by nothing lives to the step's last op).
//   The inputs of an `async` collective count as inputs of the GEMM it runs
//   beside too (AsyncOverlapGemm, traces/trace.h; listed in that op's
//   op_inputs): they stay until it has run.
// - Placement: at most one action per storage. Placements on several members
//   of one storage must agree on the action and, for offload-ssd, on the file,
//   device and offset; their prefetch points may differ and the earliest wins
//   (the read must be back for the first of them). Anything else is rejected.
// - Offload-ssd extents: `file` at `offset` on directory `device`, occupying
//   the storage's bytes rounded up to kOffloadExtentAlignment (O_DIRECT pads the
//   last block); two extents in one file must not overlap.
// - Offload-host: each storage has a fixed place in one host region
//   (host_offset), each rounded up to kOffloadExtentAlignment.
// - Memory: a storage offloaded (ssd or host) stays resident until its write
//   (or host copy) has landed and its last forward use has been issued, unless
//   backward claimed it first (forwarding: then it stays until its last use).
//   With an eviction point (Placement::evict_before) it stays until that op
//   is issued instead, however early its write landed, and that op waits for
//   the write: then memory follows from the plan alone. Placements on several
//   members of one storage must agree on the eviction point. A point on a
//   backward op of the storage's own micro-batch means the end of that
//   micro-batch's forward pass: it resolves to the micro-batch's first backward
//   op (StorageInfo::evict_before), whatever backward op the plan names, and is
//   valid even where that op is the prefetch point or first backward use (the
//   write lands, the copy goes, the read brings it back). In a whole step
//   (traces/whole_step.h) it is the first op issued after that forward pass,
//   so a storage whose write lags is held until its pass ends, never while the
//   micro-batch waits for its backward (backpressure across micro-batches).
//   A prefetched storage counts from the moment its read is issued. The
//   device's allocation granularity rounds every storage (DeviceBytes).
// - Recompute: a recomputed storage is dropped after its last forward use and
//   rebuilt when a later op needs it, by re-running its producer (and, first,
//   the producers of the producer's inputs that are gone), then the forward
//   ops that wrote it in place after its producer (StorageInfo::writers: the
//   all-reduce of a row-parallel layer without sequence parallelism, as
//   Megatron's checkpointed layer runs it again). That run rebuilds
//   every output the plan recomputes that is gone and still needed
//   (RebuiltAlongside), as a framework re-runs a checkpointed op once for all
//   its outputs; its other outputs get scratch buffers for the op's length. A
//   step re-runs each op at most once: the run also keeps each output gone
//   that a later re-run op reads, of the same re-run or of one at a later op
//   (rerun_keep, ResolveReruns' walk), as a framework's re-run runs each op of
//   the region once. A storage so kept is freed once the last of those ops has
//   run (and its own uses are over), or when the last op whose re-run reads it
//   (StorageInfo::rerun_until) has.
//   Under ZeRO-3 a gathered weight that is gone is read from the backward's
//   gather of the same shard where that has run and lives on (RegatheredAt),
//   as FSDP's pre-backward all-gather serves the checkpointed region's re-run;
//   only else is the forward's gather run again. A recompute placement's
//   prefetch_before is its rebuild point (StorageInfo::rebuild_before): the
//   storage is rebuilt when that backward op is issued, before the op waits
//   for its own inputs, as a framework's checkpoint re-runs a whole region's
//   forward at the start of its backward (Megatron's CheckpointFunction,
//   torch.utils.checkpoint at its first unpack); each op's are rebuilt in
//   their producers' order (rebuild_at). It must be a backward op after the
//   storage's last forward use and at or before its first backward use.
// - Hold: a kept storage with Placement::hold_until lives until that op has
//   run (it is listed among the op's inputs, op_inputs), a checkpointed
//   region's cache that the recompute run at that op reads.
//
// Thread-safety: a StoragePlan is immutable after ResolvePlan; share it freely.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "traces/op_lists.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

// Offload extents (on disk and in the host region) are padded to this: the
// O_DIRECT block and the page size.
inline constexpr int64_t kOffloadExtentAlignment = 4096;

enum class StorageRole {
  kPersistent,      // resident all step
  kActivation,      // TensorKind::kActivation: counted in the activation peak
  kTransient,       // the rest (activation gradients, workspaces, losses)
  kWeightGradient,  // weight_grads set_to_none: from its first writer to the optimizer
};

// A gradient with a consumer in the optimizer phase, or with no consumer at all.
bool IsWeightGradient(const Trace& trace, const Tensor& t);
// Resident all step: step inputs without a producer, weights, weight gradients
// (unless the header's weight_grads is set_to_none) and optimizer state.
bool IsPersistent(const Trace& trace, const Tensor& t);
// The trace's weight gradients are allocated in backward (header weight_grads).
bool GradientsSetToNone(const Trace& trace);

// "t<id>.bin": the offload file of a storage when a plan does not name one.
std::string OffloadFileName(TensorId storage);

struct StorageInfo {
  TensorId root = 0;
  int64_t bytes = 0;
  StorageRole role = StorageRole::kTransient;
  bool saved = false;  // some member is saved for backward
  TensorAction action = TensorAction::kKeep;
  TensorId placed_by = -1;  // the tensor id of the (first) placement; -1: none
  OpId prefetch_before = kNoOp;
  OpId evict_before = kNoOp;    // the planned eviction point (Placement::evict_before)
  OpId hold_until = kNoOp;      // Placement::hold_until: one of op_inputs of that op
  OpId rebuild_before = kNoOp;  // recompute: rebuilt when this op is issued (rebuild_at)
  // Rebuilt by a re-run and read by a later one: the last op whose re-run
  // reads it (rerun_keep); kNoOp otherwise.
  OpId rerun_until = kNoOp;
  // offload-ssd
  std::string file;
  int device = 0;
  int64_t offset = 0;
  // offload-host: byte offset in the host region; -1 otherwise.
  int64_t host_offset = -1;
  // Lifetime in issue order (kNoOp where none).
  OpId producer = kNoOp;
  // Forward ops after the producer that write it in place (a member of the
  // storage is their output: a row-parallel layer's all-reduce on its GEMM's
  // output), in issue order. A re-run that rebuilds it runs them too, after
  // the producer (see "Recompute" above).
  std::vector<OpId> writers;
  OpId last_use = kNoOp;  // last op touching it, producer included
  OpId last_forward_use = kNoOp;
  OpId first_backward_use = kNoOp;
  // ZeRO-3: for the output of a forward-phase weight all-gather
  // (...zero_all_gather), or of the copy-out that copies it into the weight
  // the ops read (...zero_copy_out), the index of the storage its
  // micro-batch's backward-phase gather (copy-out) of the same shard
  // produces; -1 otherwise (RegatheredAt).
  int regathered = -1;

  bool persistent() const { return role == StorageRole::kPersistent; }
  bool activation() const { return role == StorageRole::kActivation; }
  bool offloaded() const {
    return action == TensorAction::kOffloadSsd || action == TensorAction::kOffloadHost;
  }
  // What a re-run that rebuilds it runs, in order: the producer, then the
  // writers (see "Recompute" above); empty where it has no producer. The one
  // order the re-run walk (ResolveReruns), the simulator and the executor run.
  std::vector<OpId> RerunOps() const {
    if (producer == kNoOp) return {};
    std::vector<OpId> ops = {producer};
    ops.insert(ops.end(), writers.begin(), writers.end());
    return ops;
  }
};

struct StoragePlan {
  std::vector<StorageInfo> storages;  // one per storage, in root-id order
  std::vector<int> index_of;          // tensor id -> index into storages
  // Per op id: the unique storages it reads (and those held until it:
  // Placement::hold_until) and writes, and the storages whose
  // read the plan issues when the op is issued.
  // evict_at: the storages whose planned eviction point the op is.
  // rebuild_at: the recomputed storages rebuilt when the op is issued, in
  // their producers' order (StorageInfo::rebuild_before).
  // rerun_keep: for an op whose inputs or storages to rebuild are gone when
  // it is issued, what its re-run rebuilds that a re-run reads, there or at a
  // later op: each storage once per re-run op that reads it (the ops a re-run
  // runs: the producers of what is gone, and of their inputs gone by then,
  // temporaries and storages rebuilt there too).
  OpLists op_inputs, op_outputs, prefetch_at, evict_at, rebuild_at, rerun_keep;
  int64_t persistent_bytes = 0;   // raw bytes resident all step
  int64_t ssd_bytes = 0;          // unique offload-ssd bytes (written once per step)
  int64_t host_region_bytes = 0;  // the offload-host region, padded extents
  int max_device = -1;            // the highest SSD directory index a placement uses

  const StorageInfo& of(TensorId t) const {
    return storages[static_cast<size_t>(index_of[static_cast<size_t>(t)])];
  }
  int IndexOf(TensorId t) const { return index_of[static_cast<size_t>(t)]; }
};

// Where a recompute run for op `at` reads storage `index` (a forward ZeRO-3
// gather's output, gone) from instead of gathering it again: the index of its
// backward regather (StorageInfo::regathered) when that gather was issued
// before `at` and its output lives until `at` or later; -1 otherwise.
inline int RegatheredAt(const StoragePlan& sp, int index, OpId at) {
  const int j = sp.storages[static_cast<size_t>(index)].regathered;
  if (j < 0) return -1;
  const StorageInfo& g = sp.storages[static_cast<size_t>(j)];
  return g.producer != kNoOp && g.producer < at && g.last_use >= at ? j : -1;
}

// Resolves `plan` against `trace`. Also its validity rule: unknown tensors or
// ops, actions on tensors that are not saved / not offloadable / have no
// producer, file names outside the offload directory, conflicting placements on
// one storage and overlapping extents are rejected with the field named
// ("<source>: placements[3].offset: ..."). Does not check the model name or
// fingerprint (ValidatePlan does both).
Result<StoragePlan> ResolvePlan(const Trace& trace, const Plan& plan, const std::string& source);

// The same in two halves, for a search that resolves many plans against one
// trace: ResolveStorages is what no plan changes (the storages, their roles,
// sizes and lifetimes, the per-op lists; itself the plan that keeps every
// storage), resolved once; ResolvePlan(trace, storages, plan) applies a plan's
// placements to a copy of it, with the same checks and messages. `storages`
// must be ResolveStorages(trace)'s (an Internal error where its sizes say not).
Result<StoragePlan> ResolveStorages(const Trace& trace, const std::string& source);
Result<StoragePlan> ResolvePlan(const Trace& trace, const StoragePlan& storages, const Plan& plan,
                                const std::string& source);

// A plan's SSD directory indexes against the directories a run has.
Status CheckDevices(const StoragePlan& storage_plan, int directories, const std::string& source);

// Device memory: how a device with `alignment`-byte allocation granularity
// counts a storage of `bytes` (0 stays 0).
int64_t DeviceBytes(int64_t bytes, int64_t alignment);

// Whether a recompute run of its producer, while op `at` waits for its
// inputs, rebuilds storage `s` too (besides the storage the run is for): it is
// not `resident`, and the plan recomputes it and `at` or a later op reads it,
// or `rerun_reads` ops of the re-run at `at` read it (RerunReads).
inline bool RebuiltAlongside(const StorageInfo& s, bool resident, OpId at, int rerun_reads) {
  if (resident) return false;
  return (s.action == TensorAction::kRecompute && s.last_use >= at) || rerun_reads > 0;
}
// Whether a storage a re-run keeps, with `rerun_left` re-run reads still to
// come, is kept no longer once op `done` has run: its re-run reads are over, or
// the last op whose re-run reads it (StorageInfo::rerun_until) has run. The
// simulator and the executor release it then, unless its own uses go on.
inline bool RerunKeepOver(const StorageInfo& s, int rerun_left, OpId done) {
  return rerun_left == 0 || s.rerun_until <= done;
}
// How many ops of the re-run at op `at` read storage `index` (rerun_keep).
inline int RerunReads(const StoragePlan& sp, OpId at, int index) {
  const std::span<const int> keep = sp.rerun_keep[static_cast<size_t>(at)];
  return static_cast<int>(std::count(keep.begin(), keep.end(), index));
}

// The executor runs every GEMM at its real shape on one device workspace
// instead of on the tensors: [A: m·k][B: k·n][C: m·n · chunk] elements of at
// most 4 bytes (fp32), where chunk is how many output matrices of the batch
// fit in `output_region_bytes` (at least 1, at most the batch; 0: one, as on
// the CPU backend). A fused attention op runs as a batch of GEMMs of side
// kReplayAttentionGemmSide with its FLOPs (ReplayAttentionBatch). The workspace
// is sized for the largest op and reserved after the persistent storages.
// Replays count it in device memory, and so does a prediction for a calibrated
// machine (sim GpuOptions::replay_workspace, replay_output_region_bytes).
inline constexpr int64_t kReplayAttentionGemmSide = 256;
int64_t ReplayAttentionBatch(const Op& op);
int64_t ReplayGemmWorkspaceBytes(int64_t m, int64_t n, int64_t k, int64_t batch,
                                 int64_t output_region_bytes);
int64_t ReplayWorkspaceBytes(const Trace& trace, int64_t output_region_bytes);

// Peaks a plan needs with instantaneous I/O (every write lands at once, every
// read at its prefetch point): a lower bound of what any run needs, checked
// before a replay starts. Rounded with `alignment`.
struct StaticPeaks {
  int64_t activation_bytes = 0;  // peak resident activation storages
  int64_t device_bytes = 0;      // peak total, persistent storages included
};
StaticPeaks ComputeStaticPeaks(const Trace& trace, const StoragePlan& storage_plan,
                               int64_t alignment = 1);

// A stage's whole step without unrolling it (the closed form of
// ComputeStaticPeaks over traces::UnrollStep's trace, for a one-micro-batch
// `trace`): while a micro-batch waits between its forward and its backward pass
// it holds BetweenPasses (the non-persistent storages resident after its
// forward pass ends, its eviction points at the pass end applied, before its
// backward allocates or reads anything). A stage holding k micro-batches at
// once peaks at one micro-batch's peak plus (k − 1) · BetweenPasses, for the
// device and the activation peak alike.
StaticPeaks BetweenPasses(const Trace& trace, const StoragePlan& storage_plan,
                          int64_t alignment = 1);
// Under weight_grads set_to_none with `micro_batches` > 1, micro-batch 0's
// backward allocates every weight gradient and the later passes run with all of
// them resident (LaterPassesHoldGradients); WholeStepPeak says how that peaks.
StaticPeaks WholeStepStaticPeaks(const Trace& trace, const StoragePlan& storage_plan,
                                 int64_t in_flight, int64_t alignment = 1,
                                 int64_t micro_batches = 1);
// One micro-batch's peaks that a whole step's is made of, device or activation
// bytes alike: the simulator's (sim/simulate.h, with I/O timing) and the static
// walk's (WholeStepStaticPeaks) go through the same WholeStepPeak.
struct MicroBatchPeaks {
  int64_t alone = 0;           // its passes by themselves
  int64_t gradients_held = 0;  // with every weight gradient resident from the start
  // The same over its backward and optimizer ops alone (from the first
  // backward op, its eviction points applied, on).
  int64_t backward_gradients_held = 0;
  int64_t between_passes = 0;  // what it holds while it waits between its passes
};
// The peak of a stage holding `in_flight` (k) micro-batches at once of the
// step's `micro_batches` (m; 1F1B: k = min(p − stage, m), GPipe: k = m):
// - `gradients_kept_from_first` false (persistent gradients, or m = 1): a
//   micro-batch's passes beside k − 1 others, alone + (k − 1) · between_passes;
// - true and k < m (1F1B's steady state): a later micro-batch's forward and
//   backward run beside k − 1 others and every gradient, gradients_held +
//   (k − 1) · between_passes;
// - true and k = m (every forward before the first backward): the last forward
//   and micro-batch 0's backward beside k − 1 others without the gradients, or
//   micro-batch 1's backward beside k − 2 with them, whichever is higher.
int64_t WholeStepPeak(const MicroBatchPeaks& p, int64_t in_flight, int64_t micro_batches,
                      bool gradients_kept_from_first);
// A whole step of `micro_batches` runs passes after micro-batch 0's backward has
// allocated the set_to_none weight gradients (the simulator's peak follows it).
bool LaterPassesHoldGradients(const Trace& trace, int64_t micro_batches);

}  // namespace ssdtrain::traces

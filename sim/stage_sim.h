// Simulates one micro-batch of one pipeline stage under a plan: the trace's
// ops run in order on the compute stream; offloaded tensors are copied off the
// device after their producer and read back for backward; recomputed tensors
// are rebuilt by re-running their producers before their first backward use.
//
// The model, step by step (sim/README.md has the long form):
// - Memory, as traces/storage_plan.h defines it (the replay keeps the same
//   rules): storages resident all step are allocated first, then (on a
//   calibrated machine) the executor's GEMM workspace; any other storage (a
//   tensor and its aliases) is allocated when its producer starts and freed
//   when its last consumer ends; every storage is rounded up to the device's
//   allocation granularity.
// - Offload (offload-ssd, offload-host): when the producer ends, a write starts
//   (GDS: one flow over PCIe d2h and the SSD array; bounce: PCIe d2h into pinned
//   memory, then pinned memory to SSD; host: PCIe d2h only). Each direction has
//   at most `max_inflight_tensors` tensors admitted; the rest queue FIFO. The
//   device copy is evicted once the write has landed (on the SSD; for
//   offload-host, in host memory) and every forward consumer has run; with a
//   planned eviction point (Placement::evict_before), when that op is issued,
//   which waits for the write if it has not landed (exposed I/O).
// - Budget (Plan::memory_budget_bytes): an op whose outputs would take the
//   device past it waits while writes in flight will evict something
//   (backpressure); the wait is exposed I/O. With nothing in flight it runs
//   anyway and the peak shows the overrun.
// - Read-back: issued when op `prefetch_before` starts, or on demand by the
//   first consumer that finds the tensor gone; the consumer waits for it, and
//   that wait is exposed I/O. The destination is allocated when the read starts.
// - Forwarding: a tensor still resident when backward asks for it is served
//   from the device (no read) and no longer evicted; if its write has not been
//   admitted yet, the write is dropped and never reaches the SSD.
// - Deduplication: actions apply to storages; a storage saved under several
//   tensor ids (aliases) is written and read once. The root's placement wins,
//   else the lowest listed alias.
// - Recompute: a consumer that needs a dropped tensor first re-runs its
//   producer (recursively for that op's dropped inputs, reading offloaded ones).
//
// Thread-safety: a pure function of its inputs; safe to call concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/caching_allocator.h"
#include "sim/hardware.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/timeline.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

struct StageSimOptions {
  int gpu = 0;                  // GPU slot: picks the storage array (hardware.storage.arrays)
  bool record_timeline = true;  // spans and memory samples in StageResult::timeline
  bool use_trace_measurements = true;  // prefer ops' measured_ns over the cost model
  int64_t time_offset_ns = 0;          // added to every timeline time (pipeline placement)
  // The fractions of the SSD array's read and write rates this micro-batch
  // gets, in (0, 1]: below 1 when other micro-batches in flight on the stage
  // use the drive too (sim/simulate.h); 1 alone.
  double ssd_read_share = 1.0;
  double ssd_write_share = 1.0;
  // Micro-batches the stage holds at once (sim/simulate.h): the plan's budget,
  // which a replay applies to the whole step, leaves this one what the other
  // in_flight − 1 do not hold between their passes (HeldByOtherMicroBatches).
  // Interleaved: chunks held at once, `virtual_stages` of them per micro-batch.
  int64_t in_flight = 1;
  int64_t virtual_stages = 1;
  // The trace's traces::ResolveStorages (not owned; outlives the call): a
  // search simulating many plans of one trace resolves them once; null:
  // resolved here.
  const traces::StoragePlan* storages = nullptr;
  // Record each storage's allocation and free, in order, for the caching
  // allocator's model (StageResult::allocations).
  bool record_allocations = false;
};

struct OpTiming {
  int64_t start_ns = -1;  // -1: never ran
  int64_t end_ns = -1;
};

struct StageResult {
  int64_t step_ns = 0;            // until the last op and the last transfer end
  int64_t compute_end_ns = 0;     // end of the last op
  int64_t forward_end_ns = 0;     // end of the last forward op
  int64_t backward_start_ns = 0;  // start of the first backward op
  // The optimizer phase, the last optimizer_ns of the step: its ops' summed
  // durations; under deferred gradient sync (traces::Header::
  // zero_defer_grad_sync) from the end of the last forward or backward op to
  // the end of the last op, the reduce-scatters the optimizer waits for
  // included. A whole step runs it once.
  int64_t optimizer_ns = 0;
  int64_t optimizer_compute_ns = 0;     // its ops' summed durations
  int64_t optimizer_collective_ns = 0;  // its side-stream collectives' (deferred sync)
  int64_t forward_compute_ns = 0;       // sum of forward op durations
  int64_t compute_busy_ns = 0;          // sum of all op durations, recompute included
  int64_t recompute_ns = 0;
  // The most recompute runs of one op in the micro-batch: 1 wherever a plan
  // recomputes (a re-run keeps what its later ops read, traces/storage_plan.h,
  // "Recompute"); planner_sweep holds it.
  int64_t max_op_reruns = 0;
  // What the offload engine's SSD traffic took from the ops' cores
  // (gpu.io_overhead_us_per_MiB): time before ops start, not in compute_busy_ns.
  int64_t io_overhead_ns = 0;
  int64_t exposed_io_ns = 0;  // compute waiting on reads + I/O after the last op
  // Compute waiting for ZeRO's gathers and reduce-scatters (the collectives on
  // side streams, traces/collective_kind.h), and those streams' busy time.
  int64_t exposed_collective_ns = 0;
  int64_t side_collective_ns = 0;
  // What compute ops lost to the SMs those collectives held beside them
  // (the tiers' collective_sms; sim/op_cost.h, OpTimeBesideNs): in compute_busy_ns.
  int64_t collective_sm_ns = 0;
  int64_t peak_gpu_bytes = 0;
  // The peak had every set_to_none weight gradient been resident from the start:
  // the one-micro-batch peak of a later micro-batch's passes
  // (traces::LaterPassesHoldGradients). Equals peak_gpu_bytes with persistent ones.
  int64_t peak_gpu_bytes_gradients_held = 0;
  // The same from the first backward op on (where between_passes_bytes is
  // taken): traces::MicroBatchPeaks::backward_gradients_held.
  int64_t peak_gpu_bytes_backward_gradients_held = 0;
  int64_t peak_activation_bytes = 0;
  int64_t static_bytes = 0;  // resident all step (weights, grads, optimizer state)
  // StageSimOptions::record_allocations: every allocation (its storage's raw
  // bytes) and free, by storage index, in the order the simulation makes
  // them; the first persistent_allocations are the persistent storages'.
  std::vector<AllocatorEvent> allocations;
  int64_t persistent_allocations = 0;
  // What the micro-batch holds while it waits between its forward and its
  // backward pass: the non-persistent storages resident when its first backward
  // op is issued, after that op's eviction points and before its reads and
  // allocations (traces::BetweenPasses is the same with instantaneous I/O).
  // A stage holding k micro-batches holds k − 1 such sets beside the one running.
  int64_t between_passes_bytes = 0;
  int64_t between_passes_activation_bytes = 0;
  int64_t ssd_bytes_written = 0;
  // By drive of the GPU's array, when it has several (traces/drives.h).
  std::vector<int64_t> ssd_bytes_written_per_drive;
  int64_t ssd_bytes_read = 0;
  int64_t host_bytes_written = 0;  // offload-host traffic
  int64_t host_bytes_read = 0;
  int64_t peak_host_bytes = 0;    // offload-host copies plus bounce staging
  int64_t host_region_bytes = 0;  // the plan's offload-host region (traces::StoragePlan)
  int64_t forwarded_storages = 0;
  int64_t dropped_writes = 0;
  int64_t model_flops = 0;    // FLOPs of the trace's ops, recompute excluded
  std::vector<OpTiming> ops;  // by op id
  // Offloaded storages (by root tensor id) whose write landed: when it did.
  std::map<traces::TensorId, int64_t> write_landed_ns;
  std::map<std::string, int64_t> lane_busy_ns;  // compute, d2h, h2d, ssd_read, ssd_write
  traces::Timeline timeline;
};

Result<StageResult> SimulateStage(const traces::Trace& trace, const traces::Plan& plan,
                                  const HardwareOptions& hw, const StageSimOptions& options = {});

}  // namespace ssdtrain::sim

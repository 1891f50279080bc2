// Replay: runs a trace under a plan on a device (CPU or CUDA) with the offload
// engine's SSD files, and measures it. See exec/README.md ("Runtime").
//
// A step is the stage's whole step: the plan's num_micro_batches micro-batches
// in its schedule's order (traces::UnrollStep, the unrolling the simulator uses
// too), each with its own activations and offload files, sharing the weights,
// the gradients they accumulate into, the engine, staging and memory budget.
// Per step, ops are issued in that order on the compute stream. Each
// offload-ssd storage is copied out (D2H) after its producer and written by the
// engine; once the write lands and every forward consumer has been issued its
// device copy is evicted; it is read and copied back (H2D) at the op its
// placement names (prefetch_before) or before its first backward consumer,
// unless it is still resident (forwarding: see exec/tensor_cache.h).
// Recompute storages are freed after their last forward consumer and
// re-produced by running their producer op again (recursively, for inputs that
// are gone too) before their first backward consumer; one run rebuilds every
// output of the op that is recomputed and still needed, and under ZeRO-3 it
// reads the weights the backward gathered (traces/storage_plan.h, "Recompute").
// Kept storages stay.
// Every storage is freed after its last consumer. Step 0 is a warm-up; the
// reported step time is the median of the others.
//
// Before anything runs (no device, no file): the plan is checked against the
// trace (traces::ValidatePlan: fingerprint, ids, actions), its file names
// against the offload directory (CheckPlanFileNames: no "..", no absolute
// paths, no symlinks), and the plan's planned peak device memory against the
// capacity. Any later failure (I/O, checksum, out of device memory) stops the
// run, and the engine removes its files.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "exec/cache_stats.h"
#include "exec/cufile.h"
#include "exec/device.h"
#include "exec/io_backend.h"
#include "exec/step_sync.h"
#include "traces/collective_kind.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/timeline.h"
#include "traces/trace.h"

namespace ssdtrain::exec {

struct ReplayOptions {
  // This rank's offload directories, one per drive of its drive set
  // (traces/drives.h; each must exist): each tensor is striped over them from
  // its placement's device, at the plan's stripe size.
  std::vector<std::string> dirs;
  BackendChoice backend = BackendChoice::kAuto;    // device backend
  int steps = 3;                                   // measured steps, after one warm-up step
  double ssd_bandwidth_GBps = 0;                   // cap on the SSD path (10^9 B/s); 0: none
  bool verify = false;                             // fill and check patterns (slower)
  int64_t device_memory_bytes = int64_t{4} << 30;  // CPU arena; CUDA: 0 = GPU free memory
  int cpu_compute_threads = 1;                     // Eigen threads (CPU backend)
  bool cpu_pin_threads = true;                     // compute and copy/I/O on separate CPUs
  int cuda_device_index = 0;                       // CUDA: which GPU (CUDA's order)
  int64_t staging_bytes = int64_t{256} << 20;      // pinned host staging for D2H/H2D
  BackendKind io_backend = BackendKind::kAuto;     // io_uring or posix
  // GPUDirect Storage (exec/cufile.h): kAuto takes cuFile on the CUDA backend
  // where the plan priced it (its storage.gds) and `cufile_library` loads and
  // its driver opens; with it the SSD path
  // moves device memory to the files and back (no staging copy, no D2H/H2D
  // copies, no CRC32C: --verify checks the patterns on the device).
  GdsMode gds = GdsMode::kAuto;
  std::string cufile_library = kCuFileLibrary;
  // Engine request size (the stripe), bytes; 0: the plan's stripe_bytes
  // (traces::StripeBytes(plan.storage)), as the simulator predicts by.
  int64_t block_size = 0;
  int queue_depth = 32;  // engine requests in flight per directory
  // Where `dir` refuses O_DIRECT: false: an error naming it; true: buffered
  // I/O (ReplayResult::direct_io says false). OffloadOptions::allow_buffered_io.
  bool allow_buffered_io = false;
  // How many ops the issue thread may run ahead of the compute stream (>= 1).
  // Forwarding and eviction are decided when an op is issued, as SSDTrain's
  // hooks decide when PyTorch issues it; an unbounded lead would issue the
  // whole forward pass before its first write starts, and forward everything.
  int max_ops_ahead = 2;
  // After each op, wait until every queued write has landed (and evict). Slow;
  // makes the memory figures deterministic: evictions then land where
  // planned_peak_* assumes they do.
  bool wait_for_writes = false;
  // Device memory the replay may hold (weights, workspace and everything the
  // plan keeps resident together): when an allocation would pass it, the op
  // waits for writes in flight to land and evict (backpressure, counted as
  // exposed I/O), and fails only when nothing in flight can free memory.
  // -1: the plan's memory_budget_bytes (0 there: no budget); 0: none.
  int64_t memory_budget_bytes = -1;
  // Replay on this device instead of making one (backend, device_memory_bytes
  // and the cpu_* fields are then the device's own). Borrowed; it must hold
  // nothing but its GEMM workspace. Replays one after another on one device
  // skip the first touch of a fresh arena, which on a VM costs seconds of the
  // warm-up step (the CPU arena's pages are zeroed at first touch).
  Device* device = nullptr;
  // One line per step on the caller's terminal; nullptr: silent.
  std::function<void(const std::string&)> progress;
  // Tests: an I/O backend to use instead of io_backend (e.g. a FaultBackend).
  std::function<std::unique_ptr<IoBackend>()> make_io_backend;
  // The ranks of a multi-process run (exec/step_sync.h): sync->size() must be
  // the plan's tp × pp × dp, and this rank's stage (traces/layout.h) the
  // trace's. Each step's weight gradients are summed over the stage's
  // data-parallel group in buckets during the last backward (through host
  // memory); with pp > 1 the send and recv ops move their tensors' bytes
  // between neighbouring stages, and with tp > 1 the collective ops run
  // between the ranks of the tensor-parallel group, and with ep > 1 the MoE
  // all-to-alls between the ranks of the expert-parallel group
  // (exec/replay_expert_parallel.cc), all through pinned host memory, a
  // CRC32C checked on arrival; every rank stops when one fails.
  // Null: a single process (send, recv and collective ops then run as memory
  // passes).
  StepSync* sync = nullptr;
};

// What a rank's send and recv ops moved in one step (payload bytes).
struct PipelineTraffic {
  int64_t messages_sent = 0, bytes_sent = 0;
  int64_t messages_received = 0, bytes_received = 0;
};

// What a rank's collectives (tp > 1; ep > 1: the all-to-alls) moved and took
// in one step: the pieces it sent and received (payload bytes), and per kind
// (indexed by traces::CollectiveKind) how many ran and their wall time, from
// the ops before them done to the result back on the device.
struct CollectiveTraffic {
  int64_t pieces_sent = 0, bytes_sent = 0;
  int64_t pieces_received = 0, bytes_received = 0;
  // Async collectives (traces::AsyncOverlapGemm) exchanged while the ops up
  // to the GEMM beside them ran (exec/README.md, "Asynchronous tp collectives").
  int64_t beside_gemm = 0;
  // ZeRO weight gathers exchanged while the ops before their first reader
  // ran (FSDP's prefetch; the same section).
  int64_t prefetched = 0;
  struct Time {
    int64_t count = 0;
    int64_t ns = 0;
  };
  std::array<Time, traces::kCollectiveKinds.size()> by_kind;
};

// One data-parallel gradient bucket (traces/dp_buckets.h) as a rank
// all-reduced it in a step.
struct BucketRun {
  int64_t bytes = 0;                      // the bytes the all-reduce summed
  int64_t gradients = 0;                  // the weight gradients in it
  int64_t ranks = 0;                      // the ranks it was summed over (exec::SumGroup's)
  traces::OpId after_op = traces::kNoOp;  // the whole step's op after which it went to host memory
  // That op in the single-micro-batch trace, and its micro-batch (the last).
  traces::OpId after_original_op = traces::kNoOp;
  int64_t micro_batch = 0;
  // From the step's start: posted, and first seen complete (at an op's issue,
  // or at the wait before the optimizer).
  int64_t posted_ns = 0, done_ns = 0;
};

struct LaneBusy {
  int64_t compute_ns = 0, d2h_ns = 0, h2d_ns = 0, ssd_write_ns = 0, ssd_read_ns = 0;
  // Keyed by traces::ToString(lane) over traces::kBusyLanes, as step reports are.
  std::map<std::string, int64_t> ByLane() const;
};

struct OpTime {
  traces::OpId op = 0;
  int64_t start_ns = 0;  // from the start of the step
  int64_t end_ns = 0;
  // Its issue waited for I/O (a read, staging, memory held by a write): the
  // compute stream's gap before it counts as exposed I/O.
  bool io_wait = false;
  // The op of the single-micro-batch trace this one repeats, and whose
  // micro-batch it runs (a whole step: traces/whole_step.h).
  traces::OpId original_op = 0;
  int micro_batch = 0;
};

struct ReplayResult {
  std::string backend;     // "cpu" or "cuda"
  std::string device;      // Device::Describe()
  std::string io_backend;  // the engine's backend name
  // How the offload bytes travelled: the CPU backend's files, the bounce
  // buffers (with why not cuFile, where it was wanted), or GPUDirect Storage
  // (exec/cufile.h's ChooseStoragePath).
  std::string storage_path;
  bool gds = false;                    // the SSD path went through cuFile
  int64_t staging_bytes = 0;           // pinned host staging held (0 with cuFile)
  bool direct_io = true;               // false: the SSD path went through the page cache
  int steps = 0;                       // measured steps (warm-up excluded)
  std::vector<int64_t> step_times_ns;  // every step, warm-up first
  traces::StepMetrics metrics;      // step_time_ns (median), peaks, SSD bytes per step, exposed I/O
  int64_t memory_budget_bytes = 0;  // the budget the replay held to; 0: none
  int64_t planned_peak_activation_bytes =
      0;  // evictions landing at once (traces::ComputeStaticPeaks)
  int64_t planned_peak_device_bytes = 0;
  int64_t plan_offloaded_bytes = 0;  // unique offload-ssd bytes per step
  int64_t plan_host_bytes = 0;       // unique offload-host bytes per step (pinned host memory)
  int64_t workspace_bytes = 0;
  CacheStats cache;         // the last step's
  LaneBusy busy;            // the last step's
  std::vector<OpTime> ops;  // the last step's, in the order they ran (the whole step's ops)
  // Every measured step's op times (warm-up excluded), step by step; `ops` is
  // the last entry. Calibration pools them, so that one slow step does not
  // set an op's time.
  std::vector<std::vector<OpTime>> measured_step_ops;
  bool verify = false;
  bool verified = false;        // verify on and every checked tensor matched
  int64_t tensors_checked = 0;  // per step
  // Ranks (ReplayOptions::sync): the weight gradients' all-reduce not hidden
  // behind backward per step, median of the measured steps: from the last
  // backward op's issue to the gradients back on the device (the buckets
  // still to sum and the copies back; with pp > 1 the pipeline's flush).
  int64_t allreduce_ns = 0;
  // Ranks: the last step's gradient buckets, in the order they were posted.
  std::vector<BucketRun> gradient_buckets;
  // What ran: the whole step's micro-batches and schedule (the plan's), and
  // the ranks, tp × pp × dp (1 without ReplayOptions::sync).
  int64_t micro_batches = 1;
  std::string schedule = "1f1b";
  int ranks = 1;
  // Pipeline stages on separate ranks (pp > 1 with ReplayOptions::sync): this
  // rank's stage, and what its send and recv ops moved in the last step.
  int64_t stage = 0;
  PipelineTraffic pipeline;
  // Tensor-parallel ranks (tp > 1 with ReplayOptions::sync): this rank's
  // index in its group, and what its collectives moved in the last step.
  int64_t tp_index = 0;
  // Expert-parallel ranks (ep > 1 with ReplayOptions::sync): this rank's
  // index in its ep group (traces::Layout::ExpertIndexOf).
  int64_t ep_index = 0;
  CollectiveTraffic collectives;
  traces::Timeline timeline;  // the last step's, times from its start
};

// Runs the replay. `plan_source` names the plan file in messages.
Result<ReplayResult> Replay(const traces::Trace& trace, const traces::Plan& plan,
                            const ReplayOptions& options, const std::string& plan_source);

// The run file: traces::ToJson(StepMetrics) fields, with peak_gpu_bytes named
// peak_device_bytes, plus backend, steps, ops, lanes, cache figures, verified.
nlohmann::json ToJson(const ReplayResult& r);

// Built-in plans (keep everything, offload every candidate to the SSD) are
// traces::KeepAllPlan and traces::OffloadAllPlan (traces/uniform_plans.h), the
// same plans as the simulator's "keep" and "offload-ssd" policies.

}  // namespace ssdtrain::exec

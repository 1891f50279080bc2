// The stage simulator's class (sim/stage_sim.h: SimulateStage): one stage's
// ops, offload transfers and memory as events. Its parts live in files named
// for them:
//   stage_sim.cc            storages, memory, issuing and running ops
//   stage_sim_transfers.cc  offload writes and reads over PCIe and the SSD
//   stage_sim_side.cc       ZeRO's collectives on side streams
// Internal to sim.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/engine.h"
#include "sim/fluid.h"
#include "sim/hardware.h"
#include "sim/op_cost.h"
#include "sim/stage_sim.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::sim::detail {

using traces::OpId;
using traces::Phase;
using traces::TensorAction;
using traces::TensorId;
using traces::TensorKind;

inline constexpr double kGiga = 1e9;
// The SSD array serves each direction's requests in the order they were queued
// (a large request is striped over every die, so it has the drive to itself
// rather than a slice of it next to the others), as the offload engine also
// submits them; reads and writes split the drive between them
// (FluidNetwork's queues).
inline constexpr int kSsdReadQueue = 0;
inline constexpr int kSsdWriteQueue = 1;

enum class WriteState { kNone, kQueued, kStaged, kLanded, kDropped };
enum class ReadState { kNone, kMoving, kDone };

struct Storage {
  TensorId root = 0;
  int64_t bytes = 0;
  int64_t memory = 0;  // device bytes: `bytes` rounded to the allocation granularity
  bool persistent = false;
  bool activation = false;
  bool weight_gradient = false;  // set_to_none (traces::StorageRole::kWeightGradient)
  bool allocated_once = false;
  bool saved = false;
  TensorAction action = TensorAction::kKeep;
  int device = 0;  // offload-ssd: the drive of its first stripe (traces/drives.h)
  OpId producer = traces::kNoOp;
  OpId prefetch_before = traces::kNoOp;
  OpId evict_before = traces::kNoOp;  // planned eviction point (traces/storage_plan.h)
  int pending = 0;                    // consumer ops (of any member) not yet run
  int pending_forward = 0;            // forward-phase ones among them
  // Dynamic state.
  bool resident = false;
  bool pinned = false;        // forwarded: stays on the device until its last use
  bool recomputed = false;    // re-materialized by recompute at least once
  bool held = false;          // rebuilt for a recompute that has not started yet
  int rerun_left = 0;         // kept by a re-run: the re-run ops still to read it
  bool evict_due = false;     // its planned eviction point has been reached
  bool side_pending = false;  // written by a side-stream collective still running
  WriteState write = WriteState::kNone;
  ReadState read = ReadState::kNone;
  // A read in flight: from host memory (no SSD part), its data in host memory
  // already, waiting for the running op (StartRead), when it started.
  bool read_from_host = false;
  bool read_host_ready = false;
  bool read_waits_for_op = false;
  int64_t read_start_ns = 0;
  FluidNetwork::FlowId write_flow = -1;
  FluidNetwork::FlowId stage_flow = -1;  // bounce: pinned -> SSD
};

struct WorkItem {
  OpId op = 0;
  bool recompute = false;
  // Recompute: the storage it rebuilds. The op's other outputs the plan
  // recomputes that are gone and still needed are rebuilt with it
  // (traces::RebuiltAlongside); the rest go to scratch buffers freed when it
  // ends, as the replay does (exec/replay_issue.cc, Replayer::Recompute).
  size_t target = 0;
  // Recompute: an op that wrote the target in place after its producer
  // (traces::StorageInfo::RerunOps: after the producer), run after its re-run.
  bool in_place = false;
};

class StageSimulator {
 public:
  StageSimulator(const traces::Trace& trace, const traces::Plan& plan, const HardwareOptions& hw,
                 const StageSimOptions& options)
      : trace_(trace),
        plan_(plan),
        hw_(hw),
        options_(options),
        cost_(hw, trace.header, options.use_trace_measurements),
        net_(engine_),
        alignment_(std::max<int64_t>(1, hw.gpu.allocation_alignment_bytes)),
        workspace_bytes_(hw.gpu.replay_workspace
                             ? traces::DeviceBytes(traces::ReplayWorkspaceBytes(
                                                       trace, hw.gpu.replay_output_region_bytes),
                                                   alignment_)
                             : 0),
        budget_bytes_(plan.memory_budget_bytes) {}

  Result<StageResult> Run();

 private:
  Status BuildStorages();
  void SetUpResources();
  // Issues the next work item (a recompute on the stack first, else the
  // next op) while the compute stream is free and nothing it needs is moving.
  void TryIssue();
  // The storages evicted before op `op_index` (its planned eviction points):
  // true while a write of one has not landed (the op waits; the replay too).
  bool WaitsForEvictions(size_t op_index);
  // The item's inputs: all resident and ready; one being read (fetched on
  // demand here) or a side-stream collective's output not yet ready; one gone,
  // whose producer was pushed for recompute; or the simulation failed.
  enum class InputsState { kReady, kReading, kCollective, kRecomputePushed, kFailed };
  InputsState CheckInputs(const WorkItem& item);
  // Pushes the re-run of storage `sid`'s producer for `item` (held until
  // `item` starts).
  InputsState PushRecompute(const WorkItem& item, size_t sid);
  // Backpressure: the op's outputs would take the device past the plan's
  // budget while writes in flight will land and evict (the replay waits too).
  bool OverBudgetWaits(size_t op_index);
  void StartItem(const WorkItem& item);
  // How long `op` runs from `start`: OpTimeNs at full speed, slower while the
  // side-stream collectives of side_running_ run beside it (their intervals
  // are known: none is issued while a compute op runs).
  int64_t OpDurationNs(const traces::Op& op, int64_t start);
  // Issues the prefetches of every op up to `upto` not yet issued; those of
  // ops after `running` (the op now running, if any) wait for it to end.
  void FirePrefetches(size_t upto, std::optional<size_t> running = std::nullopt);
  // What the micro-batch holds between its passes (StageResult::between_passes_bytes).
  void RecordBetween();
  // True when a write in flight will evict a storage once it lands.
  bool WritesWillFreeMemory();
  void EndItem(const WorkItem& item, int64_t start);
  // An op on a side stream (ZeRO's collectives, the cp ring's steps,
  // traces/collective_kind.h): issued in trace order like any op, its outputs
  // allocated and its inputs' last uses released at its issue, as the static
  // walk counts them (traces/static_peaks.cc), it runs on its group's link
  // (ZeRO's on the data-parallel link, the ring's on the cp link), one such
  // op per link at a time in issue order, while compute goes on; its readers
  // wait for it.
  void StartSideItem(const WorkItem& item);
  void EndSideItem(const WorkItem& item, int64_t start);
  void Allocate(Storage& s);
  void Free(Storage& s);
  // A write of `s` landed on the SSD: its bytes, and each drive's by the stripe
  // rule (traces/drives.h) over the GPU's array.
  void CountSsdWrite(const Storage& s);
  void MaybeRelease(Storage& s);
  void Forward(Storage& s);
  void StartOffload(size_t sid);
  // Reads storage `sid` back. `after_running_op`: fired by the run-ahead for
  // a later op while one runs; its destination buffer is taken, and its
  // host-to-device copy starts, when the running op ends, as in the replay:
  // the replay allocates the buffer when it issues that later op, after the
  // running op's inputs were freed, and orders the copy after the running op
  // on the compute stream (exec/replay_memory.cc, IssueRead). The SSD part
  // starts at once.
  void StartRead(size_t sid, bool after_running_op = false);
  void StartGdsRead(size_t sid);
  void MaybeStartHostToDevice(size_t sid);
  void ReleaseReadsAfterOp();
  void OnReadDone(size_t sid);
  void Sample();
  // The lane's busy interval; with a timeline, its span, named `prefix` + `name`
  // (built only then: a search simulates thousands of steps without one).
  void AddSpan(traces::Lane lane, int64_t start, int64_t end, OpId op, TensorId tensor,
               std::string_view name, std::string_view prefix = {});
  int64_t Now() const { return engine_.Now().ns(); }

  const traces::Trace& trace_;
  const traces::Plan& plan_;
  const HardwareOptions& hw_;
  const StageSimOptions& options_;
  OpCostModel cost_;
  Engine engine_;
  FluidNetwork net_;
  Status error_;

  traces::StoragePlan resolved_;
  int64_t alignment_ = 1;        // the device's allocation granularity
  int64_t workspace_bytes_ = 0;  // the executor's GEMM workspace, when counted
  int64_t budget_bytes_ = 0;     // the plan's budget less what other micro-batches hold; 0: none
  int64_t scratch_bytes_ = 0;    // a running recompute's scratch outputs
  std::vector<size_t> rebuilt_alongside_;  // the storages the running recompute rebuilds
  // What re-runs keep for re-run ops still to read it (Storage::rerun_left),
  // freed after its StorageInfo::rerun_until at the latest.
  std::vector<size_t> rerun_kept_;
  std::vector<int64_t> reruns_;  // recompute runs of each op (StageResult::max_op_reruns)
  // SSD bytes moved since the last op started, whose CPU cost the next op pays
  // (gpu.io_overhead_us_per_MiB).
  int64_t io_bytes_unpaid_ = 0;
  std::vector<Storage> storages_;
  std::vector<size_t> reads_after_op_;  // reads waiting for the running op to end
  // Storages whose write was queued, pruned of the landed and dropped ones when
  // WritesWillFreeMemory looks (it scanned every storage, 40% of a search).
  std::vector<size_t> writes_started_;
  // Per op, resolved_ lists (traces/storage_plan.h) the storages it reads and
  // writes, prefetches and evicts; the simulator reads them there.

  FluidNetwork::ResourceId d2h_ = 0, h2d_ = 0, host_mem_ = 0, ssd_ = 0;
  BytesPerSec d2h_rate_, h2d_rate_, host_rate_, ssd_read_rate_, ssd_write_rate_;
  Time pcie_latency_, ssd_read_latency_, ssd_write_latency_;

  size_t next_op_ = 0;
  size_t prefetched_upto_ = 0;  // ops below this have had their prefetches issued
  std::vector<WorkItem> recompute_stack_;
  bool busy_ = false;
  bool between_recorded_ = false;
  int64_t wait_start_ = -1;
  int64_t collective_wait_start_ = -1;
  int64_t side_free_ns_ = 0;   // when ZeRO's side streams' link is free
  int64_t passes_end_ns_ = 0;  // end of the last forward or backward op
  int64_t cp_free_ns_ = 0;     // when the cp ring's link is free
  // The side-stream collectives issued and not yet over: a compute op beside
  // them runs on the SMs they leave (OpDurationNs).
  struct SideRun {
    int64_t start = 0, end = 0;
    int sms = 0;  // OpCostModel::CollectiveSms
  };
  std::vector<SideRun> side_running_;
  // OpDurationNs's scratch, kept so the event loop allocates nothing per op:
  // the times the SMs held change, and the op's duration by SMs held.
  std::vector<int64_t> side_cuts_;
  std::vector<std::pair<int, int64_t>> beside_ns_;
  int64_t device_bytes_ = 0, activation_bytes_ = 0, host_bytes_ = 0;
  // Set_to_none weight gradients not yet allocated (peak_gpu_bytes_gradients_held).
  int64_t gradients_unallocated_ = 0;
  std::vector<std::pair<int64_t, int64_t>> lane_intervals_[6];
  StageResult result_;
};

}  // namespace ssdtrain::sim::detail

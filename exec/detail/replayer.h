// Replayer: one run's per-step machinery behind exec::Replay (exec/replay.h).
// Replay() sets up (checks, device, engine, staging, cache) and loops over the
// steps; the Replayer runs one step at a time. Its parts live in files named
// for them:
//   replay_issue.cc       the issue path (this thread: ops in trace order)
//   replay_beside.cc      collectives exchanged while later ops run
//   replay_recompute.cc   a backward op's storages read back, regathered or recomputed
//   replay_memory.cc      device memory as held: budget, backpressure, reads
//   replay_io_threads.cc  the submitter, completer and reader threads
//   replay_timeline.cc    the measured step: timeline, exposed I/O, lane busy
// Threads: the issue thread (the caller of RunStep) owns the slots' buffers,
// the memory counters and the issue list; the I/O threads take jobs from the
// queues under mu_, which also guards the slots' read_status and read_done
// and error_ (SSDTRAIN_GUARDED_BY where the analysis can see it: the members,
// not the fields of a Slot).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "exec/detail/annotated_mutex.h"
#include "exec/detail/host_staging.h"
#include "exec/detail/rank_agreement.h"
#include "exec/detail/rank_place.h"
#include "exec/detail/replay_step_state.h"
#include "exec/device.h"
#include "exec/offload_engine.h"
#include "exec/replay.h"
#include "exec/tensor_cache.h"
#include "traces/collective_kind.h"
#include "traces/dp_buckets.h"
#include "traces/storage_plan.h"
#include "traces/timeline.h"
#include "traces/trace.h"

namespace ssdtrain::exec::detail {

using traces::OpId;
using traces::TensorId;

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Verification seed: differs per storage and per step, so a stale buffer from
// an earlier step never passes.
inline uint64_t Seed(TensorId storage, int step) {
  return (static_cast<uint64_t>(step) << 40) ^ static_cast<uint64_t>(storage);
}

class Replayer {
 public:
  // `host_memory` holds the offload-host copies at their StorageInfo::host_offset
  // (null when the plan has none).
  Replayer(const traces::Trace& trace, const ReplayOptions& options, Device& device,
           OffloadEngine& engine, HostStaging& staging, TensorCache& cache,
           const traces::StoragePlan& storage_plan, HostStaging* host_memory,
           RankAgreement& agreement)
      : trace_(trace),
        options_(options),
        device_(device),
        engine_(engine),
        staging_(staging),
        cache_(cache),
        plan_(storage_plan),
        host_memory_(host_memory == nullptr ? nullptr : static_cast<uint8_t*>(host_memory->base())),
        slots_(trace.tensors.size()),
        agreement_(agreement) {}
  // Waits for the device, stops the I/O threads and frees every buffer.
  ~Replayer();
  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  // Allocates the persistent storages and the workspace; starts the I/O threads.
  Status Init();

  int64_t workspace_bytes() const { return workspace_bytes_; }
  // Backpressure (ReplayOptions::memory_budget_bytes, resolved); 0: none.
  void set_budget(int64_t bytes) { budget_bytes_ = bytes; }
  int64_t peak_activation_bytes() const { return activation_peak_; }

  struct StepRecord {
    int64_t time_ns = 0;
    int64_t exposed_io_ns = 0;
    LaneBusy busy;
    std::vector<OpTime> ops;
    traces::Timeline timeline;
    int64_t checked = 0;
    int64_t allreduce_ns = 0;        // the weight gradients' all-reduce not hidden (0: one rank)
    std::vector<BucketRun> buckets;  // the gradient buckets' all-reduces (ranks only)
    PipelineTraffic pipeline;        // this step's send and recv ops (pp > 1)
    CollectiveTraffic collectives;   // this step's collective ops (tp > 1)
  };

  // Pipeline stages on separate ranks: the ranks of the previous and next
  // stage (-1: none; interleaved, they wrap: exec/step_sync.h). Without a
  // call, send and recv ops run as memory passes. Interleaved: `chunk`, each
  // op's model chunk (traces::WholeStep::chunk), which the messages' tags
  // carry, the sending chunk's.
  void set_pipeline(int previous_rank, int next_rank, std::vector<int64_t> chunk = {}) {
    previous_rank_ = previous_rank;
    next_rank_ = next_rank;
    chunk_ = std::move(chunk);
  }

  // This rank's collective groups (tp, ep, ZeRO's shard groups, cp), before
  // Init: a collective op runs between the ranks of its group (a group of one:
  // a memory pass); the verification seeds differ by tp and ep index.
  void set_groups(RankGroups groups) {
    groups_ = std::move(groups);
    seed_salt_ = groups_.SeedSalt();
  }

  // Data-parallel ranks: the stage's gradient buckets (traces/dp_buckets.h,
  // for the whole step's trace), before Init.
  // `ddp` local: no bucket is posted before FinishGradients (the end of the
  // step's backward), as the simulator holds them (traces::BucketsWaitForBackward).
  // The routed experts' buckets are kept only where their group has more than
  // one rank, which is then the dp group (ep 1); a group between (1 < dp / ep
  // < dp) is refused, naming --dp and --ep (exec/replay_gradients.cc).
  Status set_buckets(traces::BucketTable table, traces::DdpImpl ddp);

  // Runs step `step` (0 is the warm-up) and removes its files. A failure is
  // "step N: ..."; the step still completes its bucket all-reduces on this
  // rank, after telling the others (exec/step_sync.h).
  Result<StepRecord> RunStep(int step);

 private:
  // A storage's state in the step, an issued op, a memory sample
  // (exec/detail/replay_step_state.h).
  using Slot = StorageSlot;
  using Issue = IssuedOp;
  using Sample = MemorySample;
  struct WriteJob {
    TensorId storage;
    uint64_t ticket = 0;
    Status started;  // GPUDirect reads: how starting it went (ReadLoop starts them)
  };
  // The SSD path moves device memory itself (GPUDirect Storage, engine_.device_io()):
  // no staging piece, no D2H or H2D copy.
  bool Direct(TensorId s) const { return !Host(s) && engine_.device_io(); }

  Slot& slot(TensorId s) { return slots_[static_cast<size_t>(s)]; }
  const traces::StorageInfo& life(TensorId s) const { return plan_.of(s); }
  bool Host(TensorId s) const { return cache_.ActionOf(s) == traces::TensorAction::kOffloadHost; }
  // An offload-host storage's place in host memory: fixed for the run, so the
  // copies never wait for space and never fragment it.
  StagingPiece HostCopy(TensorId s) const {
    return {host_memory_ + life(s).host_offset, life(s).bytes};
  }
  TensorKey KeyOf(TensorId s) const {
    TensorKey key;
    key.tensor = s;
    const traces::StorageInfo& info = life(s);
    if (info.action == traces::TensorAction::kOffloadSsd) {
      key.file = info.file;
      key.device = info.device;
      key.offset = info.offset;
    }
    return key;
  }

  // Failure (replay_io_threads.cc): the first error wins and stops everyone.
  void Fail(const Status& status) SSDTRAIN_EXCLUDES(mu_);
  Status error() SSDTRAIN_EXCLUDES(mu_);

  // Memory (replay_memory.cc).
  void Account(TensorId s, int64_t sign);
  void Release(TensorId s);
  void DrainEvictions();
  Status Materialize(TensorId s, const traces::Op& op, bool* stalled);
  Status IssueRead(TensorId s, const traces::Op& op, bool* stalled);
  Status AwaitRead(TensorId s);

  // The issue path (replay_issue.cc).
  Status Need(TensorId s, const traces::Op& op, bool* io_dependent);
  Status Recompute(TensorId s, const traces::Op& at, bool* io_dependent);
  static constexpr TensorId kNoStorage = -1;
  // Where a recompute for `at` reads gone storage `s` from instead (ZeRO-3:
  // the backward's regather, traces::RegatheredAt, when resident); kNoTensor: nowhere.
  TensorId Regathered(TensorId s, const traces::Op& at) const;
  DeviceBuffer View(TensorId t);
  // `kernel` false: only the op's two events (a send or recv between ranks),
  // with `between` (when set) run between them instead (a collective).
  // After a re-run of `op` for backward op `at`: each input storage kept for
  // re-runs only has been read once more, and goes after its last.
  void ReadByRerun(const traces::Op& op, const traces::Op& at);
  Status Run(const traces::Op& op, const std::vector<DeviceBuffer>& ins,
             const std::vector<DeviceBuffer>& outs, const std::vector<TensorId>& fill,
             bool recompute, bool io_dependent, bool kernel = true,
             const std::function<Status()>& between = {});
  // One op of the step, as named steps: the run-ahead bound, the planned
  // evictions and prefetches at it, its inputs and outputs made resident
  // (fetched, recomputed, allocated), its kernel, transfer or collective, its
  // new storages' offloads queued, and what it used last released.
  Status IssueOp(const traces::Op& op);
  // IssueOp's steps before its kernel, transfer or collective (PrepareOp) and
  // after it (FinishOp), and what the first hands the second.
  struct Prepared {
    bool io_dependent = false;
    std::vector<TensorId> touched, produced;
  };
  Status PrepareOp(const traces::Op& op, Prepared* p);
  Status FinishOp(const traces::Op& op, Prepared p);
  // One op of the step as RunStepOps takes it: the gradients waited for
  // before the first optimizer op, the op (IssueOp), its gradient buckets.
  Status StepOp(const traces::Op& op);
  // Collectives exchanged while later ops run (replay_beside.cc): an `async`
  // tp collective beside the GEMM it overlaps (traces::AsyncOverlapGemm), a
  // ZeRO weight gather ahead of the ops before its first reader. For each
  // op, the last op issued before its exchange (0: none, it runs in order),
  // and whether that is the GEMM, whose end waits for the exchange.
  struct Beside {
    size_t last = 0;
    bool gemm = false;
  };
  std::vector<Beside> beside_;
  void InitBeside();
  // Such a collective: (beside a GEMM) its compute waited for, the ops after
  // it up to `b.last` issued (StepOp; the GEMM up to its kernel), its
  // messages exchanged while they run, then its end (and the GEMM's).
  Status IssueBeside(const traces::Op& collective, const Beside& b);
  Status WaitForRunAhead();
  Status EvictAndPrefetchAt(const traces::Op& op, bool* io_dependent);
  Status MakeInputsResident(const traces::Op& op, std::vector<TensorId>* touched,
                            bool* io_dependent);
  Status MakeOutputsResident(const traces::Op& op, std::vector<TensorId>* touched,
                             std::vector<TensorId>* produced, bool* io_dependent);
  Status RunIssued(const traces::Op& op, bool io_dependent);
  void ReleaseAfter(const traces::Op& op, std::vector<TensorId> touched);
  Status QueueOffload(TensorId s, const traces::Op& op);
  Status FinishStep();

  // The I/O threads (replay_io_threads.cc).
  void SubmitLoop();
  void CompleteLoop();
  void ReadLoop();

  Result<StepRecord> RunStepOps(int step);

  // Data-parallel ranks (replay_gradients.cc): each gradient bucket copied to
  // host memory after the op that completes it, its all-reduce posted once
  // the copy has landed (checked at every op) and progressed at every later
  // op; all waited for, and the gradients copied back, before the optimizer.
  Status InitGradients();
  void ResetBuckets();
  uint8_t* BucketHost(size_t b);
  Status CopyBucketsOut(const traces::Op& op);
  Status PostBuckets(bool wait);
  Status PostBucket(size_t b);
  Status FinishGradients();
  void CompleteBucketsAfterFailure(const Status& failure);
  Status CopyGradientBack(TensorId g, const uint8_t* host);

  // Pipeline stages on separate ranks (replay_pipeline.cc): each send and
  // recv op of the step has a fixed place in one pinned host region, its
  // payload followed by a trailer (CRC32C, verification seed).
  int64_t SendingChunk(int64_t chunk, bool gradient) const;
  bool pipelined() const { return previous_rank_ >= 0 || next_rank_ >= 0; }
  bool Transfers(const traces::Op& op) const {
    return pipelined() && (op.kind == traces::OpKind::kSend || op.kind == traces::OpKind::kRecv);
  }
  Status InitPipeline();
  Status SendFor(const traces::Op& op, const DeviceBuffer& input);
  Status ReceiveFor(const traces::Op& op, const DeviceBuffer& output);
  // A received storage again from its host copy (the plan recomputes it).
  Status RestoreReceived(TensorId s, const traces::Op& recv);
  // Enqueues a received message's copy into `dst` on the receive stream,
  // after the compute work issued so far (it may still read `dst`'s memory)
  // and before any compute work issued later; blocks on neither.
  Status CopyInReceived(const DeviceBuffer& dst, const uint8_t* host, int64_t bytes);
  Status WaitSends();
  // The verification seed of storage `s` this step: the sender's, for a
  // received storage.
  uint64_t SeedOf(TensorId s) const {
    const auto& r = received_seed_[static_cast<size_t>(s)];
    return r ? *r : Seed(s, step_) ^ seed_salt_;
  }

  // Tensor-parallel ranks (replay_tensor_parallel.cc): each collective op's
  // input, output and messages in one pinned host region, reused op by op.
  static traces::CollectiveKind Kind(const traces::Op& op) {
    return traces::ClassifyCollective(op);
  }
  // The tag of phase `phase` of `op` (0, or the all-reduce's gather 1; ZeRO's
  // list of pairs: 2k and 2k + 1 for pair k).
  static PipelineTag PieceTag(const traces::Op& op, int phase) {
    return {op.micro_batch, op.phase == traces::Phase::kBackward,
            (static_cast<int64_t>(op.id) << 24) + phase, true};
  }
  using PieceCheck = std::function<std::vector<uint8_t>(int64_t)>;
  Status InitTensorParallel();
  Status CollectiveFor(const traces::Op& op, const std::vector<DeviceBuffer>& inputs,
                       const std::vector<DeviceBuffer>& outputs);
  // A gather, scatter or all-reduce's exchange once its inputs are ready (the
  // compute stream synchronized), timed by kind.
  Status ExchangePairs(const traces::Op& op, const std::vector<DeviceBuffer>& inputs,
                       const std::vector<DeviceBuffer>& outputs);
  // One (input, output) pair of a gather, scatter or all-reduce (ZeRO's list
  // several: `pair` of them, its pieces sent in pair order).
  Status CollectivePair(const traces::Op& op, size_t pair, const DeviceBuffer& input,
                        const DeviceBuffer& output);
  // A ring step of context parallelism (replay_ring.cc).
  Status RingStepFor(const traces::Op& op, const std::vector<DeviceBuffer>& inputs,
                     const std::vector<DeviceBuffer>& outputs);
  // Expert-parallel ranks (replay_expert_parallel.cc): an all-to-all op's
  // buffers, the tensors it sends and receives (views of a listed tensor
  // left out: AllToAllMembers), each rank's piece to each peer.
  std::vector<size_t> AllToAllMembers(const std::vector<TensorId>& tensors) const;
  Result<int64_t> AllToAllHostBytes(const traces::Op& op) const;
  Status AllToAllFor(const traces::Op& op, const std::vector<DeviceBuffer>& inputs,
                     const std::vector<DeviceBuffer>& outputs);
  // Under --verify, bytes [lo, hi) of what peer `peer` sends from `tensors`
  // (the members, back to back, each its own pattern).
  std::vector<uint8_t> ExpectedSent(const std::vector<TensorId>& tensors,
                                    const std::vector<size_t>& members, int64_t peer, int64_t lo,
                                    int64_t hi) const;
  Status SendPiece(const traces::Op& op, int phase, int64_t to, const uint8_t* data, int64_t bytes,
                   uint64_t seed);
  Status ReceivePiece(const traces::Op& op, int phase, int64_t from, uint8_t* into, int64_t bytes,
                      uint64_t* seed);
  Status CheckContribution(const traces::Op& op, int64_t from, const uint8_t* p, int64_t bytes,
                           uint64_t seed, uint64_t expected_seed, int64_t offset);
  std::vector<uint8_t> ExpectedSum(const traces::Op& op, uint64_t my_seed, traces::DType dtype,
                                   int64_t offset, int64_t bytes) const;
  Status ReduceScatterPhase(const traces::Op& op, int phase, const uint8_t* in, uint8_t* out,
                            const std::vector<int64_t>& chunks, traces::DType dtype, uint64_t seed,
                            bool check);
  Status AllGatherPhase(const traces::Op& op, int phase, const uint8_t* mine, uint8_t* out,
                        const std::vector<int64_t>& chunks, uint64_t seed,
                        const PieceCheck& expected);

  // The measured step (replay_timeline.cc).
  Status CollectTimeline(int64_t t0, StepRecord& record);

  const traces::Trace& trace_;
  const ReplayOptions& options_;
  Device& device_;
  OffloadEngine& engine_;
  HostStaging& staging_;
  TensorCache& cache_;
  const traces::StoragePlan& plan_;
  uint8_t* const host_memory_;
  std::vector<Slot> slots_;
  // What re-runs keep for re-run ops still to read it (Slot::rerun_left),
  // released after its StorageInfo::rerun_until at the latest.
  std::vector<TensorId> rerun_kept_;
  std::vector<std::unique_ptr<Event>> op_start_, op_end_;
  std::vector<std::pair<std::unique_ptr<Event>, std::unique_ptr<Event>>> recompute_events_;
  size_t recompute_events_used_ = 0;
  std::vector<Issue> issues_;
  std::vector<Sample> samples_;
  int step_ = 0;
  int64_t checked_ = 0;
  int64_t workspace_bytes_ = 0;
  int64_t activation_now_ = 0, activation_peak_ = 0;  // issue thread only
  int64_t budget_bytes_ = 0;                          // issue thread only
  bool staging_stalled_next_ = false;  // an offload waited for staging: the next op's gap is I/O

  RankAgreement& agreement_;
  traces::BucketTable buckets_;
  traces::DdpImpl ddp_ = traces::DdpImpl::kOverlapped;
  std::unique_ptr<HostStaging> gradient_host_;         // the buckets' host copies, back to back
  std::vector<int64_t> bucket_offset_;                 // each bucket's in gradient_host_
  std::vector<std::vector<size_t>> buckets_after_;     // by op id: the buckets it completes
  std::vector<std::unique_ptr<Event>> bucket_copied_;  // per bucket: its copies to host landed
  // This step's buckets, each count a prefix in bucket order: copies
  // enqueued, all-reduces posted, seen complete; and whether all were
  // waited for (or there are none).
  size_t buckets_copied_ = 0, buckets_posted_ = 0, buckets_done_ = 0;
  bool buckets_waited_ = true;
  std::vector<BucketRun> bucket_runs_;  // this step's, absolute times until CollectTimeline
  // The end of backward's issue (FinishGradients) and the gradients back on
  // the device.
  int64_t exposed_begin_ns_ = 0, allreduce_end_ns_ = 0;

  struct Transfer {
    int64_t offset = -1;  // in pipeline_host_; -1: not a send or recv op
    int64_t bytes = 0;    // payload
    PipelineTag tag;
  };
  int previous_rank_ = -1, next_rank_ = -1;
  std::vector<int64_t> chunk_;       // by op: its model chunk (interleaved only; else empty)
  std::vector<Transfer> transfers_;  // by op id
  std::unique_ptr<HostStaging> pipeline_host_;          // the messages, each at its offset
  std::vector<std::optional<uint64_t>> received_seed_;  // by storage, this step
  PipelineTraffic traffic_;                             // this step's
  // CopyInReceived's order: compute so far, then the copy; the copy, then
  // compute from there on (re-recorded for each message).
  std::unique_ptr<Event> compute_before_receive_, received_;

  RankGroups groups_;
  uint64_t seed_salt_ = 0;                        // groups_.SeedSalt()
  std::unique_ptr<HostStaging> collective_host_;  // see InitTensorParallel
  uint8_t* scratch_ = nullptr;                    // the current collective's messages
  CollectiveTraffic collectives_;                 // this step's

  Mutex mu_;    // guards what is marked below, and the slots' read_status and read_done
  CondVar cv_;  // a queue, pending_writes_, error_ or a read changed
  std::deque<WriteJob> writes_ SSDTRAIN_GUARDED_BY(mu_);
  std::deque<WriteJob> landing_ SSDTRAIN_GUARDED_BY(mu_);
  std::deque<WriteJob> reads_ SSDTRAIN_GUARDED_BY(mu_);
  int64_t pending_writes_ SSDTRAIN_GUARDED_BY(mu_) = 0;
  bool stop_ SSDTRAIN_GUARDED_BY(mu_) = false;
  Status error_ SSDTRAIN_GUARDED_BY(mu_);
  std::thread submitter_, completer_, reader_;  // started by Init, joined by the destructor
};

}  // namespace ssdtrain::exec::detail

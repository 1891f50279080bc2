#include "exec/replay.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "exec/detail/cpu_affinity.h"
#include "exec/detail/format_bytes.h"
#include "exec/detail/host_staging.h"
#include "exec/detail/test_points.h"
#include "exec/offload_engine.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec {
namespace {

using traces::OpId;
using traces::TensorId;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Verification seed: differs per storage and per step, so a stale buffer from
// an earlier step never passes.
uint64_t Seed(TensorId storage, int step) {
  return (static_cast<uint64_t>(step) << 40) ^ static_cast<uint64_t>(storage);
}

CacheStats operator-(const CacheStats& a, const CacheStats& b) {
  return {a.writes - b.writes,
          a.bytes_written - b.bytes_written,
          a.writes_dropped - b.writes_dropped,
          a.bytes_write_dropped - b.bytes_write_dropped,
          a.forwarded - b.forwarded,
          a.bytes_forwarded - b.bytes_forwarded,
          a.reads - b.reads,
          a.bytes_read - b.bytes_read,
          a.evictions - b.evictions,
          a.bytes_evicted - b.bytes_evicted,
          a.host_copies - b.host_copies,
          a.bytes_to_host - b.bytes_to_host,
          a.host_restores - b.host_restores,
          a.bytes_from_host - b.bytes_from_host};
}

class Replayer {
 public:
  // `host_memory` holds the offload-host copies at their StorageInfo::host_offset
  // (null when the plan has none).
  Replayer(const traces::Trace& trace, const ReplayOptions& options, Device& device,
           OffloadEngine& engine, detail::HostStaging& staging, TensorCache& cache,
           const traces::StoragePlan& storage_plan, detail::HostStaging* host_memory)
      : trace_(trace),
        options_(options),
        device_(device),
        engine_(engine),
        staging_(staging),
        cache_(cache),
        plan_(storage_plan),
        host_memory_(host_memory == nullptr ? nullptr : static_cast<uint8_t*>(host_memory->base())),
        slots_(trace.tensors.size()) {}

  ~Replayer() {
    // Nothing enqueued may outlive the buffers. A destructor cannot report; a
    // failing stream has already failed the step that used it.
    (void)device_.SynchronizeAll();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread* t : {&submitter_, &completer_, &reader_}) {
      if (t->joinable()) t->join();
    }
    for (Slot& slot : slots_) device_.Free(slot.buffer);
  }

  Status Init() {
    for (size_t i = 0; i < trace_.ops.size(); ++i) {
      SSDTRAIN_ASSIGN_OR_RETURN(auto start, device_.CreateEvent());
      SSDTRAIN_ASSIGN_OR_RETURN(auto end, device_.CreateEvent());
      op_start_.push_back(std::move(start));
      op_end_.push_back(std::move(end));
    }
    // Weights and step inputs live for the whole run.
    for (const traces::StorageInfo& info : plan_.storages) {
      if (!info.persistent() || info.bytes == 0) continue;
      const auto s = static_cast<size_t>(info.root);
      auto buffer = device_.Allocate(info.bytes);
      if (!buffer.ok()) {
        return buffer.status().WithPrefix("weights and inputs (" + trace_.tensors[s].name + ")");
      }
      slots_[s].buffer = *buffer;
      slots_[s].resident = true;
      if (options_.verify) {
        SSDTRAIN_RETURN_IF_ERROR(device_.FillPatternAsync(*buffer, Seed(s, 0), Stream::kCompute));
      }
    }
    SSDTRAIN_ASSIGN_OR_RETURN(workspace_bytes_, device_.ReserveWorkspace(trace_));
    submitter_ = std::thread([this] { SubmitLoop(); });
    completer_ = std::thread([this] { CompleteLoop(); });
    reader_ = std::thread([this] { ReadLoop(); });
    return device_.Synchronize(Stream::kCompute);
  }

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
  };

  Result<StepRecord> RunStep(int step) {
    step_ = step;
    cache_.ResetStep();
    issues_.clear();
    samples_.clear();
    checked_ = 0;
    for (Slot& slot : slots_) slot.ResetStep();
    const int64_t t0 = NowNs();
    for (const traces::Op& op : trace_.ops) {
      Status st = IssueOp(op);
      // An I/O thread's failure is the cause; what the issue thread saw
      // (an aborted staging wait) is its consequence.
      if (!st.ok()) return error().ok() ? st : error();
    }
    SSDTRAIN_RETURN_IF_ERROR(FinishStep());
    const int64_t t1 = NowNs();
    StepRecord record;
    record.time_ns = t1 - t0;
    record.checked = checked_;
    SSDTRAIN_RETURN_IF_ERROR(CollectTimeline(t0, record));
    SSDTRAIN_RETURN_IF_ERROR(engine_.RemoveAll());
    return record;
  }

 private:
  struct Slot {
    DeviceBuffer buffer;
    bool resident = false;
    bool checked = false;
    bool temporary = false;  // resurrected for a recompute only
    // Offload path (events reused across steps).
    std::unique_ptr<Event> d2h_start, d2h_end, h2d_ready, h2d_start, h2d_end;
    detail::StagingPiece staging;
    bool copied_out = false, wrote = false, read_issued = false, read_done = false;
    bool read_consumed = false, copied_in = false;
    Status read_status;
    int64_t write_begin_ns = 0, write_end_ns = 0, read_begin_ns = 0, read_end_ns = 0;
    void ResetStep() {
      checked = false;
      copied_out = wrote = read_issued = read_done = read_consumed = copied_in = false;
      read_status = Status::Ok();
    }
  };
  struct Issue {  // one op on the compute stream
    OpId op;
    Event* start;
    Event* end;
    bool io_dependent;
    bool recompute;
  };
  struct Sample {
    size_t issue;
    int64_t device_bytes, activation_bytes;
  };
  struct WriteJob {
    TensorId storage;
    uint64_t ticket = 0;
  };

  Slot& slot(TensorId s) { return slots_[static_cast<size_t>(s)]; }
  bool Host(TensorId s) const { return cache_.ActionOf(s) == traces::TensorAction::kOffloadHost; }
  // An offload-host storage's place in host memory: fixed for the run, so the
  // copies never wait for space and never fragment it.
  detail::StagingPiece HostCopy(TensorId s) const {
    return {host_memory_ + life(s).host_offset, life(s).bytes};
  }
  const traces::StorageInfo& life(TensorId s) const { return plan_.of(s); }

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

  void Fail(const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.ok()) error_ = status;
    }
    staging_.Abort();
    cv_.notify_all();
  }
  Status error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  // --- memory -------------------------------------------------------------

  void Account(TensorId s, int64_t sign) {
    if (!life(s).activation()) return;
    // Counted as the device holds it (traces/storage_plan.h).
    activation_now_ += sign * traces::DeviceBytes(life(s).bytes, device_.allocation_alignment());
    activation_peak_ = std::max(activation_peak_, activation_now_);
  }

  void Release(TensorId s) {
    Slot& sl = slot(s);
    if (!sl.resident) return;
    device_.Free(sl.buffer);
    sl.buffer = {};
    sl.resident = false;
    Account(s, -1);
  }

  void DrainEvictions() {
    for (TensorId s : cache_.TakeEvictions()) Release(s);
  }

  // Allocates storage `s`, waiting for in-flight writes to land and evict when
  // the device is full. Marks `stalled` when it had to wait.
  Status Materialize(TensorId s, const traces::Op& op, bool* stalled) {
    if (life(s).bytes <= 0) {  // an empty tensor needs no memory
      slot(s).resident = true;
      return Status::Ok();
    }
    while (true) {
      DrainEvictions();
      Result<DeviceBuffer> buffer = Status::ResourceExhausted("");
      const int64_t need = traces::DeviceBytes(life(s).bytes, device_.allocation_alignment());
      if (budget_bytes_ > 0 && device_.used_bytes() + need > budget_bytes_) {
        buffer = Status::ResourceExhausted("the plan's budget of " +
                                           detail::FormatBytes(budget_bytes_) + " holds " +
                                           detail::FormatBytes(device_.used_bytes()) + " already");
      } else {
        buffer = device_.Allocate(life(s).bytes);
      }
      if (buffer.ok()) {
        slot(s).buffer = *buffer;
        slot(s).resident = true;
        Account(s, +1);
        return Status::Ok();
      }
      if (buffer.status().code() != Status::Code::kResourceExhausted) return buffer.status();
      std::unique_lock<std::mutex> lock(mu_);
      if (!error_.ok()) return error_;
      if (pending_writes_ == 0 && !cache_.HasEvictions()) {
        return Status::ResourceExhausted(
            "device memory exhausted at op " + std::to_string(op.id) + " (" + op.name +
            ") allocating tensor " + std::to_string(s) + " (" + trace_.tensor(s).name +
            "): " + buffer.status().message() +
            (budget_bytes_ > 0 ? "; raise the plan's memory_budget_bytes or offload more"
                               : "; raise --device-memory or offload more"));
      }
      *stalled = true;
      cv_.wait(lock, [&] { return cache_.HasEvictions() || pending_writes_ == 0 || !error_.ok(); });
    }
  }

  // --- backward fetches ---------------------------------------------------

  Status IssueRead(TensorId s, const traces::Op& op, bool* stalled) {
    Slot& sl = slot(s);
    if (sl.read_issued) return Status::Ok();
    SSDTRAIN_RETURN_IF_ERROR(Materialize(s, op, stalled));
    for (auto* e : {&sl.h2d_ready, &sl.h2d_start, &sl.h2d_end}) {
      if (!*e) {
        SSDTRAIN_ASSIGN_OR_RETURN(*e, device_.CreateEvent());
      }
    }
    // The H2D copy may reuse memory compute has just freed: order it after.
    SSDTRAIN_RETURN_IF_ERROR(device_.Record(*sl.h2d_ready, Stream::kCompute));
    sl.read_begin_ns = NowNs();
    uint64_t ticket_id = 0;
    if (Host(s)) {
      sl.staging = HostCopy(s);  // the copy back reads it where it stayed
    } else {
      SSDTRAIN_ASSIGN_OR_RETURN(sl.staging, staging_.Acquire(life(s).bytes, stalled));
      auto ticket = engine_.ReadAsync(KeyOf(s), sl.staging.data, life(s).bytes);
      if (!ticket.ok()) {
        staging_.Release(sl.staging);
        return ticket.status();
      }
      ticket_id = ticket->id;
    }
    sl.read_issued = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads_.push_back({s, ticket_id});
    }
    cv_.notify_all();
    return Status::Ok();
  }

  Status AwaitRead(TensorId s) {
    Slot& sl = slot(s);
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return sl.read_done || !error_.ok(); });
    if (!error_.ok()) return error_;
    lock.unlock();
    sl.read_consumed = true;
    SSDTRAIN_RETURN_IF_ERROR(sl.read_status);
    return device_.Wait(Stream::kCompute, *sl.h2d_end);
  }

  // Makes storage `s` resident for backward op `op`.
  Status Need(TensorId s, const traces::Op& op, bool* io_dependent) {
    if (life(s).persistent()) return Status::Ok();
    const BackwardSource source = cache_.ClaimForBackward(s);
    if (source == BackwardSource::kRead) SSDTRAIN_RETURN_IF_ERROR(IssueRead(s, op, io_dependent));
    Slot& sl = slot(s);
    if (sl.read_issued && !sl.read_consumed) {
      *io_dependent = true;
      SSDTRAIN_RETURN_IF_ERROR(AwaitRead(s));
    }
    if (!sl.resident) {
      if (life(s).producer == traces::kNoOp) {
        return Status::Internal("tensor " + std::to_string(s) + " is not resident at op " +
                                std::to_string(op.id));
      }
      SSDTRAIN_RETURN_IF_ERROR(Recompute(s, op, io_dependent));
    }
    return Status::Ok();
  }

  // Re-runs the producer of `s` (and, recursively, of its inputs that are gone).
  Status Recompute(TensorId s, const traces::Op& at, bool* io_dependent) {
    const traces::Op& producer = trace_.op(life(s).producer);
    // Inputs rebuilt only for this producer go as soon as it is issued
    // (traces/storage_plan.h: freed after their last use; the simulator does
    // the same).
    std::vector<TensorId> rebuilt_for_this;
    for (TensorId t : producer.inputs) {
      const TensorId s2 = trace_.StorageOf(t);
      if (slot(s2).resident || life(s2).persistent()) continue;
      const bool temporary = life(s2).last_use < at.id;
      SSDTRAIN_RETURN_IF_ERROR(Need(s2, at, io_dependent));
      if (temporary) rebuilt_for_this.push_back(s2);
    }
    SSDTRAIN_RETURN_IF_ERROR(Materialize(s, at, io_dependent));
    // Other outputs of the producer go to scratch buffers freed right after.
    std::vector<DeviceBuffer> ins, outs, scratch;
    for (TensorId t : producer.inputs) ins.push_back(View(t));
    for (TensorId t : producer.outputs) {
      const TensorId st = trace_.StorageOf(t);
      if (st == s) {
        outs.push_back(View(t));
        continue;
      }
      auto b = device_.Allocate(std::max<int64_t>(trace_.tensor(t).bytes, 1));
      if (!b.ok()) return b.status().WithPrefix("recompute of " + trace_.tensor(s).name);
      scratch.push_back(*b);
      outs.push_back(*b);
    }
    Status st = Run(producer, ins, outs, {s}, /*recompute=*/true, *io_dependent);
    for (DeviceBuffer b : scratch) device_.Free(b);
    for (TensorId s2 : rebuilt_for_this) Release(s2);
    return st;
  }

  DeviceBuffer View(TensorId t) {
    const DeviceBuffer& b = slot(trace_.StorageOf(t)).buffer;
    return DeviceBuffer{b.ptr, std::min(b.bytes, trace_.tensor(t).bytes)};
  }

  // Runs `op` between its start and end events; with --verify, the storages in
  // `fill` get their pattern before the end event, so that copies ordered
  // after the op see it.
  Status Run(const traces::Op& op, const std::vector<DeviceBuffer>& ins,
             const std::vector<DeviceBuffer>& outs, const std::vector<TensorId>& fill,
             bool recompute, bool io_dependent) {
    Event* start = nullptr;
    Event* end = nullptr;
    if (recompute) {
      if (recompute_events_used_ == recompute_events_.size()) {
        SSDTRAIN_ASSIGN_OR_RETURN(auto a, device_.CreateEvent());
        SSDTRAIN_ASSIGN_OR_RETURN(auto b, device_.CreateEvent());
        recompute_events_.emplace_back(std::move(a), std::move(b));
      }
      start = recompute_events_[recompute_events_used_].first.get();
      end = recompute_events_[recompute_events_used_].second.get();
      ++recompute_events_used_;
    } else {
      start = op_start_[static_cast<size_t>(op.id)].get();
      end = op_end_[static_cast<size_t>(op.id)].get();
    }
    traces::DType dtype = traces::DType::kFp16;
    if (!op.outputs.empty()) dtype = trace_.tensor(op.outputs[0]).dtype;
    SSDTRAIN_RETURN_IF_ERROR(device_.Record(*start, Stream::kCompute));
    SSDTRAIN_RETURN_IF_ERROR(device_.RunOpAsync(op, OpBuffers{ins, outs, dtype}));
    if (options_.verify) {
      for (TensorId s : fill) {
        if (!slot(s).buffer.valid()) continue;
        SSDTRAIN_RETURN_IF_ERROR(
            device_.FillPatternAsync(slot(s).buffer, Seed(s, step_), Stream::kCompute));
      }
    }
    SSDTRAIN_RETURN_IF_ERROR(device_.Record(*end, Stream::kCompute));
    samples_.push_back({issues_.size(), device_.used_bytes(), activation_now_});
    issues_.push_back({op.id, start, end, io_dependent, recompute});
    return Status::Ok();
  }

  // --- the issue loop -------------------------------------------------------

  Status IssueOp(const traces::Op& op) {
    SSDTRAIN_RETURN_IF_ERROR(error());
    // Bounded run-ahead: the cache decides at issue time, so issue close to
    // when the op runs (see ReplayOptions::max_ops_ahead).
    if (issues_.size() >= static_cast<size_t>(options_.max_ops_ahead)) {
      SSDTRAIN_RETURN_IF_ERROR(issues_[issues_.size() - options_.max_ops_ahead].end->Synchronize());
    }
    DrainEvictions();
    bool io_dependent = staging_stalled_next_;
    staging_stalled_next_ = false;
    for (TensorId s : cache_.PrefetchesAt(op.id)) {
      if (cache_.ClaimForBackward(s) == BackwardSource::kRead) {
        SSDTRAIN_RETURN_IF_ERROR(IssueRead(s, op, &io_dependent));
      }
    }
    std::vector<TensorId> touched;
    for (TensorId t : op.inputs) {
      const TensorId s = trace_.StorageOf(t);
      touched.push_back(s);
      if (op.phase != traces::Phase::kForward) {
        SSDTRAIN_RETURN_IF_ERROR(Need(s, op, &io_dependent));
        if (options_.verify && !slot(s).checked && !life(s).persistent() &&
            slot(s).buffer.valid()) {
          slot(s).checked = true;
          ++checked_;
          Status ok = device_.CheckPattern(slot(s).buffer, Seed(s, step_), Stream::kCompute);
          if (!ok.ok()) {
            return ok.WithPrefix("verify: tensor " + std::to_string(s) + " (" +
                                 trace_.tensor(s).name + ") read by op " + std::to_string(op.id) +
                                 " (" + op.name + ")");
          }
        }
      } else if (!slot(s).resident && !life(s).persistent()) {
        return Status::Internal("forward op " + std::to_string(op.id) + " (" + op.name +
                                ") reads tensor " + std::to_string(t) + ", which is not resident");
      }
    }
    std::vector<TensorId> produced;
    for (TensorId t : op.outputs) {
      const TensorId s = trace_.StorageOf(t);
      touched.push_back(s);
      if (s == t && !slot(s).resident && !life(s).persistent()) {
        SSDTRAIN_RETURN_IF_ERROR(Materialize(s, op, &io_dependent));
        produced.push_back(s);
      } else if (!slot(s).resident && !life(s).persistent()) {
        SSDTRAIN_RETURN_IF_ERROR(Need(s, op, &io_dependent));
      }
    }
    std::vector<DeviceBuffer> ins, outs;
    for (TensorId t : op.inputs) ins.push_back(View(t));
    for (TensorId t : op.outputs) outs.push_back(View(t));
    std::vector<TensorId> fill;
    for (TensorId t : op.outputs) {
      const TensorId s = trace_.StorageOf(t);
      if (!life(s).persistent() && std::find(fill.begin(), fill.end(), s) == fill.end()) {
        fill.push_back(s);
      }
    }
    SSDTRAIN_RETURN_IF_ERROR(Run(op, ins, outs, fill, /*recompute=*/false, io_dependent));
    for (TensorId s : produced) {
      if (cache_.OnProduced(s) && life(s).bytes > 0) {
        SSDTRAIN_RETURN_IF_ERROR(QueueOffload(s, op));
      }
    }
    if (options_.wait_for_writes) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return pending_writes_ == 0 || !error_.ok(); });
      if (!error_.ok()) return error_;
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (TensorId s : touched) {
      const traces::StorageInfo& l = life(s);
      if (l.persistent()) continue;
      if (l.last_use == op.id) {
        if (!cache_.WritePending(s)) Release(s);
        // else: the write's landing evicts it (the cache says so then).
      } else if (op.phase == traces::Phase::kForward && l.last_forward_use == op.id) {
        const traces::TensorAction action = cache_.ActionOf(s);
        if (action == traces::TensorAction::kOffloadSsd ||
            action == traces::TensorAction::kOffloadHost) {
          if (cache_.OnForwardUsesIssued(s)) Release(s);
        } else if (action == traces::TensorAction::kRecompute) {
          Release(s);
        }
      }
    }
    if (options_.wait_for_writes) DrainEvictions();
    return Status::Ok();
  }

  Status QueueOffload(TensorId s, const traces::Op& op) {
    Slot& sl = slot(s);
    for (auto* e : {&sl.d2h_start, &sl.d2h_end}) {
      if (!*e) {
        SSDTRAIN_ASSIGN_OR_RETURN(*e, device_.CreateEvent());
      }
    }
    if (Host(s)) {
      sl.staging = HostCopy(s);
    } else {
      // Waiting here (staging full of writes the SSD has not taken yet) holds
      // back the next op's issue: its gap is the SSD's, counted as exposed I/O.
      SSDTRAIN_ASSIGN_OR_RETURN(sl.staging,
                                staging_.Acquire(life(s).bytes, &staging_stalled_next_));
    }
    SSDTRAIN_RETURN_IF_ERROR(
        device_.Wait(Stream::kDeviceToHost, *op_end_[static_cast<size_t>(op.id)]));
    SSDTRAIN_RETURN_IF_ERROR(device_.Record(*sl.d2h_start, Stream::kDeviceToHost));
    SSDTRAIN_RETURN_IF_ERROR(device_.CopyToHostAsync(sl.staging.data, sl.buffer, 0, life(s).bytes));
    SSDTRAIN_RETURN_IF_ERROR(device_.Record(*sl.d2h_end, Stream::kDeviceToHost));
    sl.copied_out = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_writes_;
      writes_.push_back({s});
    }
    cv_.notify_all();
    return Status::Ok();
  }

  // --- I/O threads ----------------------------------------------------------

  // Waits for each D2H copy, then starts its write (unless forwarding dropped it).
  void SubmitLoop() {
    while (true) {
      WriteJob job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !writes_.empty(); });
        if (writes_.empty()) return;
        job = writes_.front();
        writes_.pop_front();
      }
      Slot& sl = slot(job.storage);
      Status st = sl.d2h_end->Synchronize();
      if (Host(job.storage)) {
        // offload-host: the copy is the write; it stays in host memory. An
        // eviction joins the cache's list with the decision (tensor_cache.h).
        if (st.ok() && cache_.BeginWrite(job.storage) && cache_.OnWriteLanded(job.storage)) {
          detail::HitTestPoint(detail::TestPoint::kEvictionDecided, job.storage);
        }
        if (!st.ok())
          Fail(st.WithPrefix("copying tensor " + std::to_string(job.storage) + " to host memory"));
        {
          std::lock_guard<std::mutex> lock(mu_);
          --pending_writes_;
        }
        cv_.notify_all();
        continue;
      }
      bool started = false;
      if (st.ok() && cache_.BeginWrite(job.storage)) {
        sl.write_begin_ns = NowNs();
        auto ticket =
            engine_.WriteAsync(KeyOf(job.storage), sl.staging.data, life(job.storage).bytes);
        if (ticket.ok()) {
          started = true;
          job.ticket = ticket->id;
          std::lock_guard<std::mutex> lock(mu_);
          landing_.push_back(job);
        } else {
          st = ticket.status();
        }
      }
      if (started) {
        cv_.notify_all();
        continue;
      }
      staging_.Release(sl.staging);
      if (!st.ok()) Fail(st);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_writes_;
      }
      cv_.notify_all();
    }
  }

  // Waits for writes to land, in order; lands evictions.
  void CompleteLoop() {
    while (true) {
      WriteJob job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !landing_.empty(); });
        if (landing_.empty()) return;
        job = landing_.front();
        landing_.pop_front();
      }
      Slot& sl = slot(job.storage);
      Status st = engine_.Wait(Ticket{job.ticket});
      sl.write_end_ns = NowNs();
      sl.wrote = true;
      staging_.Release(sl.staging);
      if (!st.ok()) Fail(st.WithPrefix("writing tensor " + std::to_string(job.storage)));
      // An eviction joins the cache's list with the decision (tensor_cache.h).
      if (st.ok() && cache_.OnWriteLanded(job.storage)) {
        detail::HitTestPoint(detail::TestPoint::kEvictionDecided, job.storage);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_writes_;
      }
      cv_.notify_all();
    }
  }

  // Waits for reads, copies them to the device, and releases their staging.
  void ReadLoop() {
    while (true) {
      WriteJob job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !reads_.empty(); });
        if (reads_.empty()) return;
        job = reads_.front();
        reads_.pop_front();
      }
      Slot& sl = slot(job.storage);
      const bool host = Host(job.storage);
      Status st = host ? Status::Ok() : engine_.Wait(Ticket{job.ticket});
      sl.read_end_ns = NowNs();
      if (st.ok()) st = device_.Wait(Stream::kHostToDevice, *sl.h2d_ready);
      if (st.ok()) st = device_.Record(*sl.h2d_start, Stream::kHostToDevice);
      if (st.ok()) {
        st = device_.CopyToDeviceAsync(sl.buffer, 0, sl.staging.data, life(job.storage).bytes);
      }
      if (st.ok()) st = device_.Record(*sl.h2d_end, Stream::kHostToDevice);
      if (st.ok()) st = sl.h2d_end->Synchronize();
      if (!host) staging_.Release(sl.staging);
      if (st.ok()) {
        cache_.OnReadLanded(job.storage);
        sl.copied_in = true;
      } else {
        st = st.WithPrefix("reading tensor " + std::to_string(job.storage));
        Fail(st);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        sl.read_status = st;
        sl.read_done = true;
      }
      cv_.notify_all();
    }
  }

  // --- end of step ----------------------------------------------------------

  Status FinishStep() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return pending_writes_ == 0 || !error_.ok(); });
      if (!error_.ok()) return error_;
    }
    SSDTRAIN_RETURN_IF_ERROR(device_.SynchronizeAll());
    DrainEvictions();
    // Storages whose last use came while their write was in flight.
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].resident && !plan_.of(static_cast<TensorId>(s)).persistent()) {
        Release(static_cast<TensorId>(s));
      }
    }
    recompute_events_used_ = 0;
    staging_stalled_next_ = false;
    return error();
  }

  Status CollectTimeline(int64_t t0, StepRecord& record) {
    traces::Timeline& tl = record.timeline;
    std::vector<std::pair<int64_t, int64_t>> lanes[5];
    int64_t prev_end = -1;
    std::vector<int64_t> starts(issues_.size());
    for (size_t i = 0; i < issues_.size(); ++i) {
      const Issue& is = issues_[i];
      SSDTRAIN_ASSIGN_OR_RETURN(int64_t start, is.start->TimeNs());
      SSDTRAIN_ASSIGN_OR_RETURN(int64_t end, is.end->TimeNs());
      start -= t0;
      end -= t0;
      starts[i] = start;
      const traces::Op& op = trace_.op(is.op);
      if (is.io_dependent && prev_end >= 0 && start > prev_end) {
        record.exposed_io_ns += start - prev_end;
      }
      prev_end = std::max(prev_end, end);
      tl.spans.push_back({traces::Lane::kCompute, start, end, op.id, -1, op.micro_batch, op.stage,
                          (is.recompute ? "recompute " : "") + op.name});
      lanes[0].emplace_back(start, end);
      if (!is.recompute) record.ops.push_back({op.id, start, end});
    }
    for (const Sample& s : samples_) {
      tl.memory.push_back({starts[s.issue], s.device_bytes, s.activation_bytes});
    }
    for (size_t s = 0; s < slots_.size(); ++s) {
      Slot& sl = slots_[s];
      const std::string& name = trace_.tensors[s].name;
      const TensorId id = static_cast<TensorId>(s);
      if (sl.copied_out) {
        SSDTRAIN_ASSIGN_OR_RETURN(int64_t a, sl.d2h_start->TimeNs());
        SSDTRAIN_ASSIGN_OR_RETURN(int64_t b, sl.d2h_end->TimeNs());
        tl.spans.push_back(
            {traces::Lane::kDeviceToHost, a - t0, b - t0, traces::kNoOp, id, 0, 0, name});
        lanes[1].emplace_back(a - t0, b - t0);
      }
      if (sl.copied_in) {
        SSDTRAIN_ASSIGN_OR_RETURN(int64_t a, sl.h2d_start->TimeNs());
        SSDTRAIN_ASSIGN_OR_RETURN(int64_t b, sl.h2d_end->TimeNs());
        tl.spans.push_back(
            {traces::Lane::kHostToDevice, a - t0, b - t0, traces::kNoOp, id, 0, 0, name});
        lanes[2].emplace_back(a - t0, b - t0);
      }
      if (sl.wrote) {
        tl.spans.push_back({traces::Lane::kSsdWrite, sl.write_begin_ns - t0, sl.write_end_ns - t0,
                            traces::kNoOp, id, 0, 0, name});
        lanes[3].emplace_back(sl.write_begin_ns - t0, sl.write_end_ns - t0);
      }
      if (sl.read_done && sl.read_status.ok() && !Host(id)) {
        tl.spans.push_back({traces::Lane::kSsdRead, sl.read_begin_ns - t0, sl.read_end_ns - t0,
                            traces::kNoOp, id, 0, 0, name});
        lanes[4].emplace_back(sl.read_begin_ns - t0, sl.read_end_ns - t0);
      }
    }
    record.busy = {traces::BusyTime(lanes[0]), traces::BusyTime(lanes[1]),
                   traces::BusyTime(lanes[2]), traces::BusyTime(lanes[3]),
                   traces::BusyTime(lanes[4])};
    return Status::Ok();
  }

  const traces::Trace& trace_;
  const ReplayOptions& options_;
  Device& device_;
  OffloadEngine& engine_;
  detail::HostStaging& staging_;
  TensorCache& cache_;
  const traces::StoragePlan& plan_;
  uint8_t* const host_memory_;
  std::vector<Slot> slots_;
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

  std::mutex mu_;  // guards everything below, and the read_* fields of slots
  std::condition_variable cv_;
  std::deque<WriteJob> writes_, landing_, reads_;
  int64_t pending_writes_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread submitter_, completer_, reader_;
};

}  // namespace

Result<ReplayResult> Replay(const traces::Trace& trace, const traces::Plan& plan,
                            const ReplayOptions& options, const std::string& plan_source) {
  // Everything that can be refused is refused before a device or a file exists.
  SSDTRAIN_RETURN_IF_ERROR(traces::ValidatePlan(plan, trace, plan_source));
  SSDTRAIN_RETURN_IF_ERROR(CheckPlanFileNames(plan, plan_source));
  for (const traces::Placement& p : plan.placements) {
    if (p.action == traces::TensorAction::kOffloadSsd && !p.file.empty()) {
      SSDTRAIN_RETURN_IF_ERROR(
          CheckOffloadFileName(p.file, options.dir)
              .WithPrefix(plan_source + ": tensor " + std::to_string(p.tensor)));
    }
  }
  if (options.steps < 1) return Status::InvalidArgument("--steps must be at least 1");
  if (options.max_ops_ahead < 1) return Status::InvalidArgument("max_ops_ahead must be at least 1");
  // What the plan means: the one resolution the simulator uses too.
  SSDTRAIN_ASSIGN_OR_RETURN(const traces::StoragePlan storage_plan,
                            traces::ResolvePlan(trace, plan, plan_source));
  SSDTRAIN_RETURN_IF_ERROR(traces::CheckDevices(storage_plan, /*directories=*/1, plan_source));
  traces::StaticPeaks planned = traces::ComputeStaticPeaks(trace, storage_plan);
  if (options.device_memory_bytes > 0 && planned.device_bytes > options.device_memory_bytes) {
    return Status::ResourceExhausted(
        "the plan needs at least " + detail::FormatBytes(planned.device_bytes) +
        " of device memory (" + detail::FormatBytes(planned.activation_bytes) +
        " of it activations), more than the " + detail::FormatBytes(options.device_memory_bytes) +
        " given; raise --device-memory or offload more");
  }

  std::unique_ptr<Device> made_device;
  Device* device = options.device;
  if (device == nullptr) {
    DeviceOptions device_options;
    device_options.capacity_bytes = options.device_memory_bytes;
    device_options.cpu_compute_threads = options.cpu_compute_threads;
    device_options.cpu_pin_threads = options.cpu_pin_threads;
    device_options.cuda_device_index = options.cuda_device_index;
    std::string picked;
    SSDTRAIN_ASSIGN_OR_RETURN(made_device, MakeDevice(options.backend, device_options, &picked));
    device = made_device.get();
    if (options.progress) options.progress("backend " + picked);
  }
  // The GEMM workspace counts too; still no file exists.
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t workspace, device->ReserveWorkspace(trace));
  // A borrowed device must be empty but for the workspace (whose allocation
  // the backend rounds up to its alignment, at most 4 KiB).
  if (const int64_t held = device->used_bytes() - workspace;
      options.device != nullptr && held >= 4096) {
    return Status::InvalidArgument("the device given to the replay still holds " +
                                   detail::FormatBytes(held) + " besides its GEMM workspace");
  }
  device->ResetPeak();
  // Again, as this device rounds its allocations.
  planned = traces::ComputeStaticPeaks(trace, storage_plan, device->allocation_alignment());
  const int64_t budget =
      options.memory_budget_bytes >= 0 ? options.memory_budget_bytes : plan.memory_budget_bytes;
  if (budget > 0 && planned.device_bytes + workspace > budget) {
    return Status::ResourceExhausted(
        plan_source + ": memory_budget_bytes: the plan needs at least " +
        detail::FormatBytes(planned.device_bytes + workspace) + " of device memory (" +
        detail::FormatBytes(planned.activation_bytes) + " of it activations, " +
        detail::FormatBytes(workspace) + " GEMM workspace) even with instant I/O, more than its " +
        detail::FormatBytes(budget) + " budget");
  }
  if (planned.device_bytes + workspace > device->capacity_bytes()) {
    return Status::ResourceExhausted(
        "the plan needs at least " + detail::FormatBytes(planned.device_bytes + workspace) +
        " of device memory (" + detail::FormatBytes(planned.activation_bytes) +
        " of it activations, " + detail::FormatBytes(workspace) +
        " GEMM workspace), more than the " + detail::FormatBytes(device->capacity_bytes()) +
        " given; raise --device-memory or offload more");
  }

  OffloadOptions engine_options;
  engine_options.dirs = {options.dir};
  engine_options.backend = options.io_backend;
  engine_options.block_size = options.block_size;
  engine_options.queue_depth = options.queue_depth;
  engine_options.staging_bytes = 0;  // the replay brings its own pinned staging
  SSDTRAIN_ASSIGN_OR_RETURN(auto staging,
                            detail::HostStaging::Create(*device, options.staging_bytes));
  engine_options.external_staging = {staging->base(), static_cast<size_t>(staging->capacity())};
  engine_options.bandwidth_cap_bytes_per_s = options.ssd_bandwidth_GBps * 1e9;
  std::unique_ptr<OffloadEngine> engine;
  {
    // Threads made while this lives (the engine's I/O thread here, the
    // replayer's submit / complete / read threads below) inherit its mask: on
    // the CPU backend, the CPUs the compute stream does not use. This thread,
    // which issues the ops, stays where it was: it is on the critical path and
    // must not queue behind copies and checksums.
    detail::ScopedThreadAffinity helper_affinity(device->helper_cpus());
    if (options.make_io_backend) {
      SSDTRAIN_ASSIGN_OR_RETURN(engine,
                                OffloadEngine::Create(engine_options, options.make_io_backend()));
    } else {
      SSDTRAIN_ASSIGN_OR_RETURN(engine, OffloadEngine::Create(engine_options));
    }
  }
  TensorCache cache(storage_plan);
  // offload-host copies: one pinned region, each storage at its fixed offset.
  const int64_t host_bytes = storage_plan.host_region_bytes;
  std::unique_ptr<detail::HostStaging> host_memory;
  if (host_bytes > 0) {
    auto made = detail::HostStaging::Create(*device, host_bytes);
    if (!made.ok()) {
      return made.status().WithPrefix("host memory for the plan's offload-host tensors (" +
                                      detail::FormatBytes(host_bytes) + ")");
    }
    host_memory = std::move(*made);
  }

  ReplayResult result;
  result.backend = std::string(device->kind());
  result.device = device->Describe();
  result.io_backend = engine->BackendName();
  result.steps = options.steps;
  result.planned_peak_activation_bytes = planned.activation_bytes;
  result.planned_peak_device_bytes = planned.device_bytes;
  result.plan_offloaded_bytes = storage_plan.ssd_bytes;
  result.plan_host_bytes = 0;
  for (const traces::StorageInfo& info : storage_plan.storages) {
    if (info.action == traces::TensorAction::kOffloadHost) result.plan_host_bytes += info.bytes;
  }
  result.verify = options.verify;

  Replayer replayer(trace, options, *device, *engine, *staging, cache, storage_plan,
                    host_memory.get());
  {
    detail::ScopedThreadAffinity helper_affinity(device->helper_cpus());
    SSDTRAIN_RETURN_IF_ERROR(replayer.Init());
  }
  result.workspace_bytes = replayer.workspace_bytes();
  replayer.set_budget(budget);
  result.memory_budget_bytes = budget;
  std::vector<int64_t> measured, exposed;
  int64_t total_flops = 0;
  for (const traces::Op& op : trace.ops) total_flops += op.flops;
  for (int step = 0; step <= options.steps; ++step) {
    const CacheStats before = cache.stats();
    const OffloadStats io_before = engine->Stats();
    auto record = replayer.RunStep(step);
    if (!record.ok()) return record.status().WithPrefix("step " + std::to_string(step));
    const CacheStats delta = cache.stats() - before;
    const OffloadStats io_after = engine->Stats();
    if (io_after.bytes_written - io_before.bytes_written != delta.bytes_written ||
        io_after.bytes_read - io_before.bytes_read != delta.bytes_read) {
      return Status::Internal("step " + std::to_string(step) + ": the engine moved " +
                              std::to_string(io_after.bytes_written - io_before.bytes_written) +
                              " / " + std::to_string(io_after.bytes_read - io_before.bytes_read) +
                              " bytes, the cache counted " + std::to_string(delta.bytes_written) +
                              " / " + std::to_string(delta.bytes_read));
    }
    result.step_times_ns.push_back(record->time_ns);
    if (step > 0) {
      measured.push_back(record->time_ns);
      exposed.push_back(record->exposed_io_ns);
    }
    result.cache = delta;
    result.busy = record->busy;
    if (step > 0) result.measured_step_ops.push_back(record->ops);
    result.ops = std::move(record->ops);
    result.timeline = std::move(record->timeline);
    result.tensors_checked = record->checked;
    if (options.progress) {
      char line[300];
      const std::string host = delta.bytes_to_host == 0
                                   ? ""
                                   : ", to host " + detail::FormatBytes(delta.bytes_to_host) +
                                         ", back " + detail::FormatBytes(delta.bytes_from_host);
      std::snprintf(line, sizeof(line),
                    "step %d/%d%s: %.3f ms, wrote %s, read %s%s, forwarded %s, exposed I/O %.3f ms",
                    step, options.steps, step == 0 ? " (warm-up)" : "", record->time_ns / 1e6,
                    detail::FormatBytes(delta.bytes_written).c_str(),
                    detail::FormatBytes(delta.bytes_read).c_str(), host.c_str(),
                    detail::FormatBytes(delta.bytes_forwarded).c_str(),
                    record->exposed_io_ns / 1e6);
      options.progress(line);
    }
  }
  auto median = [](std::vector<int64_t> v) {  // of an even count: the mean of the middle two
    if (v.empty()) return int64_t{0};
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 == 1 ? v[h] : (v[h - 1] + v[h]) / 2;
  };
  traces::StepMetrics& m = result.metrics;
  m.step_time_ns = median(measured);
  m.exposed_io_ns = median(exposed);
  const double seconds = static_cast<double>(m.step_time_ns) / 1e9;
  if (seconds > 0) {
    m.tokens_per_s = static_cast<double>(trace.header.micro_batch * trace.header.seq_len) / seconds;
    m.tflops_per_gpu = static_cast<double>(total_flops) / seconds / 1e12;
    // As the simulator defines it (traces::RequiredWriteGBps): the step's
    // writes over its forward compute time.
    int64_t forward_ns = 0;
    for (const OpTime& t : result.ops) {
      if (trace.op(t.op).phase == traces::Phase::kForward) forward_ns += t.end_ns - t.start_ns;
    }
    m.required_ssd_write_GBps = traces::RequiredWriteGBps(result.cache.bytes_written, forward_ns);
  }
  m.peak_gpu_bytes = device->peak_bytes();
  m.peak_activation_bytes = replayer.peak_activation_bytes();
  m.ssd_bytes_written = result.cache.bytes_written;
  m.ssd_bytes_read = result.cache.bytes_read;
  result.verified = options.verify;  // any mismatch returned an error above
  return result;
}

}  // namespace ssdtrain::exec

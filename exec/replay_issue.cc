// Replayer: the issue path: ops in trace order on the compute stream, backward fetches
// claimed, recomputes, offloads queued, storages released after their last use.
// See exec/detail/replayer.h.
#include <algorithm>
#include <string>
#include <vector>

#include "exec/detail/replayer.h"

namespace ssdtrain::exec::detail {

Status Replayer::Init() {
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
  SSDTRAIN_RETURN_IF_ERROR(InitGradients());
  SSDTRAIN_RETURN_IF_ERROR(InitPipeline());
  SSDTRAIN_RETURN_IF_ERROR(InitTensorParallel());
  InitBeside();
  submitter_ = std::thread([this] { SubmitLoop(); });
  completer_ = std::thread([this] { CompleteLoop(); });
  reader_ = std::thread([this] { ReadLoop(); });
  return device_.Synchronize(Stream::kCompute);
}

Result<Replayer::StepRecord> Replayer::RunStep(int step) {
  Result<StepRecord> record = RunStepOps(step);
  if (record.ok()) return record;
  const Status failed = record.status().WithPrefix("step " + std::to_string(step));
  CompleteBucketsAfterFailure(failed);
  return failed;
}

Result<Replayer::StepRecord> Replayer::RunStepOps(int step) {
  step_ = step;
  cache_.ResetStep();
  issues_.clear();
  samples_.clear();
  checked_ = 0;
  traffic_ = {};
  collectives_ = {};
  for (Slot& slot : slots_) slot.ResetStep();
  for (auto& seed : received_seed_) seed.reset();
  ResetBuckets();
  const int64_t t0 = NowNs();
  // Data-parallel ranks sum each gradient bucket as soon as the last
  // micro-batch's backward has produced it, and have them all back before
  // the first optimizer op (or at the end of a step without one).
  // A collective exchanged beside later ops is taken with them
  // (replay_beside.cc).
  for (size_t i = 0; i < trace_.ops.size(); ++i) {
    const traces::Op& op = trace_.ops[i];
    const Beside b = beside_[i];
    const Status st = b.last > 0 ? IssueBeside(op, b) : StepOp(op);
    // An I/O thread's failure is the cause; what the issue thread saw
    // (an aborted staging wait) is its consequence.
    if (!st.ok()) return error().ok() ? st : error();
    if (b.last > 0) i = b.last;
  }
  SSDTRAIN_RETURN_IF_ERROR(FinishGradients());
  SSDTRAIN_RETURN_IF_ERROR(FinishStep());
  const int64_t t1 = NowNs();
  StepRecord record;
  record.time_ns = t1 - t0;
  record.checked = checked_;
  if (allreduce_end_ns_ > 0) record.allreduce_ns = allreduce_end_ns_ - exposed_begin_ns_;
  record.pipeline = traffic_;
  record.collectives = collectives_;
  SSDTRAIN_RETURN_IF_ERROR(CollectTimeline(t0, record));
  SSDTRAIN_RETURN_IF_ERROR(engine_.RemoveAll());
  return record;
}

DeviceBuffer Replayer::View(TensorId t) {
  const DeviceBuffer& b = slot(trace_.StorageOf(t)).buffer;
  return DeviceBuffer{b.ptr, std::min(b.bytes, trace_.tensor(t).bytes)};
}

// Runs `op` between its start and end events; with --verify, the storages in
// `fill` get their pattern before the end event, so that copies ordered
// after the op see it.
Status Replayer::Run(const traces::Op& op, const std::vector<DeviceBuffer>& ins,
                     const std::vector<DeviceBuffer>& outs, const std::vector<TensorId>& fill,
                     bool recompute, bool io_dependent, bool kernel,
                     const std::function<Status()>& between) {
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
  if (kernel) SSDTRAIN_RETURN_IF_ERROR(device_.RunOpAsync(op, OpBuffers{ins, outs, dtype}));
  if (!kernel && between) SSDTRAIN_RETURN_IF_ERROR(between());
  if ((kernel || between) && options_.verify) {
    for (TensorId s : fill) {
      if (!slot(s).buffer.valid()) continue;
      SSDTRAIN_RETURN_IF_ERROR(
          device_.FillPatternAsync(slot(s).buffer, SeedOf(s), Stream::kCompute));
    }
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*end, Stream::kCompute));
  samples_.push_back({issues_.size(), device_.used_bytes(), activation_now_});
  issues_.push_back({op.id, start, end, io_dependent, recompute});
  return Status::Ok();
}

Status Replayer::StepOp(const traces::Op& op) {
  if (op.phase == traces::Phase::kOptimizer) SSDTRAIN_RETURN_IF_ERROR(FinishGradients());
  SSDTRAIN_RETURN_IF_ERROR(IssueOp(op));
  SSDTRAIN_RETURN_IF_ERROR(CopyBucketsOut(op));
  return PostBuckets(/*wait=*/false);
}

Status Replayer::IssueOp(const traces::Op& op) {
  Prepared p;
  SSDTRAIN_RETURN_IF_ERROR(PrepareOp(op, &p));
  SSDTRAIN_RETURN_IF_ERROR(RunIssued(op, p.io_dependent));
  return FinishOp(op, std::move(p));
}

Status Replayer::PrepareOp(const traces::Op& op, Prepared* p) {
  SSDTRAIN_RETURN_IF_ERROR(error());
  SSDTRAIN_RETURN_IF_ERROR(WaitForRunAhead());
  DrainEvictions();
  p->io_dependent = staging_stalled_next_;
  staging_stalled_next_ = false;
  SSDTRAIN_RETURN_IF_ERROR(EvictAndPrefetchAt(op, &p->io_dependent));
  SSDTRAIN_RETURN_IF_ERROR(MakeInputsResident(op, &p->touched, &p->io_dependent));
  return MakeOutputsResident(op, &p->touched, &p->produced, &p->io_dependent);
}

Status Replayer::FinishOp(const traces::Op& op, Prepared p) {
  for (TensorId s : p.produced) {
    if (cache_.OnProduced(s) && life(s).bytes > 0) {
      SSDTRAIN_RETURN_IF_ERROR(QueueOffload(s, op));
    }
  }
  if (options_.wait_for_writes) {
    MutexLock lock(&mu_);
    while (pending_writes_ != 0 && error_.ok()) cv_.Wait(&mu_);
    if (!error_.ok()) return error_;
  }
  ReleaseAfter(op, std::move(p.touched));
  if (options_.wait_for_writes) DrainEvictions();
  return Status::Ok();
}

Status Replayer::WaitForRunAhead() {
  // Bounded run-ahead: the cache decides at issue time, so issue close to
  // when the op runs (see ReplayOptions::max_ops_ahead).
  if (issues_.size() < static_cast<size_t>(options_.max_ops_ahead)) return Status::Ok();
  return issues_[issues_.size() - options_.max_ops_ahead].end->Synchronize();
}

Status Replayer::EvictAndPrefetchAt(const traces::Op& op, bool* io_dependent) {
  // Planned eviction points (traces/storage_plan.h, "Memory"): the storage
  // goes now, and if its write has not landed this op waits for it (exposed
  // I/O, as in the simulator) rather than the step holding more memory.
  for (TensorId s : cache_.EvictionsAt(op.id)) {
    if (cache_.OnEvictionPoint(s)) {
      Release(s);
      continue;
    }
    MutexLock lock(&mu_);
    if (!cache_.WritePending(s)) continue;  // claimed by backward: it stays
    *io_dependent = true;
    while (cache_.WritePending(s) && error_.ok()) cv_.Wait(&mu_);
    if (!error_.ok()) return error_;
    lock.Unlock();
    DrainEvictions();  // the landing decided the eviction
  }
  for (TensorId s : cache_.PrefetchesAt(op.id)) {
    if (cache_.ClaimForBackward(s) == BackwardSource::kRead) {
      SSDTRAIN_RETURN_IF_ERROR(IssueRead(s, op, io_dependent));
    }
  }
  return Status::Ok();
}

Status Replayer::MakeInputsResident(const traces::Op& op, std::vector<TensorId>* touched,
                                    bool* io_dependent) {
  // A checkpointed region's re-run (traces/storage_plan.h, "Recompute"): what
  // the plan rebuilds at this op, in its producers' order, first.
  for (int i : plan_.rebuild_at[static_cast<size_t>(op.id)]) {
    SSDTRAIN_RETURN_IF_ERROR(Need(plan_.storages[static_cast<size_t>(i)].root, op, io_dependent));
  }
  for (TensorId t : op.inputs) {
    const TensorId s = trace_.StorageOf(t);
    touched->push_back(s);
    if (op.phase != traces::Phase::kForward) {
      SSDTRAIN_RETURN_IF_ERROR(Need(s, op, io_dependent));
      if (options_.verify && !slot(s).checked && !life(s).persistent() && slot(s).buffer.valid()) {
        slot(s).checked = true;
        ++checked_;
        Status ok = device_.CheckPattern(slot(s).buffer, SeedOf(s), Stream::kCompute);
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
  // Storages held until this op (Placement::hold_until; an async
  // collective's inputs at the GEMM beside it, traces::AsyncOverlapGemm) go
  // after it.
  for (int i : plan_.op_inputs[static_cast<size_t>(op.id)]) {
    touched->push_back(plan_.storages[static_cast<size_t>(i)].root);
  }
  return Status::Ok();
}

Status Replayer::MakeOutputsResident(const traces::Op& op, std::vector<TensorId>* touched,
                                     std::vector<TensorId>* produced, bool* io_dependent) {
  for (TensorId t : op.outputs) {
    const TensorId s = trace_.StorageOf(t);
    touched->push_back(s);
    if (s == t && !slot(s).resident && !life(s).persistent()) {
      SSDTRAIN_RETURN_IF_ERROR(Materialize(s, op, io_dependent));
      produced->push_back(s);
    } else if (!slot(s).resident && !life(s).persistent()) {
      SSDTRAIN_RETURN_IF_ERROR(Need(s, op, io_dependent));
    }
  }
  return Status::Ok();
}

Status Replayer::RunIssued(const traces::Op& op, bool io_dependent) {
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
  // A recv op between ranks fills its output with the bytes received before
  // the op's events; a send op posts its input's bytes once the op has run.
  const bool transfer = Transfers(op);
  if (transfer && op.kind == traces::OpKind::kRecv) {
    SSDTRAIN_RETURN_IF_ERROR(ReceiveFor(op, outs[0]));
  }
  if (groups_.Exchanges(op)) {  // between the ranks of its tp or ep group
    SSDTRAIN_RETURN_IF_ERROR(Run(op, ins, outs, fill, /*recompute=*/false, io_dependent,
                                 /*kernel=*/false, [&] { return CollectiveFor(op, ins, outs); }));
  } else {
    SSDTRAIN_RETURN_IF_ERROR(Run(op, ins, outs, fill, /*recompute=*/false, io_dependent,
                                 /*kernel=*/!transfer));
  }
  if (transfer && op.kind == traces::OpKind::kSend) SSDTRAIN_RETURN_IF_ERROR(SendFor(op, ins[0]));
  return Status::Ok();
}

void Replayer::ReleaseAfter(const traces::Op& op, std::vector<TensorId> touched) {
  // What a re-run kept for re-runs up to this op and none of them read
  // (traces/storage_plan.h, "Recompute"); a storage still in use goes at its
  // last use.
  std::erase_if(rerun_kept_, [&](TensorId s) {
    Slot& sl = slot(s);
    if (!traces::RerunKeepOver(life(s), sl.rerun_left, op.id)) return false;
    if (sl.rerun_left > 0) {
      sl.rerun_left = 0;
      if (life(s).last_use <= op.id) Release(s);
    }
    return true;
  });
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (TensorId s : touched) {
    const traces::StorageInfo& l = life(s);
    if (l.persistent() || slot(s).rerun_left > 0) continue;  // kept for a later re-run
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
}

Status Replayer::QueueOffload(TensorId s, const traces::Op& op) {
  Slot& sl = slot(s);
  for (auto* e : {&sl.d2h_start, &sl.d2h_end}) {
    if (!*e) {
      SSDTRAIN_ASSIGN_OR_RETURN(*e, device_.CreateEvent());
    }
  }
  if (Host(s)) {
    sl.staging = HostCopy(s);
  } else if (!Direct(s)) {
    // Waiting here (staging full of writes the SSD has not taken yet) holds
    // back the next op's issue: its gap is the SSD's, counted as exposed I/O.
    SSDTRAIN_ASSIGN_OR_RETURN(sl.staging, staging_.Acquire(life(s).bytes, &staging_stalled_next_));
  }
  SSDTRAIN_RETURN_IF_ERROR(
      device_.Wait(Stream::kDeviceToHost, *op_end_[static_cast<size_t>(op.id)]));
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*sl.d2h_start, Stream::kDeviceToHost));
  // GPUDirect: no copy; d2h_end then says when the producer has run, and the
  // write goes from the device buffer itself.
  if (!Direct(s)) {
    SSDTRAIN_RETURN_IF_ERROR(device_.CopyToHostAsync(sl.staging.data, sl.buffer, 0, life(s).bytes,
                                                     Stream::kDeviceToHost));
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*sl.d2h_end, Stream::kDeviceToHost));
  sl.copied_out = true;
  {
    MutexLock lock(&mu_);
    ++pending_writes_;
    writes_.push_back({s, 0, Status::Ok()});
  }
  cv_.NotifyAll();
  return Status::Ok();
}

Status Replayer::FinishStep() {
  SSDTRAIN_RETURN_IF_ERROR(WaitSends());  // the sends' host copies are reused next step
  {
    MutexLock lock(&mu_);
    while (pending_writes_ != 0 && error_.ok()) cv_.Wait(&mu_);
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

}  // namespace ssdtrain::exec::detail

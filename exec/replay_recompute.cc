// Replayer's backward sources (exec/detail/replayer.h): a storage a backward
// op needs is read back, taken from ZeRO-3's backward gather, or rebuilt by
// re-running its producer (traces/storage_plan.h, "Recompute").
#include <algorithm>
#include <string>
#include <vector>

#include "exec/detail/replayer.h"

namespace ssdtrain::exec::detail {

// Makes storage `s` resident for backward op `op`.
Status Replayer::Need(TensorId s, const traces::Op& op, bool* io_dependent) {
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
Status Replayer::Recompute(TensorId s, const traces::Op& at, bool* io_dependent) {
  // The re-run's ops (traces::StorageInfo::RerunOps): the producer, then the
  // ops that wrote `s` in place after it.
  const std::vector<traces::OpId> rerun = life(s).RerunOps();
  if (rerun.empty()) {
    return Status::Internal("recompute of " + trace_.tensor(s).name + ": it has no producer");
  }
  const traces::Op& producer = trace_.op(rerun.front());
  if (Transfers(producer)) {  // received: its host copy stays until the step ends
    SSDTRAIN_RETURN_IF_ERROR(Materialize(s, at, io_dependent));
    return RestoreReceived(s, producer);
  }
  // Inputs rebuilt only for this producer go as soon as it is issued
  // (traces/storage_plan.h: freed after their last use; the simulator does
  // the same), but for those a later op of the re-run reads (rerun_left).
  std::vector<TensorId> rebuilt_for_this;
  for (TensorId t : producer.inputs) {
    const TensorId s2 = trace_.StorageOf(t);
    if (slot(s2).resident || life(s2).persistent()) continue;
    if (Regathered(s2, at) != kNoStorage) continue;  // read from backward's gather
    const bool temporary = life(s2).last_use < at.id;
    SSDTRAIN_RETURN_IF_ERROR(Need(s2, at, io_dependent));
    if (temporary) rebuilt_for_this.push_back(s2);
  }
  SSDTRAIN_RETURN_IF_ERROR(Materialize(s, at, io_dependent));
  // The producer's other outputs the plan recomputes that are gone and still
  // needed, and those a later op of the re-run reads, are rebuilt by this run
  // too (traces::RebuiltAlongside); its other outputs go to scratch buffers
  // freed right after. (All of them allocated before the scratch buffers, as
  // the simulator does.) What a re-run op reads is kept for its readers, of
  // this re-run or a later one (Slot::rerun_left).
  const auto reads = [&](TensorId st) {
    return traces::RerunReads(plan_, at.id, plan_.IndexOf(st));
  };
  std::vector<TensorId> rebuilt = {s};
  for (TensorId t : producer.outputs) {
    const TensorId st = trace_.StorageOf(t);
    if (std::find(rebuilt.begin(), rebuilt.end(), st) != rebuilt.end()) continue;
    if (traces::RebuiltAlongside(life(st), slot(st).resident, at.id, reads(st))) {
      SSDTRAIN_RETURN_IF_ERROR(Materialize(st, at, io_dependent));
      rebuilt.push_back(st);
    }
  }
  for (TensorId st : rebuilt) {
    slot(st).rerun_left = reads(st);
    if (slot(st).rerun_left > 0) rerun_kept_.push_back(st);
  }
  std::vector<DeviceBuffer> ins, outs, scratch;
  for (TensorId t : producer.inputs) {
    const TensorId s2 = trace_.StorageOf(t);
    const TensorId regathered = slot(s2).resident ? kNoStorage : Regathered(s2, at);
    if (regathered == kNoStorage) {
      ins.push_back(View(t));
    } else {
      const DeviceBuffer& b = slot(regathered).buffer;
      ins.push_back(DeviceBuffer{b.ptr, std::min(b.bytes, trace_.tensor(t).bytes)});
    }
  }
  for (TensorId t : producer.outputs) {
    const TensorId st = trace_.StorageOf(t);
    if (std::find(rebuilt.begin(), rebuilt.end(), st) != rebuilt.end()) {
      outs.push_back(View(t));
      continue;
    }
    auto b = device_.Allocate(std::max<int64_t>(trace_.tensor(t).bytes, 1));
    if (!b.ok()) return b.status().WithPrefix("recompute of " + trace_.tensor(s).name);
    scratch.push_back(*b);
    outs.push_back(*b);
  }
  Status st = Status::Ok();
  if (groups_.Exchanges(producer)) {  // the group recomputes it too, in the same order
    st = Run(producer, ins, outs, rebuilt, /*recompute=*/true, *io_dependent, /*kernel=*/false,
             [&] { return CollectiveFor(producer, ins, outs); });
  } else {
    st = Run(producer, ins, outs, rebuilt, /*recompute=*/true, *io_dependent);
  }
  for (DeviceBuffer b : scratch) device_.Free(b);
  ReadByRerun(producer, at);
  // Then the ops that wrote it in place after its producer (a row-parallel
  // all-reduce), as the forward ran them.
  for (size_t k = 1; k < rerun.size() && st.ok(); ++k) {
    const traces::OpId w = rerun[k];
    const traces::Op& writer = trace_.op(w);
    for (TensorId t : writer.inputs) {
      const TensorId s2 = trace_.StorageOf(t);
      if (!slot(s2).resident && !life(s2).persistent()) {
        SSDTRAIN_RETURN_IF_ERROR(Need(s2, at, io_dependent));
      }
    }
    std::vector<DeviceBuffer> win, wout;
    for (TensorId t : writer.inputs) win.push_back(View(t));
    for (TensorId t : writer.outputs) wout.push_back(View(t));
    if (groups_.Exchanges(writer)) {
      st = Run(writer, win, wout, {s}, /*recompute=*/true, *io_dependent, /*kernel=*/false,
               [&] { return CollectiveFor(writer, win, wout); });
    } else {
      st = Run(writer, win, wout, {s}, /*recompute=*/true, *io_dependent);
    }
    ReadByRerun(writer, at);
  }
  for (TensorId s2 : rebuilt_for_this) {
    if (slot(s2).rerun_left == 0) Release(s2);
  }
  return st;
}

// A re-run op has read each of its input storages once: one kept for re-runs
// only goes after the last of them.
void Replayer::ReadByRerun(const traces::Op& op, const traces::Op& at) {
  std::vector<TensorId> read;  // each input storage once: the run reads each once
  for (TensorId t : op.inputs) {
    const TensorId s2 = trace_.StorageOf(t);
    if (std::find(read.begin(), read.end(), s2) == read.end()) read.push_back(s2);
  }
  for (TensorId s2 : read) {
    if (slot(s2).rerun_left > 0 && --slot(s2).rerun_left == 0 && life(s2).last_use < at.id) {
      Release(s2);
    }
  }
}

TensorId Replayer::Regathered(TensorId s, const traces::Op& at) const {
  const int j = traces::RegatheredAt(plan_, plan_.IndexOf(s), at.id);
  if (j < 0) return kNoStorage;
  const TensorId root = plan_.storages[static_cast<size_t>(j)].root;
  return slots_[static_cast<size_t>(root)].resident ? root : kNoStorage;
}

}  // namespace ssdtrain::exec::detail

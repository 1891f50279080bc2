// StageSimulator: what an op waits for before it can start (CheckInputs):
// its inputs resident, their reads landed and their side-stream collectives
// done, or, where an input is gone, the re-run that rebuilds it pushed
// (PushRecompute: traces::StorageInfo::RerunOps, the producer, then the ops
// that wrote it in place). See sim/detail/stage_simulator.h.
#include <string>
#include <vector>

#include "sim/detail/stage_simulator.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim::detail {

StageSimulator::InputsState StageSimulator::CheckInputs(const WorkItem& item) {
  const size_t op_index = static_cast<size_t>(item.op);
  bool reading = false;
  bool collective = false;
  if (!item.recompute) {
    // A checkpointed region's re-run (traces/storage_plan.h, "Recompute"):
    // what the plan rebuilds at this op, in its producers' order, first.
    for (size_t sid : resolved_.rebuild_at[op_index]) {
      if (!storages_[sid].resident) return PushRecompute(item, sid);
    }
  }
  for (size_t sid : resolved_.op_inputs[op_index]) {
    Storage& s = storages_[sid];
    if (s.resident) {
      if (s.side_pending) {
        collective = true;
      } else if (s.read == ReadState::kMoving) {
        reading = true;
      } else if (trace_.op(item.op).phase != Phase::kForward &&
                 (s.action == TensorAction::kOffloadSsd ||
                  s.action == TensorAction::kOffloadHost) &&
                 s.read == ReadState::kNone) {
        Forward(s);
      }
      continue;
    }
    if ((s.action == TensorAction::kOffloadSsd || s.action == TensorAction::kOffloadHost) &&
        s.write != WriteState::kNone && s.write != WriteState::kDropped) {
      StartRead(sid);  // on demand
      reading = true;
      continue;
    }
    if (item.recompute) {  // a gathered weight: the backward's regather serves the re-run
      const int j = traces::RegatheredAt(resolved_, static_cast<int>(sid),
                                         static_cast<traces::OpId>(next_op_));
      if (j >= 0 && storages_[static_cast<size_t>(j)].resident) {
        if (storages_[static_cast<size_t>(j)].side_pending) collective = true;
        continue;
      }
    }
    if (s.producer == traces::kNoOp) {
      error_ = Status::Internal("op " + std::to_string(item.op) + " needs tensor " +
                                std::to_string(s.root) + ", which is gone and has no producer");
      return InputsState::kFailed;
    }
    return PushRecompute(item, sid);
  }
  if (reading) return InputsState::kReading;
  return collective ? InputsState::kCollective : InputsState::kReady;
}

StageSimulator::InputsState StageSimulator::PushRecompute(const WorkItem& item, size_t sid) {
  if (recompute_stack_.size() > trace_.ops.size()) {
    error_ =
        Status::Internal("recompute chain does not terminate at op " + std::to_string(item.op));
    return InputsState::kFailed;
  }
  Storage& s = storages_[sid];
  s.held = true;
  // The re-run's ops in its order from the top: the producer first, then the
  // ops that wrote it in place.
  const std::vector<traces::OpId> ops = resolved_.storages[sid].RerunOps();
  for (size_t k = ops.size(); k-- > 0;) {
    recompute_stack_.push_back(WorkItem{ops[k], true, sid, /*in_place=*/k > 0});
  }
  return InputsState::kRecomputePushed;
}

}  // namespace ssdtrain::sim::detail

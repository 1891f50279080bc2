// StageSimulator's device memory (sim/detail/stage_simulator.h): the
// stage's storages built from the trace and its plan, their allocation and
// release (a landed offload evicted, a recomputed one dropped, a storage
// still on the device forwarded to backward), and the peaks sampled at each
// change. The work it issues is stage_sim.cc's.
#include <algorithm>

#include "sim/detail/stage_simulator.h"
#include "sim/simulate.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim::detail {

Status StageSimulator::BuildStorages() {
  SSDTRAIN_ASSIGN_OR_RETURN(
      resolved_, options_.storages ? traces::ResolvePlan(trace_, *options_.storages, plan_, "plan")
                                   : traces::ResolvePlan(trace_, plan_, "plan"));
  const traces::StoragePlan& sp = resolved_;
  storages_.resize(sp.storages.size());
  for (size_t i = 0; i < sp.storages.size(); ++i) {
    const traces::StorageInfo& info = sp.storages[i];
    Storage& s = storages_[i];
    s.root = info.root;
    s.bytes = info.bytes;
    s.memory = traces::DeviceBytes(info.bytes, alignment_);
    s.persistent = info.persistent();
    s.activation = info.activation();
    s.weight_gradient = info.role == traces::StorageRole::kWeightGradient;
    if (s.weight_gradient) gradients_unallocated_ += s.memory;
    s.saved = info.saved;
    s.action = info.action;
    s.device = info.device;
    s.producer = info.producer;
    s.prefetch_before = info.prefetch_before;
    s.evict_before = info.evict_before;
  }
  for (const traces::Op& op : trace_.ops) {
    for (size_t s : resolved_.op_inputs[static_cast<size_t>(op.id)]) {
      ++storages_[s].pending;
      if (op.phase == Phase::kForward) ++storages_[s].pending_forward;
    }
  }
  for (const Storage& s : storages_) {
    if (s.persistent) result_.static_bytes += s.memory;
  }
  if (workspace_bytes_ > 0) result_.static_bytes += workspace_bytes_;
  result_.host_region_bytes = sp.host_region_bytes;
  if (budget_bytes_ > 0) {
    budget_bytes_ = std::max<int64_t>(
        1, budget_bytes_ - HeldByOtherMicroBatches(trace_, sp, alignment_, options_.in_flight,
                                                   options_.virtual_stages));
  }
  return Status::Ok();
}

void StageSimulator::Sample() {
  result_.peak_gpu_bytes = std::max(result_.peak_gpu_bytes, device_bytes_);
  result_.peak_gpu_bytes_gradients_held =
      std::max(result_.peak_gpu_bytes_gradients_held, device_bytes_ + gradients_unallocated_);
  if (between_recorded_) {
    result_.peak_gpu_bytes_backward_gradients_held = std::max(
        result_.peak_gpu_bytes_backward_gradients_held, device_bytes_ + gradients_unallocated_);
  }
  result_.peak_activation_bytes = std::max(result_.peak_activation_bytes, activation_bytes_);
  result_.peak_host_bytes = std::max(result_.peak_host_bytes, host_bytes_);
  if (!options_.record_timeline) return;
  auto& mem = result_.timeline.memory;
  const int64_t t = Now() + options_.time_offset_ns;
  if (!mem.empty() && mem.back().time_ns == t) {
    mem.back().device_bytes = device_bytes_;
    mem.back().activation_bytes = activation_bytes_;
  } else {
    mem.push_back(traces::CounterSample{t, device_bytes_, activation_bytes_});
  }
}

void StageSimulator::Allocate(Storage& s) {
  if (s.resident) return;
  s.resident = true;
  device_bytes_ += s.memory;
  if (s.weight_gradient && !s.allocated_once) gradients_unallocated_ -= s.memory;
  s.allocated_once = true;
  if (s.activation) activation_bytes_ += s.memory;
  if (options_.record_allocations && s.bytes > 0) {
    result_.allocations.push_back(AllocatorEvent{&s - storages_.data(), s.bytes});
  }
  Sample();
}

void StageSimulator::Free(Storage& s) {
  if (!s.resident) return;
  s.resident = false;
  if (s.pending == 0) s.read = ReadState::kNone;  // a later recompute may read it again
  device_bytes_ -= s.memory;
  if (s.activation) activation_bytes_ -= s.memory;
  if (options_.record_allocations && s.bytes > 0) {
    result_.allocations.push_back(AllocatorEvent{&s - storages_.data(), 0});
  }
  Sample();
}

void StageSimulator::MaybeRelease(Storage& s) {
  if (!s.resident || s.persistent || s.held || s.rerun_left > 0) return;
  if (s.pending == 0) {
    if (s.write == WriteState::kQueued && net_.Cancel(s.write_flow)) {
      s.write = WriteState::kDropped;
      ++result_.dropped_writes;
    }
    Free(s);
    return;
  }
  if (s.pinned || s.pending_forward > 0) return;
  const bool offloaded =
      s.action == TensorAction::kOffloadSsd || s.action == TensorAction::kOffloadHost;
  if (offloaded && s.write == WriteState::kLanded && s.read == ReadState::kNone &&
      (s.evict_before == traces::kNoOp || s.evict_due)) {
    Free(s);  // evicted: the write has landed (traces/storage_plan.h, "Memory")
  } else if (s.action == TensorAction::kRecompute && !s.recomputed) {
    Free(s);  // dropped: rebuilt before its first backward use
  }
}

// Backward asks for a storage that is still on the device: serve it from there.
void StageSimulator::Forward(Storage& s) {
  if (s.pinned) return;
  s.pinned = true;
  ++result_.forwarded_storages;
  if (s.write == WriteState::kQueued && net_.Cancel(s.write_flow)) {
    s.write = WriteState::kDropped;
    ++result_.dropped_writes;
  }
  if (s.write == WriteState::kStaged && s.stage_flow >= 0 && net_.Cancel(s.stage_flow)) {
    s.write = WriteState::kDropped;
    ++result_.dropped_writes;
    host_bytes_ -= s.bytes;
    Sample();
  }
}

bool StageSimulator::WritesWillFreeMemory() {
  // Only a write in flight can free memory; the others leave the list.
  size_t kept = 0;
  bool frees = false;
  for (size_t sid : writes_started_) {
    const Storage& s = storages_[sid];
    if (s.write != WriteState::kQueued && s.write != WriteState::kStaged) continue;
    writes_started_[kept++] = sid;
    frees = frees || (s.resident && !s.pinned && !s.held && s.pending_forward == 0 &&
                      s.read == ReadState::kNone);
  }
  writes_started_.resize(kept);
  return frees;
}

}  // namespace ssdtrain::sim::detail

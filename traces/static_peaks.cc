// The static peaks of a resolved plan (traces/storage_plan.h): a walk over
// the trace's ops with instantaneous I/O.
#include <algorithm>
#include <vector>

#include "traces/storage_plan.h"

namespace ssdtrain::traces {

namespace {

// The static walk (instantaneous I/O) over a trace's ops, in issue order.
class StaticWalk {
 public:
  // `gradients_held`: the set_to_none weight gradients are resident from the
  // start (a later micro-batch's passes: micro-batch 0's backward made them).
  StaticWalk(const StoragePlan& sp, int64_t alignment, bool gradients_held = false)
      : sp_(sp), alignment_(alignment), resident_(sp.storages.size(), false) {
    for (const StorageInfo& s : sp.storages) {
      if (s.persistent()) total_ += DeviceBytes(s.bytes, alignment_);
    }
    persistent_ = total_;
    for (size_t i = 0; i < sp.storages.size(); ++i) {
      if (gradients_held && sp.storages[i].role == StorageRole::kWeightGradient) {
        Add(static_cast<int>(i));
      }
    }
    peaks_.device_bytes = total_;
  }
  // Evictions at the op's planned points (its writes have landed).
  void Evict(const Op& op) {
    for (int i : sp_.evict_at[static_cast<size_t>(op.id)]) Remove(i);
  }
  // The rest of the op: its reads, allocations, the peak, then its frees.
  void Run(const Op& op) {
    const auto id = static_cast<size_t>(op.id);
    for (int i : sp_.prefetch_at[id]) Add(i);
    for (int i : sp_.rebuild_at[id]) Add(i);  // a checkpointed region's re-run
    touched_.assign(sp_.op_inputs[id].begin(), sp_.op_inputs[id].end());
    for (int i : sp_.op_outputs[id]) {
      if (std::find(touched_.begin(), touched_.end(), i) == touched_.end()) touched_.push_back(i);
    }
    for (int i : touched_) {
      if (!sp_.storages[static_cast<size_t>(i)].persistent()) Add(i);
    }
    peaks_.activation_bytes = std::max(peaks_.activation_bytes, activation_);
    peaks_.device_bytes = std::max(peaks_.device_bytes, total_);
    for (int i : touched_) {
      const StorageInfo& s = sp_.storages[static_cast<size_t>(i)];
      if (s.persistent()) continue;
      if (s.last_use == op.id) {
        Remove(i);
      } else if (op.phase == Phase::kForward && s.last_forward_use == op.id &&
                 ((s.offloaded() && s.evict_before == kNoOp) ||
                  s.action == TensorAction::kRecompute)) {
        Remove(i);  // written and evicted at once / dropped until recomputed
      }
    }
  }
  const StaticPeaks& peaks() const { return peaks_; }
  // The peaks from here on only.
  void RestartPeaks() { peaks_ = StaticPeaks{activation_, total_}; }
  // What is resident now beyond the persistent storages.
  StaticPeaks Now() const { return StaticPeaks{activation_, total_ - persistent_}; }

 private:
  void Add(int i) {
    if (resident_[static_cast<size_t>(i)]) return;
    resident_[static_cast<size_t>(i)] = true;
    const StorageInfo& s = sp_.storages[static_cast<size_t>(i)];
    total_ += DeviceBytes(s.bytes, alignment_);
    if (s.activation()) activation_ += DeviceBytes(s.bytes, alignment_);
  }
  void Remove(int i) {
    if (!resident_[static_cast<size_t>(i)]) return;
    resident_[static_cast<size_t>(i)] = false;
    const StorageInfo& s = sp_.storages[static_cast<size_t>(i)];
    total_ -= DeviceBytes(s.bytes, alignment_);
    if (s.activation()) activation_ -= DeviceBytes(s.bytes, alignment_);
  }

  const StoragePlan& sp_;
  const int64_t alignment_;
  std::vector<bool> resident_;
  std::vector<int> touched_;
  int64_t activation_ = 0, total_ = 0, persistent_ = 0;
  StaticPeaks peaks_;
};

// `backward`: the peaks from the first backward op (its evictions applied) on.
StaticPeaks Walk(const Trace& trace, const StoragePlan& sp, int64_t alignment, bool gradients_held,
                 bool backward = false) {
  StaticWalk walk(sp, alignment, gradients_held);
  bool forward = true;
  for (const Op& op : trace.ops) {
    walk.Evict(op);
    if (backward && forward && op.phase != Phase::kForward) {
      forward = false;
      walk.RestartPeaks();
    }
    walk.Run(op);
  }
  return walk.peaks();
}

}  // namespace

bool LaterPassesHoldGradients(const Trace& trace, int64_t micro_batches) {
  return micro_batches > 1 && GradientsSetToNone(trace);
}

StaticPeaks ComputeStaticPeaks(const Trace& trace, const StoragePlan& sp, int64_t alignment) {
  return Walk(trace, sp, alignment, /*gradients_held=*/false);
}

StaticPeaks BetweenPasses(const Trace& trace, const StoragePlan& sp, int64_t alignment) {
  StaticWalk walk(sp, alignment);
  for (const Op& op : trace.ops) {
    walk.Evict(op);
    if (op.phase != Phase::kForward) return walk.Now();
    walk.Run(op);
  }
  return walk.Now();
}

int64_t WholeStepPeak(const MicroBatchPeaks& p, int64_t in_flight, int64_t micro_batches,
                      bool gradients_kept_from_first) {
  const int64_t k = std::max<int64_t>(1, in_flight);
  if (!gradients_kept_from_first) return p.alone + (k - 1) * p.between_passes;
  if (k < micro_batches) return p.gradients_held + (k - 1) * p.between_passes;
  return std::max(p.alone + (k - 1) * p.between_passes,
                  p.backward_gradients_held + std::max<int64_t>(0, k - 2) * p.between_passes);
}

StaticPeaks WholeStepStaticPeaks(const Trace& trace, const StoragePlan& sp, int64_t in_flight,
                                 int64_t alignment, int64_t micro_batches) {
  const bool held = LaterPassesHoldGradients(trace, micro_batches);
  const StaticPeaks alone = Walk(trace, sp, alignment, false);
  const StaticPeaks with = held ? Walk(trace, sp, alignment, true) : alone;
  const StaticPeaks backward = held ? Walk(trace, sp, alignment, true, true) : alone;
  const StaticPeaks between = BetweenPasses(trace, sp, alignment);
  auto whole = [&](int64_t StaticPeaks::*field) {
    return WholeStepPeak({alone.*field, with.*field, backward.*field, between.*field}, in_flight,
                         micro_batches, held);
  };
  return StaticPeaks{whole(&StaticPeaks::activation_bytes), whole(&StaticPeaks::device_bytes)};
}

}  // namespace ssdtrain::traces

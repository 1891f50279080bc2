// Per-storage lifetimes of a trace under a plan, in issue order: who produces
// each storage, its first and last uses, and which uses are forward ones. The
// replay frees and evicts by these; PlannedPeaks replays them without a device
// (evictions land at once, reads at their prefetch point) to say how much
// device memory a plan needs before anything runs.
#pragma once

#include <cstdint>
#include <vector>

#include "traces/plan.h"
#include "traces/trace.h"

namespace ssdtrain::exec::detail {

struct StorageLife {
  bool is_root = false;     // tensors[id] is its own storage
  bool persistent = false;  // no producer: a weight or step input, alive all run
  bool activation = false;  // TensorKind::kActivation
  int64_t bytes = 0;
  traces::OpId producer = traces::kNoOp;
  traces::OpId last_use = traces::kNoOp;          // last op touching it (producer included)
  traces::OpId last_forward_use = traces::kNoOp;  // last forward-phase op touching it
  traces::OpId first_backward_use = traces::kNoOp;
};

// Indexed by tensor id; only root entries (is_root) are meaningful.
std::vector<StorageLife> ComputeLifetimes(const traces::Trace& trace);

struct PlannedPeaks {
  int64_t activation_bytes = 0;  // peak resident activation storages
  int64_t device_bytes = 0;      // that moment's total, persistent storages included
  int64_t offloaded_bytes = 0;   // unique offload-ssd storage bytes (written once per step)
  int64_t host_bytes = 0;        // unique offload-host storage bytes (held in host memory)
};
PlannedPeaks ComputePlannedPeaks(const traces::Trace& trace, const traces::Plan& plan,
                                 const std::vector<StorageLife>& lives);

}  // namespace ssdtrain::exec::detail

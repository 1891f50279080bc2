// Thread placement for the CPU backend. On a small machine the compute stream
// (Eigen) and the copy / I/O threads compete for cores; left to the scheduler,
// a copy thread lands on the compute core often enough to stretch every GEMM
// (the tiny GPT's offload replay measured 15-20% longer GEMMs on 2 vCPUs). A
// GPU's copies run on DMA engines, not on the SMs, so the analogue keeps them
// off the compute cores: compute on the first N allowed CPUs, everything else
// on the rest.
#pragma once

#include <string>
#include <vector>

#include "traces/status.h"

namespace ssdtrain::exec::detail {

// The CPUs the calling thread may run on (sched_getaffinity), ascending.
std::vector<int> AllowedCpus();

// Restricts the calling thread to `cpus`. Threads it creates afterwards inherit
// the mask.
Status PinCurrentThread(const std::vector<int>& cpus);

struct CoreSplit {
  std::vector<int> compute;  // empty: no pinning (too few CPUs)
  std::vector<int> helpers;
};
// Splits `allowed` into `compute_threads` compute CPUs and at least one helper
// CPU; empty when there are not enough CPUs for both.
CoreSplit SplitCores(const std::vector<int>& allowed, int compute_threads);

// "0" or "0-3" or "1,3": for messages.
std::string FormatCpus(const std::vector<int>& cpus);

// Pins the calling thread to `cpus` for its lifetime and restores the previous
// mask on destruction. No-op for an empty list.
class ScopedThreadAffinity {
 public:
  explicit ScopedThreadAffinity(const std::vector<int>& cpus);
  ~ScopedThreadAffinity();
  ScopedThreadAffinity(const ScopedThreadAffinity&) = delete;
  ScopedThreadAffinity& operator=(const ScopedThreadAffinity&) = delete;

  const Status& status() const { return status_; }

 private:
  std::vector<int> previous_;
  bool active_ = false;
  Status status_;
};

}  // namespace ssdtrain::exec::detail

// The replay's host staging memory: one page-aligned region, pinned for the
// device (Device::RegisterHostMemory: cudaHostRegister on CUDA) and handed out
// in 4096-byte-aligned pieces. Page alignment lets the offload engine write and
// read these pieces with O_DIRECT without a bounce copy (OffloadEngine::WriteAsync).
//
// Thread-safety: Acquire and Release may be called from any thread; Acquire
// blocks while the region is full.
#pragma once

#include <cstdint>
#include <memory>

#include "exec/detail/annotated_mutex.h"
#include "exec/detail/range_allocator.h"
#include "exec/device.h"
#include "traces/status.h"

namespace ssdtrain::exec::detail {

struct StagingPiece {
  uint8_t* data = nullptr;
  int64_t bytes = 0;
};

class HostStaging {
 public:
  // Maps `bytes` and registers them with `device` (which must outlive this);
  // 0 bytes: an empty region, nothing mapped, every Acquire refused.
  static Result<std::unique_ptr<HostStaging>> Create(Device& device, int64_t bytes);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Blocks until `bytes` fit; ResourceExhausted when they never can, or after
  // Abort. Sets `*waited` (when given) when it had to block.
  Result<StagingPiece> Acquire(int64_t bytes, bool* waited = nullptr);
  void Release(StagingPiece piece);
  // Wakes and fails every blocked Acquire (the run is stopping on an error).
  void Abort();
  int64_t capacity() const { return capacity_; }
  // The whole region (for the offload engine to register as a fixed buffer).
  void* base() const { return base_; }

 private:
  HostStaging(Device& device, uint8_t* base, int64_t capacity)
      : device_(device), base_(base), capacity_(capacity), ranges_(capacity, 4096) {}
  Device& device_;
  uint8_t* base_;
  int64_t capacity_;
  Mutex mu_;
  CondVar cv_;  // space released, or aborted
  RangeAllocator ranges_ SSDTRAIN_GUARDED_BY(mu_);
  bool aborted_ SSDTRAIN_GUARDED_BY(mu_) = false;
};

}  // namespace ssdtrain::exec::detail

// The engine's page-aligned staging memory: `slots` bounce blocks of
// `slot_bytes` each (one per request in flight, for unaligned buffers and
// tails), then a lease region handed out in page multiples by AcquireStaging.
// Registered with the backend as slots + 1 fixed buffers: index i < slots is
// bounce block i, index `slots` is the whole lease region.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <map>
#include <vector>

#include "exec/detail/annotated_mutex.h"
#include "traces/status.h"

namespace ssdtrain::exec::detail {

// The kernel's limit on one registered (fixed) buffer.
inline constexpr int64_t kMaxFixedBufferBytes = int64_t{1} << 30;

// `region` cut into consecutive pieces of at most `max_bytes` (the last shorter).
std::vector<iovec> SplitForRegistration(const iovec& region, int64_t max_bytes);
// Which piece of SplitForRegistration(region starting at `base`, max_bytes)
// holds all of [p, p + n); -1 when the range straddles two pieces.
int ChunkOf(const char* base, const char* p, int64_t n, int64_t max_bytes);

class StagingPool {
 public:
  // Maps the memory (anonymous, page-aligned). lease_bytes may be 0.
  static Result<std::unique_ptr<StagingPool>> Create(int slots, int64_t slot_bytes,
                                                     int64_t lease_bytes);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  std::vector<iovec> RegistrationIovecs() const;

  // Bounce blocks: used only by the engine's I/O thread (not thread-safe).
  int num_slots() const { return slots_; }
  char* slot(int i) const { return base_ + static_cast<int64_t>(i) * slot_bytes_; }

  // Fixed-buffer index of the registered buffer holding [p, p + n), or -1.
  int FixedIndexOf(const void* p, int64_t n) const;
  bool InLeaseRegion(const void* p, int64_t n) const;

  // Lease region (thread-safe). Acquire blocks until `bytes` (rounded up to the
  // page) are free in one piece, or fails when they never can be or after Close.
  Result<char*> Acquire(int64_t bytes, int64_t* capacity) SSDTRAIN_EXCLUDES(mu_);
  void Release(void* p, int64_t capacity) SSDTRAIN_EXCLUDES(mu_);
  // Wakes and fails every blocked and later Acquire with `why`.
  void Close(const Status& why) SSDTRAIN_EXCLUDES(mu_);

 private:
  StagingPool() = default;
  char* base_ = nullptr;
  int64_t total_bytes_ = 0;
  int slots_ = 0;
  int64_t slot_bytes_ = 0;
  char* lease_base_ = nullptr;
  int64_t lease_bytes_ = 0;

  Mutex mu_;
  CondVar cv_;  // lease memory released, or closed
  // Offset in the lease region -> length, coalesced.
  std::map<int64_t, int64_t> free_ SSDTRAIN_GUARDED_BY(mu_);
  Status closed_ SSDTRAIN_GUARDED_BY(mu_);
};

}  // namespace ssdtrain::exec::detail

#include "exec/detail/host_staging.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "exec/detail/format_bytes.h"
#include "exec/detail/round_up.h"

namespace ssdtrain::exec::detail {

Result<std::unique_ptr<HostStaging>> HostStaging::Create(Device& device, int64_t bytes) {
  bytes = RoundUp(bytes, 4096);  // whole pages: the engine registers the region
  // None (GPUDirect Storage moves the device buffers themselves): nothing
  // mapped or pinned; every Acquire is refused.
  if (bytes == 0) return std::unique_ptr<HostStaging>(new HostStaging(device, nullptr, 0));
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::ResourceExhausted("host staging memory of " + FormatBytes(bytes) +
                                     ": mmap failed: " + std::strerror(errno));
  }
  Status registered = device.RegisterHostMemory(p, bytes);
  if (!registered.ok()) {
    munmap(p, static_cast<size_t>(bytes));
    return registered.WithPrefix("pinning host staging memory");
  }
  return std::unique_ptr<HostStaging>(new HostStaging(device, static_cast<uint8_t*>(p), bytes));
}

HostStaging::~HostStaging() {
  if (base_ == nullptr) return;  // an empty region: nothing mapped
  // A destructor has no one to report to, and the mapping goes next either way
  // (CUDA drops a registration whose memory is unmapped).
  (void)device_.UnregisterHostMemory(base_);
  munmap(base_, static_cast<size_t>(capacity_));
}

Result<StagingPiece> HostStaging::Acquire(int64_t bytes, bool* waited) {
  MutexLock lock(&mu_);
  if (ranges_.Rounded(bytes) > capacity_) {
    return Status::ResourceExhausted("a tensor of " + FormatBytes(bytes) +
                                     " does not fit in the host staging memory of " +
                                     FormatBytes(capacity_) + "; raise --staging-memory");
  }
  while (true) {
    if (aborted_) return Status::ResourceExhausted("host staging: the run is stopping");
    if (auto offset = ranges_.Allocate(bytes)) return StagingPiece{base_ + *offset, bytes};
    if (waited != nullptr) *waited = true;
    cv_.Wait(&mu_);
  }
}

void HostStaging::Release(StagingPiece piece) {
  if (piece.data == nullptr) return;
  {
    MutexLock lock(&mu_);
    ranges_.Free(piece.data - base_, piece.bytes);
  }
  cv_.NotifyAll();
}

void HostStaging::Abort() {
  {
    MutexLock lock(&mu_);
    aborted_ = true;
  }
  cv_.NotifyAll();
}

}  // namespace ssdtrain::exec::detail

#include "exec/detail/staging_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>

#include "exec/detail/errno_text.h"
#include "exec/detail/round_up.h"

namespace ssdtrain::exec::detail {
namespace {

constexpr int64_t kPage = 4096;

}  // namespace

std::vector<iovec> SplitForRegistration(const iovec& region, int64_t max_bytes) {
  std::vector<iovec> pieces;
  auto* base = static_cast<char*>(region.iov_base);
  const auto total = static_cast<int64_t>(region.iov_len);
  for (int64_t at = 0; at < total; at += max_bytes) {
    pieces.push_back(iovec{base + at, static_cast<size_t>(std::min(max_bytes, total - at))});
  }
  return pieces;
}

int ChunkOf(const char* base, const char* p, int64_t n, int64_t max_bytes) {
  const int64_t first = (p - base) / max_bytes;
  const int64_t last = (p + n - 1 - base) / max_bytes;
  return first == last ? static_cast<int>(first) : -1;
}

Result<std::unique_ptr<StagingPool>> StagingPool::Create(int slots, int64_t slot_bytes,
                                                         int64_t lease_bytes) {
  std::unique_ptr<StagingPool> pool(new StagingPool());
  pool->slots_ = slots;
  pool->slot_bytes_ = RoundUp(slot_bytes, kPage);
  pool->lease_bytes_ = RoundUp(lease_bytes, kPage);
  pool->total_bytes_ = pool->slot_bytes_ * slots + pool->lease_bytes_;
  void* p = ::mmap(nullptr, static_cast<size_t>(pool->total_bytes_), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::ResourceExhausted("cannot map " + std::to_string(pool->total_bytes_) +
                                     " bytes of staging memory: " + ErrnoText(errno) +
                                     "; lower --queue-depth, --block-size or the staging size");
  }
  pool->base_ = static_cast<char*>(p);
  pool->lease_base_ = pool->base_ + pool->slot_bytes_ * slots;
  if (pool->lease_bytes_ > 0) {
    MutexLock lock(&pool->mu_);  // no other thread sees the pool yet; for the analysis
    pool->free_[0] = pool->lease_bytes_;
  }
  return pool;
}

StagingPool::~StagingPool() {
  if (base_ != nullptr) ::munmap(base_, static_cast<size_t>(total_bytes_));
}

std::vector<iovec> StagingPool::RegistrationIovecs() const {
  std::vector<iovec> v;
  for (int i = 0; i < slots_; ++i) v.push_back(iovec{slot(i), static_cast<size_t>(slot_bytes_)});
  if (lease_bytes_ > 0) v.push_back(iovec{lease_base_, static_cast<size_t>(lease_bytes_)});
  return v;
}

int StagingPool::FixedIndexOf(const void* p, int64_t n) const {
  const char* c = static_cast<const char*>(p);
  if (c < base_ || c + n > base_ + total_bytes_) return -1;
  if (c >= lease_base_) return slots_;
  const int64_t i = (c - base_) / slot_bytes_;
  return c + n <= slot(static_cast<int>(i)) + slot_bytes_ ? static_cast<int>(i) : -1;
}

bool StagingPool::InLeaseRegion(const void* p, int64_t n) const {
  const char* c = static_cast<const char*>(p);
  return c >= lease_base_ && c + n <= lease_base_ + lease_bytes_;
}

Result<char*> StagingPool::Acquire(int64_t bytes, int64_t* capacity) {
  const int64_t want = RoundUp(bytes, kPage);
  if (bytes <= 0 || want > lease_bytes_) {
    return Status::ResourceExhausted("staging request of " + std::to_string(bytes) +
                                     " bytes does not fit the " + std::to_string(lease_bytes_) +
                                     "-byte staging region; raise the staging size");
  }
  MutexLock lock(&mu_);
  while (true) {
    if (!closed_.ok()) return closed_;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < want) continue;
      const int64_t offset = it->first;
      const int64_t rest = it->second - want;
      free_.erase(it);
      if (rest > 0) free_[offset + want] = rest;
      *capacity = want;
      return lease_base_ + offset;
    }
    cv_.Wait(&mu_);
  }
}

void StagingPool::Release(void* p, int64_t capacity) {
  {
    MutexLock lock(&mu_);
    int64_t offset = static_cast<char*>(p) - lease_base_;
    int64_t len = capacity;
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && next->first == offset + len) {
      len += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        len += prev->second;
        free_.erase(prev);
      }
    }
    free_[offset] = len;
  }
  cv_.NotifyAll();
}

void StagingPool::Close(const Status& why) {
  {
    MutexLock lock(&mu_);
    closed_ = why;
  }
  cv_.NotifyAll();
}

}  // namespace ssdtrain::exec::detail

// First-fit sub-allocation of one contiguous region (the CPU arena, the CUDA
// device arena): offsets only, no memory of its own. Adjacent free ranges
// coalesce, so that fragmentation behaves like a GPU caching allocator's.
// Sizes round up to `alignment`.
//
// Thread-safety: none; the owner locks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace ssdtrain::exec::detail {

class RangeAllocator {
 public:
  RangeAllocator(int64_t capacity, int64_t alignment) : capacity_(capacity), alignment_(alignment) {
    if (capacity_ > 0) free_[0] = capacity_;
  }

  int64_t Rounded(int64_t bytes) const {
    return (bytes + alignment_ - 1) / alignment_ * alignment_;
  }

  // The offset of a free range of Rounded(bytes), or nullopt when none is large enough.
  std::optional<int64_t> Allocate(int64_t bytes) {
    const int64_t size = Rounded(bytes);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < size) continue;
      const int64_t offset = it->first;
      const int64_t rest = it->second - size;
      free_.erase(it);
      if (rest > 0) free_[offset + size] = rest;
      used_ += size;
      return offset;
    }
    return std::nullopt;
  }

  // Returns a range given by Allocate(bytes).
  void Free(int64_t offset, int64_t bytes) {
    int64_t size = Rounded(bytes);
    used_ -= size;
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + size == next->first) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += size;
        return;
      }
    }
    free_[offset] = size;
  }

  int64_t used() const { return used_; }
  int64_t capacity() const { return capacity_; }
  int64_t largest_free() const {
    int64_t best = 0;
    for (const auto& [offset, size] : free_) best = size > best ? size : best;
    return best;
  }

 private:
  int64_t capacity_;
  int64_t alignment_;
  int64_t used_ = 0;
  std::map<int64_t, int64_t> free_;  // offset -> size, disjoint and non-adjacent
};

}  // namespace ssdtrain::exec::detail

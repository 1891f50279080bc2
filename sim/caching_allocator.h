// PyTorch's CUDA caching allocator, as a model: what a run reserves from the
// device (torch.cuda.max_memory_reserved, the figure torchtitan and most
// published runs report) for a sequence of tensor allocations and frees,
// beside what it allocates (max_memory_allocated, the simulator's peak).
//
// The rules are c10/cuda/CUDACachingAllocator.cpp's defaults (no
// PYTORCH_CUDA_ALLOC_CONF): every request rounded up to 512 bytes; requests
// of at most 1 MiB served from a small pool of 2 MiB segments, larger ones
// from a large pool whose segments are 20 MiB for requests under 10 MiB and
// the request rounded up to 2 MiB above; a request takes the smallest cached
// free block of its pool that holds it (best fit; among equal sizes the
// oldest segment's lowest offset, where PyTorch takes the lowest address),
// split when the rest is at least 512 bytes (small pool) or more than 1 MiB
// (large pool); a freed block merges with free neighbours of its segment and
// stays cached. Only when no cached block fits is a segment reserved; when
// that would pass the device's capacity, every cached segment that is wholly
// free is released first (as PyTorch does after a failed cudaMalloc), and
// if it still does not fit the allocation fails. One stream: PyTorch keeps
// a pool per stream, which the model folds into one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace ssdtrain::sim {

inline constexpr int64_t kAllocatorMinBlock = 512;
inline constexpr int64_t kAllocatorSmallSize = int64_t{1} << 20;       // 1 MiB
inline constexpr int64_t kAllocatorSmallBuffer = int64_t{2} << 20;     // 2 MiB
inline constexpr int64_t kAllocatorLargeBuffer = int64_t{20} << 20;    // 20 MiB
inline constexpr int64_t kAllocatorMinLargeAlloc = int64_t{10} << 20;  // 10 MiB
inline constexpr int64_t kAllocatorRoundLarge = int64_t{2} << 20;      // 2 MiB

// A tensor allocation (bytes > 0) or free (bytes == 0) of allocation `id`,
// in the order the run issues them.
struct AllocatorEvent {
  int64_t id = 0;
  int64_t bytes = 0;
};

class CachingAllocator {
 public:
  // `capacity_bytes`: what the device lets it reserve (0: unlimited).
  explicit CachingAllocator(int64_t capacity_bytes = 0) : capacity_(capacity_bytes) {}

  // False when the request does not fit even after releasing the cached
  // segments (PyTorch's out-of-memory error). An id already allocated is
  // refused too.
  bool Allocate(int64_t id, int64_t bytes);
  void Free(int64_t id);  // an id not allocated is ignored
  // Applies `events` in order; false at the first allocation that fails.
  bool Run(const std::vector<AllocatorEvent>& events);

  int64_t allocated_bytes() const { return allocated_; }  // rounded requests in use
  int64_t reserved_bytes() const { return reserved_; }
  int64_t peak_allocated_bytes() const { return peak_allocated_; }
  int64_t peak_reserved_bytes() const { return peak_reserved_; }
  int64_t segments() const { return static_cast<int64_t>(live_segments_); }

  static int64_t RoundSize(int64_t bytes);
  static int64_t SegmentSize(int64_t rounded);  // the segment a miss reserves

 private:
  struct Block {
    int64_t size = 0;
    bool free = true;
  };
  struct Segment {
    int64_t size = 0;
    bool small = false;
    bool live = true;
    std::map<int64_t, Block> blocks;  // by offset
  };
  // (size, segment, offset): best fit, then the oldest segment's lowest offset.
  using FreeKey = std::tuple<int64_t, int64_t, int64_t>;
  struct Where {
    int64_t segment = 0, offset = 0, size = 0;
  };

  std::set<FreeKey>& pool(bool small) { return small ? small_free_ : large_free_; }
  bool Reserve(int64_t size, bool small);
  void ReleaseCached();

  int64_t capacity_ = 0;
  std::vector<Segment> segments_;
  size_t live_segments_ = 0;
  std::set<FreeKey> small_free_, large_free_;
  std::map<int64_t, Where> in_use_;
  int64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
};

// A run of training steps on the allocator: the first `persistent` events
// (the weights, gradients and optimizer state) once, then the step's events
// (the rest) `steps` times, whatever a step leaves allocated freed at its end.
// The peaks are over all of it: torch.cuda.max_memory_reserved and
// max_memory_allocated after that many steps. Reserved stops growing once the
// cache serves the step: in the second step on caching_allocator_test's sequences, in
// the first on torchtitan's Llama 3 8B runs of scripts/published.sh (the same
// figure after 1, 2, 3, 5 and 8 steps, tried 2026-12-06).
struct AllocatorPeaks {
  int64_t reserved_bytes = 0;
  int64_t allocated_bytes = 0;
  bool fits = true;  // false: an allocation failed (the run would be out of memory)
};
AllocatorPeaks StepsOnCachingAllocator(const std::vector<AllocatorEvent>& events,
                                       int64_t persistent, int64_t capacity_bytes, int steps = 3);

}  // namespace ssdtrain::sim

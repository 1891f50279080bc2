#include "sim/caching_allocator.h"

#include <algorithm>
#include <iterator>

namespace ssdtrain::sim {

int64_t CachingAllocator::RoundSize(int64_t bytes) {
  if (bytes < kAllocatorMinBlock) return kAllocatorMinBlock;
  return (bytes + kAllocatorMinBlock - 1) / kAllocatorMinBlock * kAllocatorMinBlock;
}

int64_t CachingAllocator::SegmentSize(int64_t rounded) {
  if (rounded <= kAllocatorSmallSize) return kAllocatorSmallBuffer;
  if (rounded < kAllocatorMinLargeAlloc) return kAllocatorLargeBuffer;
  return (rounded + kAllocatorRoundLarge - 1) / kAllocatorRoundLarge * kAllocatorRoundLarge;
}

bool CachingAllocator::Reserve(int64_t size, bool small) {
  if (capacity_ > 0 && reserved_ + size > capacity_) {
    ReleaseCached();
    if (reserved_ + size > capacity_) return false;
  }
  Segment s;
  s.size = size;
  s.small = small;
  s.blocks.emplace(0, Block{size, true});
  const auto id = static_cast<int64_t>(segments_.size());
  segments_.push_back(std::move(s));
  ++live_segments_;
  pool(small).insert({size, id, 0});
  reserved_ += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return true;
}

// PyTorch's release_cached_blocks: every segment whose one block is free goes
// back to the device.
void CachingAllocator::ReleaseCached() {
  for (size_t i = 0; i < segments_.size(); ++i) {
    Segment& s = segments_[i];
    if (!s.live || s.blocks.size() != 1 || !s.blocks.begin()->second.free) continue;
    pool(s.small).erase({s.size, static_cast<int64_t>(i), 0});
    reserved_ -= s.size;
    s.live = false;
    s.blocks.clear();
    --live_segments_;
  }
}

bool CachingAllocator::Allocate(int64_t id, int64_t bytes) {
  if (in_use_.count(id) != 0) return false;
  const int64_t size = RoundSize(bytes);
  const bool small = size <= kAllocatorSmallSize;
  std::set<FreeKey>& free = pool(small);
  auto it = free.lower_bound({size, -1, -1});
  if (it == free.end()) {
    if (!Reserve(SegmentSize(size), small)) return false;
    it = free.lower_bound({size, -1, -1});
  }
  const auto [block_size, segment, offset] = *it;
  free.erase(it);
  Segment& s = segments_[static_cast<size_t>(segment)];
  const int64_t rest = block_size - size;
  const bool split = small ? rest >= kAllocatorMinBlock : rest > kAllocatorSmallSize;
  const int64_t taken = split ? size : block_size;
  s.blocks[offset] = Block{taken, false};
  if (split) {
    s.blocks.emplace(offset + size, Block{rest, true});
    free.insert({rest, segment, offset + size});
  }
  in_use_[id] = Where{segment, offset, taken};
  allocated_ += taken;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return true;
}

void CachingAllocator::Free(int64_t id) {
  auto found = in_use_.find(id);
  if (found == in_use_.end()) return;
  const Where w = found->second;
  in_use_.erase(found);
  allocated_ -= w.size;
  Segment& s = segments_[static_cast<size_t>(w.segment)];
  std::set<FreeKey>& free = pool(s.small);
  auto it = s.blocks.find(w.offset);
  it->second.free = true;
  // Merge with the free neighbours of its segment.
  if (auto next = std::next(it); next != s.blocks.end() && next->second.free) {
    free.erase({next->second.size, w.segment, next->first});
    it->second.size += next->second.size;
    s.blocks.erase(next);
  }
  if (it != s.blocks.begin()) {
    auto prev = std::prev(it);
    if (prev->second.free) {
      free.erase({prev->second.size, w.segment, prev->first});
      prev->second.size += it->second.size;
      s.blocks.erase(it);
      it = prev;
    }
  }
  free.insert({it->second.size, w.segment, it->first});
}

bool CachingAllocator::Run(const std::vector<AllocatorEvent>& events) {
  for (const AllocatorEvent& e : events) {
    if (e.bytes > 0) {
      if (!Allocate(e.id, e.bytes)) return false;
    } else {
      Free(e.id);
    }
  }
  return true;
}

AllocatorPeaks StepsOnCachingAllocator(const std::vector<AllocatorEvent>& events,
                                       int64_t persistent, int64_t capacity_bytes, int steps) {
  CachingAllocator a(capacity_bytes);
  AllocatorPeaks out;
  const auto first = events.begin() + std::min<int64_t>(persistent, std::ssize(events));
  out.fits = a.Run(std::vector<AllocatorEvent>(events.begin(), first));
  const std::vector<AllocatorEvent> step(first, events.end());
  for (int k = 0; k < steps && out.fits; ++k) {
    std::set<int64_t> live;
    for (const AllocatorEvent& e : step) {
      if (e.bytes > 0) {
        if (!a.Allocate(e.id, e.bytes)) {
          out.fits = false;
          break;
        }
        live.insert(e.id);
      } else {
        a.Free(e.id);
        live.erase(e.id);
      }
    }
    for (int64_t id : live) a.Free(id);
  }
  out.reserved_bytes = a.peak_reserved_bytes();
  out.allocated_bytes = a.peak_allocated_bytes();
  return out;
}

}  // namespace ssdtrain::sim

// OpLists: per op id, a list of storage indexes, stored flat
// (traces::StoragePlan's per-op inputs, outputs, prefetches and evictions).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace ssdtrain::traces {

// Per op id, a list of storage indexes, stored flat (one allocation for all
// ops, where a vector per op costs a search thousands of allocations a plan).
class OpLists {
 public:
  std::span<const int> operator[](size_t op) const {
    return {data_.data() + begin_[op], data_.data() + begin_[op + 1]};
  }
  size_t size() const { return begin_.size() - 1; }
  // Building op by op, in op id order: Add the next op's entries, then EndOp.
  void Add(int storage) { data_.push_back(storage); }
  void AddUnique(int storage) {  // unless the open op already lists it
    if (std::find(data_.begin() + static_cast<std::ptrdiff_t>(begin_.back()), data_.end(),
                  storage) == data_.end()) {
      data_.push_back(storage);
    }
  }
  void EndOp() { begin_.push_back(data_.size()); }
  // `ops` lists from (op, storage) pairs, each op's in the pairs' order.
  static OpLists Grouped(size_t ops, const std::vector<std::pair<size_t, int>>& pairs);

 private:
  std::vector<int> data_;
  std::vector<size_t> begin_{0};  // begin_[op]..begin_[op + 1]: op's entries
};

}  // namespace ssdtrain::traces

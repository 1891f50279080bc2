#include "traces/op_lists.h"

namespace ssdtrain::traces {

OpLists OpLists::Grouped(size_t ops, const std::vector<std::pair<size_t, int>>& pairs) {
  OpLists out;
  out.begin_.assign(ops + 1, 0);
  for (const auto& [op, storage] : pairs) ++out.begin_[op + 1];
  for (size_t op = 0; op < ops; ++op) out.begin_[op + 1] += out.begin_[op];
  out.data_.resize(pairs.size());
  std::vector<size_t> next(out.begin_.begin(), out.begin_.end() - 1);
  for (const auto& [op, storage] : pairs) out.data_[next[op]++] = storage;
  return out;
}

}  // namespace ssdtrain::traces

#include "traces/collective_kind.h"

#include <algorithm>

namespace ssdtrain::traces {

std::string_view ToString(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllReduce:
      break;
  }
  return "all_reduce";
}

CollectiveKind ClassifyCollective(const Op& op) {
  if (op.bytes_written > op.bytes_read) return CollectiveKind::kAllGather;
  if (op.bytes_read > op.bytes_written && op.bytes_written > 0) {
    return CollectiveKind::kReduceScatter;
  }
  return CollectiveKind::kAllReduce;
}

int64_t CollectivePayloadBytes(const Op& op) { return std::max(op.bytes_read, op.bytes_written); }

}  // namespace ssdtrain::traces

#include "traces/collective_kind.h"

#include <algorithm>

namespace ssdtrain::traces {

std::string_view ToString(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kAllReduce:
      break;
  }
  return "all_reduce";
}

CollectiveKind ClassifyCollective(const Op& op) {
  if (op.name.ends_with(kAllToAllSuffix)) return CollectiveKind::kAllToAll;
  if (op.bytes_written > op.bytes_read) return CollectiveKind::kAllGather;
  if (op.bytes_read > op.bytes_written && op.bytes_written > 0) {
    return CollectiveKind::kReduceScatter;
  }
  return CollectiveKind::kAllReduce;
}

int64_t CollectiveRanks(CollectiveKind kind, const Header& header) {
  return std::max<int64_t>(1, kind == CollectiveKind::kAllToAll ? header.ep : header.tp);
}

int64_t CollectivePayloadBytes(const Op& op) { return std::max(op.bytes_read, op.bytes_written); }

}  // namespace ssdtrain::traces

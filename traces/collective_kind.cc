#include "traces/collective_kind.h"

#include <algorithm>

#include "traces/dp_buckets.h"

namespace ssdtrain::traces {

std::string_view ToString(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather:
      return "all_gather";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllToAll:
      return "all_to_all";
    case CollectiveKind::kSendRecv:
      return "send_recv";
    case CollectiveKind::kAllReduce:
      break;
  }
  return "all_reduce";
}

CollectiveKind ClassifyCollective(const Op& op) {
  if (op.name.ends_with(kAllToAllSuffix)) return CollectiveKind::kAllToAll;
  if (op.name.ends_with(kCpRingSuffix)) return CollectiveKind::kSendRecv;
  // ZeRO's by name: over one rank they read what they write.
  if (op.name.ends_with(kZeroAllGatherSuffix)) return CollectiveKind::kAllGather;
  if (op.name.ends_with(kZeroReduceScatterSuffix)) return CollectiveKind::kReduceScatter;
  if (op.bytes_written > op.bytes_read) return CollectiveKind::kAllGather;
  if (op.bytes_read > op.bytes_written && op.bytes_written > 0) {
    return CollectiveKind::kReduceScatter;
  }
  return CollectiveKind::kAllReduce;
}

namespace {

// Whether `name`'s last dot-separated component is `component`.
bool LastComponentIs(std::string_view name, std::string_view component) {
  return name.ends_with(component) &&
         (name.size() == component.size() || name[name.size() - component.size() - 1] == '.');
}

}  // namespace

CollectiveGroup GroupOfCollective(const Op& op) {
  if (op.name.ends_with(kAllToAllSuffix)) return CollectiveGroup::kExpertParallel;
  for (std::string_view suffix : {kZeroAllGatherSuffix, kZeroReduceScatterSuffix}) {
    if (!op.name.ends_with(suffix)) continue;
    // "...experts.<suffix>" (a whole step prefixes "mb<k>."): the routed experts'.
    std::string_view scope = op.name;
    scope.remove_suffix(suffix.size());
    const bool experts =
        scope.ends_with('.') && LastComponentIs(scope.substr(0, scope.size() - 1), kRoutedExperts);
    return experts ? CollectiveGroup::kExpertShard : CollectiveGroup::kShard;
  }
  if (op.name.ends_with(kCpRingSuffix)) return CollectiveGroup::kContext;
  return CollectiveGroup::kTensorParallel;
}

int64_t CollectiveRanks(const Op& op, const Header& header) {
  switch (GroupOfCollective(op)) {
    case CollectiveGroup::kExpertParallel:
      return std::max<int64_t>(1, header.ep);
    case CollectiveGroup::kShard:
      return std::max<int64_t>(1, header.zero_shards);
    case CollectiveGroup::kExpertShard:
      return std::max<int64_t>(1, header.zero_shards / std::max<int64_t>(1, header.ep));
    case CollectiveGroup::kContext:
      return std::max<int64_t>(1, header.cp);
    case CollectiveGroup::kTensorParallel:
      break;
  }
  return std::max<int64_t>(1, header.tp);
}

int64_t CollectivePayloadBytes(const Op& op) { return std::max(op.bytes_read, op.bytes_written); }

}  // namespace ssdtrain::traces

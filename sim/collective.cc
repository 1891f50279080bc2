#include "sim/collective.h"

#include <algorithm>

#include "sim/topology.h"
#include "traces/duration.h"

namespace ssdtrain::sim {

int64_t CollectiveNs(CollectiveKind kind, int64_t payload_bytes, int64_t n, double GBps,
                     double latency_us) {
  if (n <= 1) return 0;
  // Steps of the ring: all-reduce is a reduce-scatter followed by an all-gather.
  const double steps =
      static_cast<double>(kind == CollectiveKind::kAllReduce ? 2 * (n - 1) : n - 1);
  const double seconds =
      steps / static_cast<double>(n) * static_cast<double>(payload_bytes) / (GBps * 1e9) +
      steps * latency_us * 1e-6;
  return traces::CeilSecondsToNs(seconds);
}

int64_t SendNs(int64_t bytes, double GBps, double latency_us) {
  return traces::CeilSecondsToNs(static_cast<double>(bytes) / (GBps * 1e9) + latency_us * 1e-6);
}

CollectiveKind GradientCollective(int64_t zero_stage) {
  return zero_stage == 1 ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
}

int64_t ParamAllGatherNs(int64_t zero_stage, int64_t param_bytes,
                         const traces::GroupPlacement& group, const InterconnectOptions& ic) {
  if (zero_stage != 1 && zero_stage != 2) return 0;
  return GroupCollectiveNs(CollectiveKind::kAllGather, param_bytes, group, ic);
}

std::vector<BucketSpan> BucketCollectives(const std::vector<BucketReady>& buckets,
                                          CollectiveKind kind, const InterconnectOptions& ic) {
  std::vector<BucketSpan> out;
  if (std::none_of(buckets.begin(), buckets.end(),
                   [](const BucketReady& b) { return b.group.ranks > 1; })) {
    return out;
  }
  int64_t link_free = 0;
  for (const BucketReady& b : buckets) {
    if (b.group.ranks <= 1) {
      out.push_back(BucketSpan{b.ready_ns, b.ready_ns, 0});
      continue;
    }
    const int64_t start = std::max(b.ready_ns, link_free);
    link_free = start + GroupCollectiveNs(kind, b.bytes, b.group, ic);
    out.push_back(BucketSpan{start, link_free, b.bytes});
  }
  return out;
}

}  // namespace ssdtrain::sim

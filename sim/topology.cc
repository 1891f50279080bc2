#include "sim/topology.h"

#include <algorithm>
#include <array>
#include <map>

#include "traces/duration.h"

namespace ssdtrain::sim {

namespace {

// Memoized placements kept per thread before the memo starts over: far more
// layouts than one search visits (hundreds to a few thousand).
constexpr size_t kMaxMemoizedPlacements = 1 << 14;

}  // namespace

int64_t DomainGpus(const HardwareOptions& hw) {
  const int64_t d =
      hw.interconnect.domain_gpus > 0 ? hw.interconnect.domain_gpus : hw.gpus_per_node;
  return std::max<int64_t>(1, d);
}

namespace {

int64_t Ring(CollectiveKind kind, int64_t bytes, int64_t n, const LinkTier& tier, double GBps = 0) {
  return CollectiveNs(kind, bytes, n, GBps > 0 ? GBps : tier.GBps, tier.latency_us);
}

int64_t Hierarchical(CollectiveKind kind, int64_t bytes, int64_t k, int64_t domains,
                     const InterconnectOptions& ic) {
  const int64_t share = (bytes + k - 1) / k;
  const LinkTier &up = ic.scale_up, &out = ic.scale_out;
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return Ring(CollectiveKind::kReduceScatter, bytes, k, up) +
             Ring(CollectiveKind::kAllReduce, share, domains, out) +
             Ring(CollectiveKind::kAllGather, bytes, k, up);
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      return Ring(kind, share, domains, out) + Ring(kind, bytes, k, up);
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kSendRecv:
      break;
  }
  return 0;
}

}  // namespace

int64_t GroupCollectiveNs(CollectiveKind kind, int64_t payload_bytes,
                          const traces::GroupPlacement& p, const InterconnectOptions& ic) {
  const int64_t n = p.ranks;
  if (n <= 1) return 0;
  // A ring step: every rank sends its message to its neighbour at once; the
  // step lasts as long as its slowest hop, on the network once the ring
  // leaves a domain.
  if (kind == CollectiveKind::kSendRecv) return MessageNs(payload_bytes, p.within_one_domain(), ic);
  if (p.within_one_domain()) return Ring(kind, payload_bytes, n, ic.scale_up);
  const int64_t k = std::max<int64_t>(1, p.max_per_domain);
  if (kind == CollectiveKind::kAllToAll) {
    const double S = static_cast<double>(payload_bytes);
    const double network =
        static_cast<double>(n - k) / static_cast<double>(n) * S / (ic.scale_out.GBps * 1e9);
    const double nvlink =
        static_cast<double>(k - 1) / static_cast<double>(n) * S / (ic.scale_up.GBps * 1e9);
    return traces::CeilSecondsToNs(std::max(network, nvlink) +
                                   static_cast<double>(n - 1) * ic.scale_out.latency_us * 1e-6);
  }
  const double ring_GBps = std::min(ic.scale_up.GBps, static_cast<double>(k) * ic.scale_out.GBps);
  const int64_t ring = Ring(kind, payload_bytes, n, ic.scale_out, ring_GBps);
  return std::min(ring, Hierarchical(kind, payload_bytes, k, p.domains, ic));
}

int64_t MessageNs(int64_t bytes, bool within_domain, const InterconnectOptions& ic) {
  const LinkTier& tier = within_domain ? ic.scale_up : ic.scale_out;
  return SendNs(bytes, tier.P2pGBps(), tier.latency_us);
}

namespace {

LayoutLinks ComputeLayoutLinks(const traces::Layout& layout, int64_t domain, int64_t stage) {
  const int64_t first = layout.RankOf({0, 0, 0, std::clamp<int64_t>(stage, 0, layout.pp - 1)});
  LayoutLinks links;
  links.tp = traces::PlaceGroup(layout.TpGroup(first), domain);
  links.ep = traces::PlaceGroup(layout.EpGroup(first), domain);
  links.gradients = traces::PlaceGroup(layout.DpCpGroup(first), domain);
  links.expert_gradients = traces::PlaceGroup(layout.ExpertDpGroup(first), domain);
  links.expert_buckets = traces::PlaceGroup(layout.ExpertGradientGroup(first), domain);
  links.expert_shard = traces::PlaceGroup(layout.ExpertShardGroup(first), domain);
  links.shard = traces::PlaceGroup(layout.ShardGroup(first), domain);
  links.dense_buckets = traces::PlaceGroup(layout.DenseGradientGroup(first), domain);
  links.next_stage_within_domain =
      layout.pp <= 1 || first / domain == layout.NextStageRank(first) / domain;
  return links;
}

}  // namespace

// Memoized per thread: the simulator prices every step's collectives with the
// placements of its layout's groups, and a group of 16384 ranks takes that
// many ranks to enumerate and sort (46% of a 16384-GPU search's time before).
LayoutLinks PlaceLayout(const traces::Layout& layout, const HardwareOptions& hw, int64_t stage) {
  // The key is every field of the layout: a field added to traces::Layout must join it.
  static_assert(sizeof(traces::Layout) == 10 * sizeof(int64_t),
                "traces::Layout changed: add the new field to PlaceLayout's memo key");
  const int64_t domain = DomainGpus(hw);
  const std::array<int64_t, 12> key{layout.tp,
                                    layout.cp,
                                    layout.pp,
                                    layout.vp,
                                    layout.dp,
                                    layout.ep,
                                    layout.zero_stage,
                                    layout.dp_shard,
                                    layout.pp_first_layers,
                                    layout.pp_last_layers,
                                    domain,
                                    stage};
  thread_local std::map<std::array<int64_t, 12>, LayoutLinks> memo;
  if (const auto it = memo.find(key); it != memo.end()) return it->second;
  if (memo.size() >= kMaxMemoizedPlacements) memo.clear();
  return memo.emplace(key, ComputeLayoutLinks(layout, domain, stage)).first->second;
}

traces::GroupPlacement ParamGatherGroup(int64_t zero_stage, const LayoutLinks& links) {
  return zero_stage >= 2 ? links.shard : links.gradients;
}

traces::GroupPlacement ExpertParamGatherGroup(int64_t zero_stage, const LayoutLinks& links) {
  return zero_stage >= 2 ? links.expert_shard : links.expert_gradients;
}

traces::GroupPlacement OneDomain(int64_t ranks) {
  return traces::GroupPlacement{ranks, ranks > 0 ? 1 : 0, ranks};
}

}  // namespace ssdtrain::sim

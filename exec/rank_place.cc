#include "exec/detail/rank_place.h"

#include <algorithm>
#include <tuple>

#include "traces/collective_kind.h"
#include "traces/layout.h"

namespace ssdtrain::exec::detail {

Result<RankPlace> PlaceRank(const traces::Trace& trace, const traces::Plan& plan,
                            const StepSync& sync, const std::string& plan_source) {
  traces::Layout layout = traces::PlanLayout(plan);
  layout.pp = trace.header.pp;
  const int rank = sync.rank();
  SSDTRAIN_RETURN_IF_ERROR(traces::ValidateLayout(layout, plan_source));
  if (sync.size() != layout.world()) {
    return Status::InvalidArgument(
        plan_source + ": tp × cp × pp × dp = " + std::to_string(layout.tp) + " × " +
        std::to_string(layout.cp) + " × " + std::to_string(layout.pp) + " × " +
        std::to_string(layout.dp) + " = " + std::to_string(layout.world()) +
        " ranks, but the run has " + std::to_string(sync.size()));
  }
  // The trace is one rank's shard of this layout.
  for (auto [field, traced, planned] :
       {std::tuple{"tp", trace.header.tp, layout.tp}, std::tuple{"ep", trace.header.ep, layout.ep},
        std::tuple{"cp", trace.header.cp, layout.cp},
        std::tuple{"zero_shards", trace.header.zero_shards, layout.OptimizerShards()}}) {
    if (std::max<int64_t>(traced, 1) != planned) {
      return Status::InvalidArgument(plan_source + ": " + field + " = " + std::to_string(planned) +
                                     ", but the trace is traced at " + field + " = " +
                                     std::to_string(traced));
    }
  }
  if (layout.StageOf(rank) != trace.header.stage) {
    return Status::InvalidArgument(
        "rank " + std::to_string(rank) + " runs stage " + std::to_string(layout.StageOf(rank)) +
        " (rank / (tp × cp × dp)), but its trace is stage " + std::to_string(trace.header.stage));
  }
  RankPlace place;
  // Interleaved chunks wrap from the last stage to stage 0 (traces/chunks.h).
  const bool interleaved = plan.schedule == "interleaved";
  const int64_t stage = trace.header.stage;
  if (stage > 0 || (interleaved && layout.pp > 1))
    place.previous_rank = static_cast<int>(layout.PrevStageRank(rank));
  if (stage + 1 < layout.pp || (interleaved && layout.pp > 1))
    place.next_rank = static_cast<int>(layout.NextStageRank(rank));
  // A group, and this rank's index in it.
  auto group = [rank](const std::vector<int64_t>& g) {
    return RankGroup{std::vector<int>(g.begin(), g.end()),
                     std::find(g.begin(), g.end(), rank) - g.begin()};
  };
  RankGroups& groups = place.groups;
  groups.tp = group(layout.TpGroup(rank));
  groups.ep = group(layout.EpGroup(rank));
  groups.cp = group(layout.CpGroup(rank));
  if (layout.ep > 1) {
    for (int member : groups.cp.ranks) groups.cp_experts.push_back(layout.ExpertIndexOf(member));
  }
  // ZeRO-2/3's gathers and reduce-scatters; at stages 0 and 1 the trace has none.
  if (layout.zero_stage >= 2) {
    groups.shard = group(layout.ShardGroup(rank));
    if (layout.ep > 1) {
      groups.expert_shard = group(layout.ExpertShardGroup(rank));
      for (int member : groups.shard.ranks)
        groups.shard_experts.push_back(layout.ExpertIndexOf(member));
    }
  }
  place.dense_buckets = layout.DenseGradientGroup(rank).size() > 1;
  return place;
}

const RankGroup& RankGroups::Of(const traces::Op& op) const {
  switch (traces::GroupOfCollective(op)) {
    case traces::CollectiveGroup::kExpertParallel:
      return ep;
    case traces::CollectiveGroup::kShard:
      return shard;
    case traces::CollectiveGroup::kExpertShard:
      return expert_shard;
    case traces::CollectiveGroup::kContext:
      return cp;
    case traces::CollectiveGroup::kTensorParallel:
      break;
  }
  return tp;
}

// The shard group's and the cp group's members share this rank's tp index
// and, at ep > 1, each has its own expert index; the experts' shard group's
// members differ in neither, so theirs are this rank's.
uint64_t RankGroups::PeerSeed(const traces::Op& op, uint64_t mine, int64_t peer) const {
  switch (traces::GroupOfCollective(op)) {
    case traces::CollectiveGroup::kTensorParallel:
      return mine ^ TpSeedSalt(tp.index) ^ TpSeedSalt(peer);
    case traces::CollectiveGroup::kExpertParallel:
      return EpPeerSeed(mine, peer);
    case traces::CollectiveGroup::kShard:
      if (!ep.several() || shard_experts.empty()) break;
      return EpPeerSeed(mine, shard_experts[static_cast<size_t>(peer)]);
    case traces::CollectiveGroup::kContext:
      if (!ep.several() || cp_experts.empty()) break;
      return EpPeerSeed(mine, cp_experts[static_cast<size_t>(peer)]);
    case traces::CollectiveGroup::kExpertShard:
      break;
  }
  return mine;
}

}  // namespace ssdtrain::exec::detail

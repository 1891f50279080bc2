// RankPlace: a replaying rank's neighbours and groups in its plan's layout
// (traces/layout.h), checked against its trace (exec/replay.cc); RankGroups:
// which group a collective op runs between, and the verification seeds that
// depend on a rank's place in them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/step_sync.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::exec::detail {

// A group of ranks a collective runs between: its ranks in order and this
// rank's index among them (fewer than two ranks: its collectives run as
// memory passes).
struct RankGroup {
  std::vector<int> ranks;
  int64_t index = 0;
  bool several() const { return ranks.size() > 1; }
};

// This rank's groups: tensor parallel, expert parallel (traces::Layout::EpGroup,
// over which the all-to-all ops run), ZeRO-2/3's shard group
// (Layout::ShardGroup: the ...zero_all_gather and ...zero_reduce_scatter ops)
// and the routed experts' (ep > 1: Layout::ExpertShardGroup, for their
// L<layer>.experts.zero_... ops), and context parallelism's (Layout::CpGroup:
// the ...cp_ring steps). The shard group's and the cp group's members differ in
// dp and cp index, which the seeds do not depend on, and at ep > 1 in expert
// index, which they do: `shard_experts` and `cp_experts` are each member's
// (empty at ep 1).
struct RankGroups {
  RankGroup tp, ep, shard, expert_shard, cp;
  std::vector<int64_t> shard_experts, cp_experts;

  // The group `op` runs between (traces::GroupOfCollective).
  const RankGroup& Of(const traces::Op& op) const;
  // Whether `op` is a collective with other ranks in its group.
  bool Exchanges(const traces::Op& op) const {
    return op.kind == traces::OpKind::kCollective && Of(op).several();
  }
  // The verification seeds differ by tp index and by expert index: this
  // rank's salt, and the seed that member `peer` of `op`'s group gives the
  // storage this rank seeds `mine` (EpPeerSeed: in the ep group).
  uint64_t SeedSalt() const {
    return (tp.several() ? TpSeedSalt(tp.index) : 0) ^ (ep.several() ? EpSeedSalt(ep.index) : 0);
  }
  uint64_t PeerSeed(const traces::Op& op, uint64_t mine, int64_t peer) const;
  uint64_t EpPeerSeed(uint64_t mine, int64_t peer) const {
    return mine ^ EpSeedSalt(ep.index) ^ EpSeedSalt(peer);
  }
  static uint64_t TpSeedSalt(int64_t tp_index) { return static_cast<uint64_t>(tp_index) << 56; }
  static uint64_t EpSeedSalt(int64_t ep_index) { return static_cast<uint64_t>(ep_index) << 48; }
};

// This rank's neighbours and groups in the plan's layout.
struct RankPlace {
  int previous_rank = -1, next_rank = -1;  // the pipeline's (-1: none)
  RankGroups groups;
  bool dense_buckets = false;  // whether its dense gradient group has other ranks
};

// `sync`'s rank in `plan`'s layout: refused, naming the plan, where the run's
// ranks are not the layout's, the trace is not this rank's shard (tp, ep, cp,
// ZeRO shards) or not its stage.
Result<RankPlace> PlaceRank(const traces::Trace& trace, const traces::Plan& plan,
                            const StepSync& sync, const std::string& plan_source);

}  // namespace ssdtrain::exec::detail

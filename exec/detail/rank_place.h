// RankPlace: a replaying rank's neighbours and groups in its plan's layout
// (traces/layout.h), checked against its trace (exec/replay.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/step_sync.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::exec::detail {

// This rank's neighbours and groups in the plan's layout.
struct RankPlace {
  int previous_rank = -1, next_rank = -1;  // the pipeline's (-1: none)
  int64_t tp_index = 0, ep_index = 0, shard_index = 0, expert_shard_index = 0, cp_index = 0;
  std::vector<int> tp_group, ep_group, shard_group, expert_shard_group, cp_group;
  // ep > 1: the expert index of each member of shard_group and of cp_group
  // (their seeds).
  std::vector<int64_t> shard_experts, cp_experts;
  bool dense_buckets = false;  // whether its dense gradient group has other ranks
};

// `sync`'s rank in `plan`'s layout: refused, naming the plan, where the run's
// ranks are not the layout's, the trace is not this rank's shard (tp, ep, cp,
// ZeRO shards) or not its stage.
Result<RankPlace> PlaceRank(const traces::Trace& trace, const traces::Plan& plan,
                            const StepSync& sync, const std::string& plan_source);

}  // namespace ssdtrain::exec::detail

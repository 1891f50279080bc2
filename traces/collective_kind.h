// What a trace's kCollective op does, decided once from its shape: the
// simulator prices it (sim/collective.h) and the executor runs it between the
// tensor-parallel ranks of a group (exec/replay_tensor_parallel.cc).
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "traces/trace.h"

namespace ssdtrain::traces {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter };
// Every kind, in the enum's order (an index of a per-kind array).
inline constexpr std::array<CollectiveKind, 3> kCollectiveKinds = {
    CollectiveKind::kAllReduce, CollectiveKind::kAllGather, CollectiveKind::kReduceScatter};
// "all_reduce", "all_gather", "reduce_scatter".
std::string_view ToString(CollectiveKind kind);

// A kCollective op by its shape: an all-gather writes more than it reads (the
// gathered tensor), a reduce-scatter reads more than it writes (the shard);
// equal sizes are an all-reduce.
CollectiveKind ClassifyCollective(const Op& op);
// The payload S of a kCollective op: the larger of bytes read and written
// (the all-reduce's buffer, the all-gather's output, the reduce-scatter's
// input: the full, unsharded tensor).
int64_t CollectivePayloadBytes(const Op& op);

}  // namespace ssdtrain::traces

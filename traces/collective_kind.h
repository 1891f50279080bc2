// What a trace's kCollective op does, decided once from its name and shape: the
// simulator prices it (sim/collective.h) and the executor runs it between the
// tensor-parallel ranks of a group (exec/replay_tensor_parallel.cc). The
// expert-parallel all-to-all runs over the header's ep ranks, the others over tp.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "traces/trace.h"

namespace ssdtrain::traces {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kAllToAll };
// Every kind, in the enum's order (an index of a per-kind array).
inline constexpr std::array<CollectiveKind, 4> kCollectiveKinds = {
    CollectiveKind::kAllReduce, CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
    CollectiveKind::kAllToAll};
// "all_reduce", "all_gather", "reduce_scatter", "all_to_all".
std::string_view ToString(CollectiveKind kind);

// A kCollective op: named ...all_to_all (kAllToAllSuffix), the expert-parallel
// all-to-all (the MoE dispatch and combine, models/detail/moe.h); else by its
// shape: an all-gather writes more than it reads (the gathered tensor), a
// reduce-scatter reads more than it writes (the shard); equal sizes are an
// all-reduce.
inline constexpr std::string_view kAllToAllSuffix = "all_to_all";
CollectiveKind ClassifyCollective(const Op& op);
// The ranks `kind` runs over in a trace of `header`: ep for the all-to-all, tp else.
int64_t CollectiveRanks(CollectiveKind kind, const Header& header);
// The payload S of a kCollective op: the larger of bytes read and written
// (the all-reduce's buffer, the all-gather's output, the reduce-scatter's
// input: the full, unsharded tensor; the all-to-all's larger buffer, sent or
// received, of which (n − 1)/n crosses the link).
int64_t CollectivePayloadBytes(const Op& op);

}  // namespace ssdtrain::traces

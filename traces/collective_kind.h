// What a trace's kCollective op does and over which ranks, decided once from
// its name and shape: the simulator prices it (sim/collective.h) and the
// executor runs it between the ranks of its group
// (exec/replay_tensor_parallel.cc). The expert-parallel all-to-all runs over
// the header's ep ranks, ZeRO-2/3's gathers and reduce-scatters over its
// zero_shards ranks (the shard group, traces/layout.h), context
// parallelism's K/V ring exchanges between neighbours of the header's cp
// ranks, the others over tp.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "traces/trace.h"

namespace ssdtrain::traces {

// kSendRecv: one step of a ring, each rank sending its buffer to the next
// rank and receiving the previous one's at once (context parallelism's K/V).
enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };
// Every kind, in the enum's order (an index of a per-kind array).
inline constexpr std::array<CollectiveKind, 5> kCollectiveKinds = {
    CollectiveKind::kAllReduce, CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
    CollectiveKind::kAllToAll, CollectiveKind::kSendRecv};
// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv".
std::string_view ToString(CollectiveKind kind);

// A kCollective op: named ...all_to_all (kAllToAllSuffix), the expert-parallel
// all-to-all (the MoE dispatch and combine, models/detail/moe.h); named
// ...cp_ring (kCpRingSuffix), a ring step of context parallelism; named
// ...zero_all_gather or ...zero_reduce_scatter, ZeRO's (below); else by its
// shape: an all-gather writes more than it reads (the gathered tensor), a
// reduce-scatter reads more than it writes (the shard); equal sizes are an
// all-reduce.
inline constexpr std::string_view kAllToAllSuffix = "all_to_all";
CollectiveKind ClassifyCollective(const Op& op);

// The group a kCollective op runs over. ZeRO-3's weight all-gathers are named
// ...zero_all_gather and ZeRO-2/3's gradient reduce-scatters
// ...zero_reduce_scatter (models/detail/zero_shard.h); they run over the
// shard group, each kind on its own stream (FSDP's all-gather and
// reduce-scatter streams): the simulator overlaps them with compute, their
// consumers waiting for them.
// Context parallelism's ring steps are named ...cp_ring
// (models/detail/ring_attention.h): each sends this rank's K/V (and, in
// backward, the running dK/dV) to the next rank of the cp group and receives
// the previous one's, on their own stream, overlapping the attention of the
// step before, as Transformer Engine's P2P ring does.
// The routed experts' ZeRO-2/3 ops (named ...experts.zero_all_gather and
// ...experts.zero_reduce_scatter, kRoutedExperts) run over their own shard group,
// the expert-data-parallel ranks (traces::Layout::ExpertDpGroup): kExpertShard.
enum class CollectiveGroup { kTensorParallel, kExpertParallel, kShard, kExpertShard, kContext };
inline constexpr std::string_view kZeroAllGatherSuffix = "zero_all_gather";
inline constexpr std::string_view kZeroReduceScatterSuffix = "zero_reduce_scatter";
inline constexpr std::string_view kCpRingSuffix = "cp_ring";
// Not a collective: ZeRO-3's copy of a gather's outputs into the full weights
// a run reads, on the compute stream (models/detail/zero_shard.cc, FSDP2's
// copy-out); its i-th input is the gather's i-th output, its i-th output the
// copy (traces::detail::PairRegathers pairs those).
inline constexpr std::string_view kZeroCopyOutSuffix = "zero_copy_out";
// Not a collective either: the cast of a unit's gradients to the reduce dtype
// before its zero_reduce_scatter, on the compute stream (FSDP2's copy-in).
inline constexpr std::string_view kZeroGradCastSuffix = "zero_grad_cast";
// Nor this: the cast of a unit's fp32 weight shards to the weights' dtype
// before its zero_all_gather, on the compute stream (FSDP2's all-gather
// copy-in); its i-th input is the shard, its i-th output what the gather's
// i-th input is (traces::detail::PairRegathers follows it to the shard).
inline constexpr std::string_view kZeroGatherCastSuffix = "zero_gather_cast";
inline constexpr int kZeroGatherStream = 1;
inline constexpr int kZeroReduceStream = 2;
inline constexpr int kCpRingStream = 3;
CollectiveGroup GroupOfCollective(const Op& op);
// The ranks `op` runs over in a trace of `header`: ep for the all-to-all,
// zero_shards for the shard group's, zero_shards / ep for the experts' (no
// HSDP with ep: zero_shards is cp · dp), cp for the ring's, tp else.
int64_t CollectiveRanks(const Op& op, const Header& header);
// The payload S of a kCollective op: the larger of bytes read and written
// (the all-reduce's buffer, the all-gather's output, the reduce-scatter's
// input: the full, unsharded tensor; the all-to-all's larger buffer, sent or
// received, of which (n − 1)/n crosses the link; the ring step's message).
int64_t CollectivePayloadBytes(const Op& op);

}  // namespace ssdtrain::traces

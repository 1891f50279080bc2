// The interconnect by topology: collectives and point-to-point messages priced
// by where their group's ranks sit. Consecutive ranks fill scale-up domains of
// DomainGpus(hw) GPUs (InterconnectOptions); the rank order and the groups are
// the layout's (traces/layout.h), the placement of a group traces::PlaceGroup.
//
// A group of n ranks inside one domain runs NCCL's ring on the scale-up tier
// (sim/collective.h's closed forms at scale_up.GBps and its latency). A group
// over N domains, at most k of its ranks in one, takes the faster of two
// algorithms, as NCCL's tuner picks among its own:
//   ring: one ring through all n ranks. Each domain's crossings go out on the
//         NICs of its k ranks (one per GPU, rail-aligned), so the ring runs at
//         min(scale_up.GBps, k · scale_out.GBps), each step at the network's
//         latency;
//   hierarchical: inside each domain over its k ranks on the scale-up tier,
//         across the N domains on the network with each rank carrying S / k:
//           all-reduce      reduce-scatter(S, k, up) + all-reduce(S/k, N, out)
//                           + all-gather(S, k, up)
//           all-gather      all-gather(S/k, N, out) + all-gather(S, k, up)
//           reduce-scatter  reduce-scatter(S, k, up) + reduce-scatter(S/k, N, out)
// The all-to-all has no ring: each rank sends (n − k)/n of its buffer S over
// its NIC and (k − 1)/n over NVLink at once, the longer of the two, plus
// n − 1 steps of the network's latency.
// A point-to-point message (a pipeline send) is S / p2p bandwidth + latency of
// the tier its two ranks share.
//
// Thread-safety: pure functions (PlaceLayout memoizes its answers per thread).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/collective.h"
#include "sim/hardware.h"
#include "traces/layout.h"

namespace ssdtrain::sim {

// GPUs per scale-up domain: interconnect.domain_gpus, else gpus_per_node, at least 1.
int64_t DomainGpus(const HardwareOptions& hw);

// `kind` over a group placed as `p` (see above); 0 for a group of one rank.
int64_t GroupCollectiveNs(CollectiveKind kind, int64_t payload_bytes,
                          const traces::GroupPlacement& p, const InterconnectOptions& ic);
// The tier a group's collectives run on: scale_up for a group inside one
// domain, else scale_out (whose ring crosses the network).
inline const LinkTier& GroupTier(const traces::GroupPlacement& p, const InterconnectOptions& ic) {
  return p.within_one_domain() ? ic.scale_up : ic.scale_out;
}
// The SMs a NCCL collective over the group holds while it runs: its tier's
// collective_sms; 0 for a group of one rank, which exchanges nothing.
inline int GroupCollectiveSms(const traces::GroupPlacement& p, const InterconnectOptions& ic) {
  return p.ranks > 1 ? GroupTier(p, ic).collective_sms : 0;
}
// One message of `bytes` between two ranks, inside one domain or not.
int64_t MessageNs(int64_t bytes, bool within_domain, const InterconnectOptions& ic);

// A layout's groups on the hardware, as the first rank of pipeline stage
// `stage` has them (every group of a kind is placed alike when the domain
// size and the degrees are powers of two, as on every preset).
struct LayoutLinks {
  traces::GroupPlacement tp;                // tensor-parallel collectives
  traces::GroupPlacement ep;                // the MoE all-to-alls
  traces::GroupPlacement gradients;         // the dense gradients' dp × cp group
  traces::GroupPlacement expert_gradients;  // the experts' data-parallel group
  traces::GroupPlacement expert_shard;      // the experts' shard group (Layout::ExpertShardGroup)
  // The experts' gradient buckets' group (traces::Layout::ExpertGradientGroup:
  // expert_gradients at ZeRO 0 and 1, the replica group at 2 and 3: this rank
  // alone without HSDP).
  traces::GroupPlacement expert_buckets;
  traces::GroupPlacement shard;  // ZeRO's shard group (itself at stage 0)
  // The dense gradient buckets' group (traces::Layout::DenseGradientGroup:
  // dp × cp at ZeRO 0 and 1, HSDP's replica group at 2 and 3).
  traces::GroupPlacement dense_buckets;
  bool next_stage_within_domain = true;  // the pipeline send to stage + 1
};
LayoutLinks PlaceLayout(const traces::Layout& layout, const HardwareOptions& hw, int64_t stage = 0);
// ParamGatherGroup: the group ZeRO-1 and 2 all-gather the updated parameters
// over after the optimizer (dp × cp at 1, the shard group at 2); the routed
// experts' (ExpertParamGatherGroup): their data-parallel group at 1, their
// shard group at 2.
traces::GroupPlacement ParamGatherGroup(int64_t zero_stage, const LayoutLinks& links);
traces::GroupPlacement ExpertParamGatherGroup(int64_t zero_stage, const LayoutLinks& links);

// A group of `ranks` ranks all inside one domain: the flat ring (tests, and
// callers that know no layout).
traces::GroupPlacement OneDomain(int64_t ranks);

}  // namespace ssdtrain::sim

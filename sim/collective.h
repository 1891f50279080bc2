// Collectives priced by kind, as rings over n ranks (the NCCL ring algorithms;
// Patarasuk and Yuan's bandwidth-optimal all-reduce):
//   all-reduce      2·(n−1)/n · S / B  +  2·(n−1) · latency
//   all-gather      (n−1)/n · S / B    +  (n−1) · latency
//   reduce-scatter  (n−1)/n · S / B    +  (n−1) · latency
//   all-to-all      (n−1)/n · S / B    +  (n−1) · latency
// S is the collective's payload: the full (unsharded) tensor, i.e. the
// all-reduce's buffer, the all-gather's output, the reduce-scatter's input;
// for the all-to-all (expert parallelism's dispatch and combine) each rank's
// buffer, of which it keeps 1/n and sends (n−1)/n, one piece to each peer
// (NCCL's pairwise exchange: n−1 steps).
// B is the per-rank link bandwidth (1e9 B/s), latency the per-step link latency.
// Every duration is 0 when n <= 1 and rounds up to whole nanoseconds.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "sim/hardware.h"
#include "traces/collective_kind.h"
#include "traces/layout.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

// What a kCollective op is, and its payload S: decided in traces/, which the
// executor's tensor-parallel ranks read too.
using traces::ClassifyCollective;
using traces::CollectiveKind;
using traces::CollectivePayloadBytes;
using traces::ToString;

// The ring's time for `payload_bytes` over `n` ranks (see the formulas above).
int64_t CollectiveNs(CollectiveKind kind, int64_t payload_bytes, int64_t n, double GBps,
                     double latency_us);

// One point-to-point message (a pipeline send between stages): S / B + latency.
int64_t SendNs(int64_t bytes, double GBps, double latency_us);

// The data-parallel exchange of a step by ZeRO stage. 0 (PyTorch DDP,
// Megatron's default): the gradients are all-reduced. 1 (Megatron's
// distributed optimizer, --use-distributed-optimizer): they are
// reduce-scattered in the same buckets, each rank updates its 1/n of the
// parameters, and the updated parameters are all-gathered after the optimizer:
// the same bytes on the link as an all-reduce, half of them after the step's
// compute (megatron/core/distributed/param_and_grad_buffer.py). 2 and 3: the
// trace reduce-scatters each layer's gradients over the shard group itself
// (models/detail/zero_shard.cc); what is left is HSDP's all-reduce of the
// shards over the replica group, in buckets, and at 2 the parameters'
// all-gather after the optimizer (3 gathers them layer by layer in the next
// step's trace instead).
CollectiveKind GradientCollective(int64_t zero_stage);
// The all-gather of `param_bytes` (the stage's parameters in their dtype, the
// gathered size) over the group placed as `group` after the optimizer at
// ZeRO 1 and 2 (sim/topology.h prices it); 0 at 0 and 3.
int64_t ParamAllGatherNs(int64_t zero_stage, int64_t param_bytes,
                         const traces::GroupPlacement& group, const InterconnectOptions& ic);

// Data-parallel gradients exchanged in buckets while backward runs (PyTorch
// DDP, Megatron's overlapped gradient reduction). The buckets themselves, which
// gradients and how many bytes, are the trace's (traces/dp_buckets.h); here
// only their timing: each bucket's collective (`kind`: an all-reduce, or
// ZeRO-1's reduce-scatter) starts when its last gradient is ready and the
// previous bucket's has ended (one ring at a time on the data-parallel link).
struct BucketReady {
  int64_t ready_ns = 0;  // when backward has produced its last gradient
  int64_t bytes = 0;
  // Where its group's ranks sit (the dense gradients' dp × cp group, or the
  // experts' data-parallel group: traces::BucketTable::GroupSize ranks).
  traces::GroupPlacement group;
};
struct BucketSpan {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t bytes = 0;
};
// The buckets' collectives, in the buckets' order, one after another on the
// link, each priced by its group's placement (sim/topology.h); empty when no
// bucket's group has more than one rank. A bucket whose own group has one
// rank (the experts' at ep = dp) sends nothing: its span is empty (start =
// end, bytes 0) and does not hold the link.
std::vector<BucketSpan> BucketCollectives(const std::vector<BucketReady>& buckets,
                                          CollectiveKind kind, const InterconnectOptions& ic);

}  // namespace ssdtrain::sim

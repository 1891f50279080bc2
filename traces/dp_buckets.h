// The data-parallel gradient buckets of a stage, decided once: which weight
// gradients each bucket holds, in which order, how many bytes, and after which
// op of the last micro-batch's backward it is complete. The simulator
// (sim/data_parallel.cc) prices one collective per bucket from these; the
// executor (exec/replay_gradients.cc) all-reduces these buckets, each as soon
// as it is complete. Neither forms buckets of its own.
//
// The rule (Megatron-LM's overlapped gradient reduction,
// megatron/core/distributed/distributed_data_parallel.py and
// param_and_grad_buffer.py; PyTorch DDP's Reducer buckets the same way with
// a 25 MiB cap):
// - Which gradients: every weight gradient storage (IsWeightGradient, one row
//   per storage root: a view is its storage).
// - Order: the order in which the last micro-batch's backward completes them,
//   a gradient being complete after the last backward op of that micro-batch
//   that writes it (its producer, or under accumulation the last writer:
//   traces/FORMAT.md); ties (one op writing several) in the op's output order.
//   A gradient no such op writes is complete after the last op of that
//   backward, after the others. Megatron lays its buffer out in the reverse of
//   the parameters' definition order, which is this order for a sequential
//   model; here it is read off the trace instead of assumed.
// - Size: gradients join the open bucket in that order; a bucket is closed
//   once it holds at least BucketParams(dp) elements, or when the next
//   gradient has another dtype (a bucket is one contiguous buffer of one type,
//   as Megatron keeps one buffer per dtype), or after the last gradient.
//   A gradient larger than the cap is a bucket of its own.
// - Complete after: the bucket's last gradient's completing op (the latest of
//   its gradients', by the order above).
// - Groups (Megatron-Core's DistributedDataParallel,
//   megatron/core/distributed/distributed_data_parallel.py at d98e8a64, keeps
//   the experts' parameters, allreduce = False, in buffers of their own,
//   expert_parallel_buffers, of the same bucket_size, reduced over the
//   expert-data-parallel group of parallel_state): the routed experts'
//   gradients (IsRoutedExpert) form buckets of their own by the rule
//   above, all-reduced over the expert-data-parallel group of
//   ExpertDataParallel(dp, ep) ranks; every other gradient's buckets
//   (attention, router, shared expert, embeddings) go over the dp group. The
//   table lists both kinds in one list, in the order their buckets complete
//   (ties in closing order): a dense model's table is the rule's alone.
// A trace without weight gradients has no buckets.
//
// Thread-safety: pure functions; a BucketTable is a value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

// Megatron-LM's default bucket: max(4e7, 1e6 · dp) parameters
// (DistributedDataParallel's default when DistributedDataParallelConfig's
// bucket_size, "maximum number of parameters in each bucket", is unset).
inline constexpr int64_t kBucketMinParams = 40'000'000;
inline constexpr int64_t kBucketParamsPerRank = 1'000'000;
// The elements at which a bucket of `dp` data-parallel ranks closes.
int64_t BucketParams(int64_t dp);

// The ranks of the expert-data-parallel group. Megatron-Core
// (megatron/core/parallel_state.py at d98e8a64, initialize_model_parallel):
// expert_data_parallel_size = world_size / (etp·ep·pp), etp defaulting to
// tp, i.e. dp·tp·cp / (ep·etp). Here the experts are split over tp (etp = tp,
// cp = 1, models/detail/moe.h), so dp / ep; `ep` divides `dp` (the planner
// and the layout refuse anything else). At least 1.
int64_t ExpertDataParallel(int64_t dp, int64_t ep);

// The routed experts' name in a layer (models/detail/moe.cc builds a rank's
// experts as one grouped MLP, "experts.fc1" ... "experts.fc2.weight").
inline constexpr std::string_view kRoutedExperts = "experts";
// Whether weight `t`, or weight gradient `t`, is the routed experts': its
// name, after the layer prefix "L<layer>.", begins "experts." (kRoutedExperts;
// traces/FORMAT.md). The shared expert and the router are not routed experts.
// These are the parameters ZeRO-1 shards over the expert-data-parallel group
// (models/detail/trace_builder.cc, the optimizer's expert groups) and whose
// gradients are bucketed over it.
bool IsRoutedExpert(const Tensor& t);

// Which group a bucket is all-reduced over (the "Groups" rule above).
enum class BucketGroup { kDataParallel, kExpertDataParallel };

struct GradientBucket {
  std::vector<TensorId> gradients;  // storage roots, in the order above
  std::vector<int64_t> offsets;     // each gradient's byte offset in the bucket
  int64_t bytes = 0;                // the sum of the gradients' bytes
  DType dtype = DType::kFp16;       // every gradient's
  OpId complete_after = kNoOp;      // kNoOp only in a trace without backward ops
  BucketGroup group = BucketGroup::kDataParallel;

  int64_t elements() const { return bytes / DTypeSize(dtype); }
};

struct BucketTable {
  int64_t dp = 1;
  int64_t expert_dp = 1;      // ExpertDataParallel(dp, the trace header's ep)
  int64_t bucket_params = 0;  // BucketParams(dp), for both groups' buckets
  std::vector<GradientBucket> buckets;
  int64_t bytes = 0;  // all buckets'

  // The ranks bucket `b` is all-reduced over: dp, or expert_dp.
  int64_t GroupSize(const GradientBucket& b) const {
    return b.group == BucketGroup::kExpertDataParallel ? expert_dp : dp;
  }
  // What one rank sends of bucket `b` in its ring all-reduce over its group's
  // n ranks: 2·(n − 1)/n of its bytes (rounded down); 0 when n = 1.
  int64_t RingBytes(const GradientBucket& b) const {
    const int64_t n = GroupSize(b);
    return n <= 1 ? 0 : 2 * (n - 1) * b.bytes / n;
  }
};

// The buckets of `trace`: one micro-batch of a stage, or its whole step
// (traces/whole_step.h; then "the last micro-batch" is its last, and the two
// tables have the same gradients, order and bytes, their complete_after being
// the same op's copies). `dp` >= 1; with dp == 1 the table is what the rule
// gives, though nothing is exchanged.
BucketTable GradientBuckets(const Trace& trace, int64_t dp);

// When the buckets are exchanged: the plan's `ddp` (traces/plan.h), which the
// simulator (sim/data_parallel.cc) and the replay (exec/replay_gradients.cc)
// both read through BucketsWaitForBackward.
// - kOverlapped ("overlapped", the default): each bucket as soon as it is
//   complete, during the last micro-batch's backward (PyTorch DDP, Megatron's
//   --DDP-impl torch, Megatron-Core's overlapped grad reduce).
// - kLocal ("local"): Megatron-LM's --DDP-impl local (megatron/model/
//   distributed.py at 6985e589, allreduce_gradients, called by train_step in
//   megatron/training.py after forward_backward_func returns): nothing starts
//   before the stage's whole backward of the step has ended, then the
//   gradients are all-reduced, not overlapped with any compute. (Megatron
//   packs them into one flat tensor per dtype; here the same bytes go as the
//   table's buckets back to back, each bucket adding its ring's latency.)
enum class DdpImpl { kOverlapped, kLocal };
// "overlapped" or "local"; the error names `field`.
Result<DdpImpl> ParseDdpImpl(std::string_view s, const std::string& field = "ddp");
std::string_view ToString(DdpImpl d);
// Whether no bucket may start before the stage's step backward has ended.
constexpr bool BucketsWaitForBackward(DdpImpl d) { return d == DdpImpl::kLocal; }

}  // namespace ssdtrain::traces

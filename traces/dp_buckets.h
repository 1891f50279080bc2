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

struct GradientBucket {
  std::vector<TensorId> gradients;  // storage roots, in the order above
  std::vector<int64_t> offsets;     // each gradient's byte offset in the bucket
  int64_t bytes = 0;                // the sum of the gradients' bytes
  DType dtype = DType::kFp16;       // every gradient's
  OpId complete_after = kNoOp;      // kNoOp only in a trace without backward ops

  int64_t elements() const { return bytes / DTypeSize(dtype); }
};

struct BucketTable {
  int64_t dp = 1;
  int64_t bucket_params = 0;  // BucketParams(dp)
  std::vector<GradientBucket> buckets;
  int64_t bytes = 0;  // all buckets'
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

#include "traces/dp_buckets.h"

#include <algorithm>
#include <utility>

#include "traces/storage_plan.h"
#include "traces/whole_step.h"

namespace ssdtrain::traces {
namespace {

struct Completion {
  OpId op = kNoOp;   // the completing op; the end of backward for unwritten ones
  int64_t rank = 0;  // position in that op's outputs; after them all when unwritten
  TensorId gradient = 0;
};

// Each weight gradient storage with the op of the last micro-batch's backward
// after which it is final, in that order (dp_buckets.h, "Order").
std::vector<Completion> CompletionOrder(const Trace& trace) {
  const int64_t last = MicroBatchesIn(trace) - 1;
  std::vector<OpId> writer(trace.tensors.size(), kNoOp);
  std::vector<int64_t> rank(trace.tensors.size(), 0);
  OpId last_backward = kNoOp;
  for (const Op& op : trace.ops) {
    if (op.phase != Phase::kBackward || op.micro_batch != last) continue;
    last_backward = op.id;
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      const auto s = static_cast<size_t>(trace.StorageOf(op.outputs[i]));
      writer[s] = op.id;
      rank[s] = static_cast<int64_t>(i);
    }
  }
  std::vector<Completion> out;
  for (const Tensor& t : trace.tensors) {
    if (t.alias_of || !IsWeightGradient(trace, t)) continue;
    const auto s = static_cast<size_t>(t.id);
    if (writer[s] != kNoOp) {
      out.push_back({writer[s], rank[s], t.id});
    } else {
      out.push_back({last_backward, static_cast<int64_t>(trace.tensors.size()), t.id});
    }
  }
  // kNoOp (-1, no backward at all) sorts first; then every gradient is
  // unwritten and keeps its id order.
  std::stable_sort(out.begin(), out.end(), [](const Completion& a, const Completion& b) {
    return std::pair(a.op, a.rank) < std::pair(b.op, b.rank);
  });
  return out;
}

}  // namespace

int64_t BucketParams(int64_t dp) {
  return std::max(kBucketMinParams, kBucketParamsPerRank * std::max<int64_t>(dp, 1));
}

BucketTable GradientBuckets(const Trace& trace, int64_t dp) {
  BucketTable table;
  table.dp = std::max<int64_t>(dp, 1);
  table.bucket_params = BucketParams(dp);
  GradientBucket open;
  auto close = [&] {
    if (open.gradients.empty()) return;
    table.bytes += open.bytes;
    table.buckets.push_back(std::move(open));
    open = GradientBucket{};
  };
  for (const Completion& c : CompletionOrder(trace)) {
    const Tensor& g = trace.tensor(c.gradient);
    if (!open.gradients.empty() && g.dtype != open.dtype) close();
    open.dtype = g.dtype;
    open.offsets.push_back(open.bytes);
    open.gradients.push_back(g.id);
    open.bytes += g.bytes;
    open.complete_after = c.op;
    if (open.elements() >= table.bucket_params) close();
  }
  close();
  return table;
}

Result<DdpImpl> ParseDdpImpl(std::string_view s, const std::string& field) {
  if (s == "overlapped") return DdpImpl::kOverlapped;
  if (s == "local") return DdpImpl::kLocal;
  return Status::InvalidArgument(field + ": expected \"overlapped\" or \"local\", got \"" +
                                 std::string(s) + "\"");
}

std::string_view ToString(DdpImpl d) { return d == DdpImpl::kLocal ? "local" : "overlapped"; }

}  // namespace ssdtrain::traces

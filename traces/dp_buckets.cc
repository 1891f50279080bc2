#include "traces/dp_buckets.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <utility>

#include "traces/layout.h"
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

int64_t ExpertDataParallel(int64_t dp, int64_t ep) {
  Layout layout;  // the one definition (traces/layout.h), at cp 1
  layout.dp = std::max<int64_t>(dp, 1);
  layout.ep = std::max<int64_t>(ep, 1);
  return std::max<int64_t>(1, layout.ExpertDp());
}

bool IsRoutedExpert(const Tensor& t) {
  std::string_view name = t.name;
  // The layer prefix "L<digits>.", when there is one.
  if (name.size() > 1 && name[0] == 'L' && std::isdigit(static_cast<unsigned char>(name[1]))) {
    const size_t dot = name.find('.');
    if (dot == std::string_view::npos) return false;
    name.remove_prefix(dot + 1);
  }
  return name.size() > kRoutedExperts.size() && name.starts_with(kRoutedExperts) &&
         name[kRoutedExperts.size()] == '.';
}

int64_t BucketParams(int64_t dp) {
  return std::max(kBucketMinParams, kBucketParamsPerRank * std::max<int64_t>(dp, 1));
}

BucketTable GradientBuckets(const Trace& trace, int64_t dp) {
  BucketTable table;
  table.dp = std::max<int64_t>(dp, 1);
  table.expert_dp = ExpertDataParallel(dp, trace.header.ep);
  table.bucket_params = BucketParams(dp);
  // The open bucket of each group, dense and expert.
  GradientBucket open[2];
  open[1].group = BucketGroup::kExpertDataParallel;
  auto close = [&](GradientBucket& b) {
    if (b.gradients.empty()) return;
    const BucketGroup group = b.group;
    table.bytes += b.bytes;
    table.buckets.push_back(std::move(b));
    b = GradientBucket{};
    b.group = group;
  };
  for (const Completion& c : CompletionOrder(trace)) {
    const Tensor& g = trace.tensor(c.gradient);
    GradientBucket& b = open[IsRoutedExpert(g) ? 1 : 0];
    if (!b.gradients.empty() && g.dtype != b.dtype) close(b);
    b.dtype = g.dtype;
    b.offsets.push_back(b.bytes);
    b.gradients.push_back(g.id);
    b.bytes += g.bytes;
    b.complete_after = c.op;
    if (b.elements() >= table.bucket_params) close(b);
  }
  close(open[0]);
  close(open[1]);
  // One group's buckets close in completion order; the two groups interleave
  // by it, a bucket completed by no op (kNoOp: the end of backward) last, as
  // CompletionOrder puts it; a tie keeps the closing order, dense first at the
  // end. A dense table is already in order.
  auto at = [](const GradientBucket& b) {
    return b.complete_after == kNoOp ? std::numeric_limits<OpId>::max() : b.complete_after;
  };
  std::stable_sort(table.buckets.begin(), table.buckets.end(),
                   [&](const GradientBucket& a, const GradientBucket& b) { return at(a) < at(b); });
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

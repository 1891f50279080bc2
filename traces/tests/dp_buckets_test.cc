// GradientBuckets: the data-parallel buckets of a stage (traces/dp_buckets.h).
#include "traces/dp_buckets.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "traces/validate.h"
#include "traces/whole_step.h"

namespace ssdtrain::traces {
namespace {

// A chain of layers 0..n−1: forward f_i (a_{i−1}, w_i) -> a_i, a loss, then
// backward b_i for i = n−1 down to 0: (d_{i+1}, a_i) -> (d_i, g_i) (b_0: g_0
// alone), and one
// optimizer op reading every g_i and w_i. g_i has grad_bytes[i] bytes of
// dtypes[i]. Producers and consumers follow from the ops.
Trace GradientChain(const std::vector<int64_t>& grad_bytes, const std::vector<DType>& dtypes) {
  Trace t;
  t.header.model = "chain";
  t.header.family = "gpt";
  t.header.hidden = 8;
  t.header.heads = 1;
  t.header.layers = static_cast<int64_t>(grad_bytes.size());
  t.header.stage_layers = t.header.layers;
  t.header.seq_len = 1;
  t.header.micro_batch = 1;
  auto tensor = [&](std::string name, TensorKind kind, int64_t bytes, DType dtype, int layer) {
    Tensor x;
    x.id = static_cast<TensorId>(t.tensors.size());
    x.name = std::move(name);
    x.kind = kind;
    x.bytes = bytes;
    x.dtype = dtype;
    x.shape = {bytes / DTypeSize(dtype)};
    x.layer = layer;
    t.tensors.push_back(x);
    return x.id;
  };
  auto op = [&](std::string name, OpKind kind, Phase phase, std::vector<TensorId> in,
                std::vector<TensorId> out, int layer) {
    Op o;
    o.id = static_cast<OpId>(t.ops.size());
    o.name = std::move(name);
    o.kind = kind;
    o.phase = phase;
    o.layer = layer;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.flops = 1000;
    for (TensorId i : o.inputs) t.tensors[static_cast<size_t>(i)].consumers.push_back(o.id);
    for (TensorId i : o.outputs) t.tensors[static_cast<size_t>(i)].producer = o.id;
    t.ops.push_back(o);
  };
  const int n = static_cast<int>(grad_bytes.size());
  std::vector<TensorId> w, a, g;
  TensorId prev = tensor("x", TensorKind::kInput, 64, DType::kFp32, kNoLayer);
  for (int i = 0; i < n; ++i) {
    const std::string l = std::to_string(i);
    w.push_back(tensor("w" + l, TensorKind::kWeight, grad_bytes[i], dtypes[i], i));
    a.push_back(tensor("a" + l, TensorKind::kActivation, 64, DType::kFp32, i));
    t.tensors.back().saved_for_backward = true;
    op("f" + l, OpKind::kGemm, Phase::kForward, {prev, w.back()}, {a.back()}, i);
    prev = a.back();
  }
  TensorId d = tensor("loss", TensorKind::kActivation, 4, DType::kFp32, kNoLayer);
  op("loss", OpKind::kLoss, Phase::kForward, {prev}, {d}, kNoLayer);
  g.resize(static_cast<size_t>(n));
  for (int i = n - 1; i >= 0; --i) {
    const std::string l = std::to_string(i);
    // Layer 0 has no activation gradient to pass on (one nobody read would
    // be a weight gradient: IsWeightGradient).
    const TensorId di =
        i > 0 ? tensor("d" + l, TensorKind::kGradient, 64, DType::kFp32, i) : kNoOp;
    g[static_cast<size_t>(i)] = tensor("g" + l, TensorKind::kGradient, grad_bytes[i], dtypes[i], i);
    std::vector<TensorId> out = {g[static_cast<size_t>(i)]};
    if (i > 0) out.insert(out.begin(), di);
    op("b" + l, OpKind::kGemm, Phase::kBackward, {d, a[static_cast<size_t>(i)]}, out, i);
    d = di;
  }
  std::vector<TensorId> opt_in = g;
  opt_in.insert(opt_in.end(), w.begin(), w.end());
  op("adam", OpKind::kOptimizer, Phase::kOptimizer, opt_in, {}, kNoLayer);
  return t;
}

constexpr int64_t kMillion = 1'000'000;

TEST(GradientBuckets, MegatronSizeIsFortyMillionOrAMillionPerRank) {
  EXPECT_EQ(BucketParams(1), 40 * kMillion);
  EXPECT_EQ(BucketParams(40), 40 * kMillion);
  EXPECT_EQ(BucketParams(64), 64 * kMillion);
}

// The chain's ops: f0..f3 are 0..3, the loss 4, b3 5, b2 6, b1 7, b0 8.
TensorId GradientOf(const Trace& t, OpId backward) { return t.op(backward).outputs.back(); }

TEST(GradientBuckets, FollowTheBackwardAndCloseAtTheCap) {
  // fp32 gradients of 30, 20, 50, 10 M elements on layers 0..3; backward
  // completes g3, g2, g1, g0. At dp 2 the cap is max(40 M, 2 M) = 40 M:
  // g3 (10 M) + g2 (50 M) = 60 M >= 40 M closes {g3, g2} after b2;
  // g1 (20 M) + g0 (30 M) = 50 M closes {g1, g0} after b0.
  const std::vector<int64_t> elements = {30 * kMillion, 20 * kMillion, 50 * kMillion,
                                         10 * kMillion};
  std::vector<int64_t> bytes;
  for (int64_t e : elements) bytes.push_back(4 * e);
  const Trace t = GradientChain(bytes, std::vector<DType>(4, DType::kFp32));
  ASSERT_TRUE(Validate(t, "chain").ok()) << Validate(t, "chain").message();
  const BucketTable table = GradientBuckets(t, 2);
  EXPECT_EQ(table.bucket_params, 40 * kMillion);
  ASSERT_EQ(table.buckets.size(), 2u);
  EXPECT_EQ(table.buckets[0].gradients,
            (std::vector<TensorId>{GradientOf(t, 5), GradientOf(t, 6)}));
  EXPECT_EQ(table.buckets[0].bytes, 4 * 60 * kMillion);
  EXPECT_EQ(table.buckets[0].offsets, (std::vector<int64_t>{0, 4 * 10 * kMillion}));
  EXPECT_EQ(table.buckets[0].complete_after, 6);
  EXPECT_EQ(table.buckets[1].gradients,
            (std::vector<TensorId>{GradientOf(t, 7), GradientOf(t, 8)}));
  EXPECT_EQ(table.buckets[1].bytes, 4 * 50 * kMillion);
  EXPECT_EQ(table.buckets[1].complete_after, 8);
  EXPECT_EQ(table.bytes, 4 * 110 * kMillion);
}

TEST(GradientBuckets, ADtypeChangeClosesTheBucket) {
  // 1 M elements each, g3 and g2 fp16, g1 and g0 fp32: two buckets far
  // under the cap, split where the dtype changes.
  const Trace t = GradientChain({4 * kMillion, 4 * kMillion, 2 * kMillion, 2 * kMillion},
                                {DType::kFp32, DType::kFp32, DType::kFp16, DType::kFp16});
  const BucketTable table = GradientBuckets(t, 8);
  ASSERT_EQ(table.buckets.size(), 2u);
  EXPECT_EQ(table.buckets[0].dtype, DType::kFp16);
  EXPECT_EQ(table.buckets[0].bytes, 4 * kMillion);
  EXPECT_EQ(table.buckets[0].elements(), 2 * kMillion);
  EXPECT_EQ(table.buckets[1].dtype, DType::kFp32);
  EXPECT_EQ(table.buckets[1].elements(), 2 * kMillion);
}

TEST(GradientBuckets, AGradientOverTheCapIsABucketOfItsOwn) {
  // 100 M elements at dp 64 (cap 64 M): g1 alone, then g0.
  const Trace t = GradientChain({2 * kMillion, 200 * kMillion}, {DType::kFp16, DType::kFp16});
  const BucketTable table = GradientBuckets(t, 64);
  EXPECT_EQ(table.bucket_params, 64 * kMillion);
  ASSERT_EQ(table.buckets.size(), 2u);
  EXPECT_EQ(table.buckets[0].elements(), 100 * kMillion);
  EXPECT_EQ(table.buckets[1].elements(), kMillion);
}

TEST(GradientBuckets, AWholeStepHasTheSameBucketsCompleteInItsLastMicroBatch) {
  const Trace t = GradientChain({160 * kMillion, 80 * kMillion, 120 * kMillion},
                                std::vector<DType>(3, DType::kFp32));
  Plan p;
  p.model = t.header.model;
  p.trace_fingerprint = Fingerprint(t);
  p.num_micro_batches = 3;
  p.schedule = "1f1b";
  auto whole = UnrollStep(t, p, "p.json");
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  const BucketTable one = GradientBuckets(t, 2), all = GradientBuckets(whole->trace, 2);
  ASSERT_EQ(one.buckets.size(), all.buckets.size());
  for (size_t b = 0; b < one.buckets.size(); ++b) {
    EXPECT_EQ(one.buckets[b].gradients, all.buckets[b].gradients);
    EXPECT_EQ(one.buckets[b].bytes, all.buckets[b].bytes);
    const OpId done = all.buckets[b].complete_after;
    EXPECT_EQ(whole->trace.op(done).micro_batch, 2);
    EXPECT_EQ(whole->original_op[static_cast<size_t>(done)], one.buckets[b].complete_after);
  }
}

TEST(GradientBuckets, NoWeightGradientsNoBuckets) {
  Trace t = GradientChain({400}, {DType::kFp32});
  t.tensors.resize(t.tensors.size());
  for (Tensor& x : t.tensors) {
    if (x.kind == TensorKind::kGradient) x.kind = TensorKind::kActivation;
  }
  EXPECT_TRUE(GradientBuckets(t, 2).buckets.empty());
}

}  // namespace
}  // namespace ssdtrain::traces

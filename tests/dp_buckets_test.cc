// The data-parallel buckets (traces/dp_buckets.h) of a GPT over 40 M
// parameters against their closed form. h 1024, 4 layers, vocabulary 4096,
// sequence 32, fp32; ffn 4h; the LM head tied to the word embedding.
//
// Parameters: a block has P = 12h² + 13h (qkv 3h² + 3h, proj h² + h,
// fc1 4h² + 4h, fc2 4h² + h, two layernorms 2h each), the final norm 2h, the
// embeddings V·h + s·h: 4P + 2h + Vh + sh = 54 614 016.
// Backward completes the final norm's gradient, then each block from the last
// to the first (fc2's bias, fc2, fc1, ln2, proj's bias, proj, qkv, ln1), then
// the word embedding (its last writer is the embedding's backward, after the
// head's) and the position embedding.
#include <gtest/gtest.h>

#include <vector>

#include "models/build_trace.h"
#include "models/model_config.h"
#include "traces/dp_buckets.h"

namespace ssdtrain {
namespace {

constexpr int64_t kH = 1024, kLayers = 4, kVocab = 4096, kSeq = 32;
constexpr int64_t kBlock = 12 * kH * kH + 13 * kH;
constexpr int64_t kParams = kLayers * kBlock + 2 * kH + kVocab * kH + kSeq * kH;

traces::Trace MidGpt() {
  models::ModelConfig c;
  c.name = "mid-gpt";
  c.family = "gpt";
  c.hidden = kH;
  c.heads = 8;
  c.layers = kLayers;
  c.vocab = kVocab;
  c.seq_len = kSeq;
  c.micro_batch = 1;
  c.dtype = "fp32";
  auto count = models::ParameterCount(c);
  EXPECT_TRUE(count.ok());
  EXPECT_EQ(count.ok() ? *count : 0, kParams);
  auto trace = models::BuildTrace(c, 0);
  EXPECT_TRUE(trace.ok()) << trace.status().message();
  return trace.ok() ? std::move(*trace) : traces::Trace{};
}

std::vector<int64_t> Elements(const traces::BucketTable& t) {
  std::vector<int64_t> out;
  for (const traces::GradientBucket& b : t.buckets) {
    EXPECT_EQ(b.dtype, traces::DType::kFp32);
    EXPECT_EQ(b.bytes, 4 * b.elements());
    out.push_back(b.elements());
  }
  return out;
}

TEST(GptBuckets, AtDpTwoTheFortyMillionCapClosesAtTheFirstBlocksFc2) {
  // The final norm and blocks 3, 2, 1 hold 2h + 3P = 37 790 720 < 40 M; the
  // first block's fc2 bias and weight (h + 4h²) pass it: 41 986 048. The rest
  // of block 0 and the embeddings are the second bucket: 12 627 968.
  const traces::Trace t = MidGpt();
  const traces::BucketTable table = traces::GradientBuckets(t, 2);
  EXPECT_EQ(table.bucket_params, 40'000'000);
  const int64_t first = 2 * kH + 3 * kBlock + kH + 4 * kH * kH;
  EXPECT_EQ(first, 41'986'048);
  EXPECT_EQ(Elements(table), (std::vector<int64_t>{first, kParams - first}));
  EXPECT_EQ(table.bytes, 4 * kParams);
  // Bucket 0 is complete after block 0's fc2 weight gradient, bucket 1 after
  // the embedding's backward; the ops in issue order.
  ASSERT_EQ(table.buckets.size(), 2u);
  EXPECT_EQ(t.op(table.buckets[0].complete_after).name, "L0.fc2.wgrad");
  EXPECT_EQ(t.op(table.buckets[1].complete_after).name, "embedding.bwd");
  EXPECT_EQ(t.tensor(table.buckets[0].gradients.front()).name, "final_norm.weight.grad");
}

TEST(GptBuckets, AtDpFortyEightTheCapIsFortyEightMillion) {
  // max(4e7, 48·1e6) = 48 M. Bucket 0: the final norm (2h), blocks 3..1
  // (3P) and block 0 up to its qkv weight, which passes the cap before the
  // qkv bias (3h) its op also writes joins: 2h + 4P − 2h − 3h = 50 381 824.
  // Bucket 1: block 0's qkv bias and ln1 and the embeddings,
  // 3h + 2h + Vh + sh = 4 232 192.
  const traces::BucketTable table = traces::GradientBuckets(MidGpt(), 48);
  EXPECT_EQ(table.bucket_params, 48'000'000);
  EXPECT_EQ(Elements(table),
            (std::vector<int64_t>{4 * kBlock - 3 * kH, 5 * kH + kVocab * kH + kSeq * kH}));
}

TEST(GptBuckets, AtDpSixtyFourOneBucketHoldsThemAll) {
  // 64 M > 54.6 M: one bucket, complete after the last backward op that
  // writes a gradient.
  const traces::BucketTable table = traces::GradientBuckets(MidGpt(), 64);
  EXPECT_EQ(Elements(table), (std::vector<int64_t>{kParams}));
}

}  // namespace
}  // namespace ssdtrain

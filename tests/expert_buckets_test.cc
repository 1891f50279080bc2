// The gradient buckets of a MoE model by group (traces/dp_buckets.h) and
// their price (sim/collective.h), in closed form. tiny-moe
// (configs/models/tiny-moe.json): h 256, 4 layers of which the first is
// dense, E = 8 routed experts of width f = 256, a gated shared expert, fp32.
// A rank holds E/ep routed experts, each 3·f·h parameters (fc1 2f·h, fc2
// h·f), in each of the 3 MoE layers: their gradients are one bucket of their
// own (far under Megatron's 40 M cap), all-reduced over the
// expert-data-parallel group of dp / ep ranks; every other gradient (the
// attention, the router, the shared expert and its gate, the dense layer, the
// embeddings) is one bucket over dp, the same at every ep.
#include <gtest/gtest.h>

#include <vector>

#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/collective.h"
#include "sim/data_parallel.h"
#include "sim/topology.h"
#include "tests/cli_util.h"
#include "traces/dp_buckets.h"
#include "traces/layout.h"

namespace ssdtrain {
namespace {

constexpr int64_t kH = 256, kF = 256, kExperts = 8, kMoeLayers = 3, kDp = 4;
constexpr int64_t kExpertParams = 3 * kF * kH;  // 196 608

models::ModelConfig TinyMoe(int64_t ep) {
  auto c = models::LoadModelConfig(testing::SourceDir() + "/configs/models/tiny-moe.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  models::ModelConfig config = c.ok() ? *c : models::ModelConfig{};
  config.dp = kDp;
  config.ep = ep;
  return config;
}

traces::BucketTable Buckets(int64_t ep) {
  auto trace = models::BuildTrace(TinyMoe(ep), 0);
  EXPECT_TRUE(trace.ok()) << trace.status().ToString();
  return trace.ok() ? traces::GradientBuckets(*trace, kDp) : traces::BucketTable{};
}

TEST(ExpertGradient, IsTheRoutedExpertsByItsName) {
  auto named = [](const char* name) {
    traces::Tensor t;
    t.name = name;
    return traces::IsRoutedExpert(t);
  };
  EXPECT_TRUE(named("L3.experts.fc1.weight.grad"));
  EXPECT_TRUE(named("L1.experts.fc2.weight.grad+1"));
  EXPECT_TRUE(named("experts.fc2.weight"));
  EXPECT_TRUE(named("L12.experts.fc1.bias"));
  EXPECT_FALSE(named("L3.shared_expert.fc1.weight.grad"));
  EXPECT_FALSE(named("L3.router.weight.grad"));
  EXPECT_FALSE(named("L3.expertsx.fc1.weight.grad"));
  EXPECT_FALSE(named("L3.experts"));
  EXPECT_FALSE(named("L3.fc1.experts.weight"));
  EXPECT_FALSE(named("L0.fc1.weight.grad"));
}

TEST(ExpertDataParallel, IsDpOverEp) {
  EXPECT_EQ(traces::ExpertDataParallel(4, 1), 4);
  EXPECT_EQ(traces::ExpertDataParallel(4, 2), 2);
  EXPECT_EQ(traces::ExpertDataParallel(4, 4), 1);
  EXPECT_EQ(traces::ExpertDataParallel(2, 2), 1);
  EXPECT_EQ(traces::ExpertDataParallel(16, 8), 2);
}

// Bytes and group per bucket at dp 4, ep 1, 2, 4.
TEST(ExpertBuckets, ExpertBucketsGoOverDpOverEpRanksTheRestOverDp) {
  auto total = models::ParameterCount(TinyMoe(1));
  ASSERT_TRUE(total.ok()) << total.status().ToString();
  const int64_t dense_bytes = 4 * (*total - kMoeLayers * kExperts * kExpertParams);
  for (int64_t ep : {1, 2, 4}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    const traces::BucketTable table = Buckets(ep);
    EXPECT_EQ(table.dp, kDp);
    EXPECT_EQ(table.expert_dp, kDp / ep);
    ASSERT_EQ(table.buckets.size(), 2u);
    const traces::GradientBucket *dense = nullptr, *expert = nullptr;
    for (const traces::GradientBucket& b : table.buckets) {
      (b.group == traces::BucketGroup::kExpertDataParallel ? expert : dense) = &b;
    }
    ASSERT_NE(dense, nullptr);
    ASSERT_NE(expert, nullptr);
    const int64_t expert_bytes = 4 * kMoeLayers * (kExperts / ep) * kExpertParams;
    EXPECT_EQ(expert->bytes, expert_bytes);
    // Two grouped weights per MoE layer (fc1 and fc2, each holding its E/ep experts).
    EXPECT_EQ(expert->gradients.size(), static_cast<size_t>(2 * kMoeLayers));
    EXPECT_EQ(dense->bytes, dense_bytes);
    EXPECT_EQ(table.bytes, dense_bytes + expert_bytes);
    EXPECT_EQ(table.GroupSize(*dense), kDp);
    EXPECT_EQ(table.GroupSize(*expert), kDp / ep);
    // The ring over n ranks: 2·(n − 1)/n of the bucket per rank; none at n = 1.
    EXPECT_EQ(table.RingBytes(*dense), 2 * 3 * dense_bytes / 4);
    const int64_t n = kDp / ep;
    EXPECT_EQ(table.RingBytes(*expert), n == 1 ? 0 : 2 * (n - 1) * expert_bytes / n);
    // The table is in completion order: the expert bucket completes first
    // (the experts' backward runs before the attention's and the embeddings').
    EXPECT_EQ(&table.buckets[0], expert);
    EXPECT_LE(table.buckets[0].complete_after, table.buckets[1].complete_after);
  }
}

// The simulator's price: each bucket's ring over its own group, one after
// the other on the link; at 1 GB/s and no latency a rank's ring bytes take
// that many nanoseconds (rounded up). At ep = dp the expert bucket is not
// exchanged: an empty span that leaves the link to the dense bucket.
TEST(ExpertBuckets, TheSimulatorPricesEachBucketOverItsGroup) {
  for (int64_t ep : {1, 2, 4}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    const traces::BucketTable table = Buckets(ep);
    std::vector<sim::BucketReady> ready;
    for (const traces::GradientBucket& b : table.buckets) {
      ready.push_back({0, b.bytes, sim::OneDomain(table.GroupSize(b))});
    }
    sim::InterconnectOptions link;
    link.scale_up = sim::LinkTier{1.0, 0, 0.0};
    const std::vector<sim::BucketSpan> spans =
        sim::BucketCollectives(ready, sim::CollectiveKind::kAllReduce, link);
    ASSERT_EQ(spans.size(), 2u);
    const int64_t expert_ns = spans[0].end_ns - spans[0].start_ns;
    const int64_t ring = table.RingBytes(table.buckets[0]);
    EXPECT_GE(expert_ns, ring);
    EXPECT_LE(expert_ns, ring + 1);
    EXPECT_EQ(spans[0].bytes, ep == kDp ? 0 : table.buckets[0].bytes);
    EXPECT_EQ(spans[1].start_ns, spans[0].end_ns);
    const int64_t dense_ns = spans[1].end_ns - spans[1].start_ns;
    EXPECT_GE(dense_ns, table.RingBytes(table.buckets[1]));
    EXPECT_LE(dense_ns, table.RingBytes(table.buckets[1]) + 1);
    // With latency: 2·(n − 1) steps of it per bucket, n its group's.
    link.scale_up.latency_us = 10.0;
    const std::vector<sim::BucketSpan> slow =
        sim::BucketCollectives(ready, sim::CollectiveKind::kAllReduce, link);
    const int64_t n = kDp / ep;
    EXPECT_EQ(slow[0].end_ns - slow[0].start_ns, expert_ns + 2 * (n - 1) * 10'000);
  }
}

// ZeRO-1's all-gather of the updated parameters after the optimizer: the
// routed experts' over their expert-data-parallel group (dp / ep ranks, where
// their state is sharded), the rest over dp, one after the other; at ep 1 one
// gather of everything over dp, as before.
TEST(ExpertBuckets, ZeroOneGathersTheExpertsOverTheirOwnGroup) {
  sim::InterconnectOptions link;
  link.scale_up = sim::LinkTier{1.0, 0, 0.0};
  for (int64_t ep : {1, 2, 4}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    models::ModelConfig c = TinyMoe(ep);
    c.zero_stage = 1;
    auto trace = models::BuildTrace(c, 0);
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    const int64_t experts = sim::ExpertParameterBytes(*trace);
    EXPECT_EQ(experts, kMoeLayers * (kExperts / ep) * kExpertParams * 4);
    const int64_t all = sim::ParameterBytes(*trace);
    sim::LayoutLinks links;
    links.gradients = sim::OneDomain(kDp);
    links.expert_gradients = sim::OneDomain(kDp / ep);
    const traces::Layout layout{.dp = kDp, .ep = ep, .zero_stage = 1};
    const int64_t got = sim::StageParamAllGatherNs(*trace, layout, links, link);
    if (ep == 1) {
      EXPECT_EQ(got, sim::ParamAllGatherNs(1, all, sim::OneDomain(kDp), link));
    } else {
      EXPECT_EQ(got, sim::ParamAllGatherNs(1, all - experts, sim::OneDomain(kDp), link) +
                         sim::ParamAllGatherNs(1, experts, sim::OneDomain(kDp / ep), link));
    }
    // A ring all-gather moves (n − 1)/n of the payload a rank (1 byte a ns here).
    const int64_t dense_ns = (all - (ep == 1 ? 0 : experts)) * (kDp - 1) / kDp;
    const int64_t expert_ns = ep == 1 ? 0 : experts * (kDp / ep - 1) / (kDp / ep);
    EXPECT_NEAR(static_cast<double>(got), static_cast<double>(dense_ns + expert_ns), 2.0);
    // At ZeRO 0 nothing is gathered.
    EXPECT_EQ(sim::StageParamAllGatherNs(*trace, traces::Layout{.dp = kDp, .ep = ep}, links, link),
              0);
  }
}

// A dense model: no expert buckets, whatever ep the table is asked at (the
// mid-gpt closed form is tests/dp_buckets_test.cc).
TEST(ExpertBuckets, ADenseModelHasNone) {
  auto c = models::LoadModelConfig(testing::SourceDir() + "/configs/models/tiny-gpt.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto trace = models::BuildTrace(*c, 0);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  const traces::BucketTable table = traces::GradientBuckets(*trace, kDp);
  ASSERT_FALSE(table.buckets.empty());
  for (const traces::GradientBucket& b : table.buckets) {
    EXPECT_EQ(b.group, traces::BucketGroup::kDataParallel);
  }
}

}  // namespace
}  // namespace ssdtrain

#include "sim/collective.h"

#include <gtest/gtest.h>

#include "sim/op_cost.h"
#include "sim/pipeline.h"
#include "sim/tests/test_traces.h"
#include "sim/topology.h"

namespace ssdtrain::sim {
namespace {

using traces::OpKind;

// 8 GB payload over 4 ranks at 10 GB/s with 5 µs per ring step.
constexpr int64_t kPayload = 8'000'000'000;
constexpr int64_t kRanks = 4;
constexpr double kGBps = 10;
constexpr double kLatencyUs = 5;

TEST(Collective, AllReduceIsTwoRingPassesOverThePayload) {
  // 2·(4−1)/4 · 8 GB / 10 GB/s = 1.2 s, plus 2·(4−1) = 6 steps × 5 µs = 30 µs.
  EXPECT_EQ(CollectiveNs(CollectiveKind::kAllReduce, kPayload, kRanks, kGBps, kLatencyUs),
            1'200'030'000);
}

TEST(Collective, AllGatherAndReduceScatterAreOneRingPass) {
  // (4−1)/4 · 8 GB / 10 GB/s = 0.6 s, plus (4−1) = 3 steps × 5 µs = 15 µs.
  EXPECT_EQ(CollectiveNs(CollectiveKind::kAllGather, kPayload, kRanks, kGBps, kLatencyUs),
            600'015'000);
  EXPECT_EQ(CollectiveNs(CollectiveKind::kReduceScatter, kPayload, kRanks, kGBps, kLatencyUs),
            600'015'000);
}

TEST(Collective, AllToAllSendsAllButItsOwnShareOfThePayload) {
  // Each rank keeps 1/4 of its 8 GB and sends (4−1)/4 of it, one piece to each
  // of 3 peers: 0.6 s over 10 GB/s, plus 3 steps × 5 µs = 15 µs.
  EXPECT_EQ(CollectiveNs(CollectiveKind::kAllToAll, kPayload, kRanks, kGBps, kLatencyUs),
            600'015'000);
  // Two ranks: half of it, one step.
  EXPECT_EQ(CollectiveNs(CollectiveKind::kAllToAll, kPayload, 2, kGBps, kLatencyUs), 400'005'000);
  EXPECT_EQ(CollectiveNs(CollectiveKind::kAllToAll, kPayload, 1, kGBps, kLatencyUs), 0);
}

TEST(Collective, ASendIsItsBytesOverTheLinkPlusOneLatency) {
  // 8 GB / 10 GB/s = 0.8 s, plus 5 µs (rounded up to whole ns: 0.800005 is not
  // exact in binary, so it may land one ns above).
  EXPECT_NEAR(SendNs(kPayload, kGBps, kLatencyUs), 800'005'000, 1);
}

TEST(Collective, ZeroOneExchangesByReduceScatterThenAllGathersTheParameters) {
  // ZeRO-1 reduce-scatters the gradients ((4−1)/4 · 8 GB / 10 GB/s + 3 × 5 µs)
  // and all-gathers 8 GB of parameters the same way after the optimizer: the
  // two together take the all-reduce's time.
  EXPECT_EQ(GradientCollective(0), CollectiveKind::kAllReduce);
  EXPECT_EQ(GradientCollective(1), CollectiveKind::kReduceScatter);
  InterconnectOptions link;
  link.scale_up = LinkTier{kGBps, 0, kLatencyUs};
  EXPECT_EQ(ParamAllGatherNs(1, kPayload, OneDomain(kRanks), link), 600'015'000);
  EXPECT_EQ(ParamAllGatherNs(0, kPayload, OneDomain(kRanks), link), 0);
  EXPECT_EQ(CollectiveNs(GradientCollective(1), kPayload, kRanks, kGBps, kLatencyUs) +
                ParamAllGatherNs(1, kPayload, OneDomain(kRanks), link),
            CollectiveNs(CollectiveKind::kAllReduce, kPayload, kRanks, kGBps, kLatencyUs));
}

TEST(Collective, OneRankCostsNothing) {
  EXPECT_EQ(CollectiveNs(CollectiveKind::kAllReduce, kPayload, 1, kGBps, kLatencyUs), 0);
  EXPECT_EQ(CollectiveNs(CollectiveKind::kAllGather, kPayload, 1, kGBps, kLatencyUs), 0);
}

TEST(Collective, RingAllReduceIsTheAllReduceKind) {
  EXPECT_EQ(RingAllReduceNs(kPayload, kRanks, kGBps, kLatencyUs),
            CollectiveNs(CollectiveKind::kAllReduce, kPayload, kRanks, kGBps, kLatencyUs));
}

// A trace op of kind collective reading `read` and writing `written` bytes.
traces::Op CollectiveOp(int64_t read, int64_t written) {
  traces::Op op;
  op.kind = OpKind::kCollective;
  op.bytes_read = read;
  op.bytes_written = written;
  return op;
}

// The same op named as the MoE dispatch and combine are (models/detail/moe.cc).
traces::Op AllToAllOp(int64_t read, int64_t written) {
  traces::Op op = CollectiveOp(read, written);
  op.name = "L1.moe.dispatch." + std::string(traces::kAllToAllSuffix);
  return op;
}

TEST(Collective, KindFollowsTheOpsShape) {
  // all-gather: shard in, 4× larger tensor out; reduce-scatter: the reverse.
  EXPECT_EQ(ClassifyCollective(CollectiveOp(1000, 4000)), CollectiveKind::kAllGather);
  EXPECT_EQ(ClassifyCollective(CollectiveOp(4000, 1000)), CollectiveKind::kReduceScatter);
  EXPECT_EQ(ClassifyCollective(CollectiveOp(4000, 4000)), CollectiveKind::kAllReduce);
  EXPECT_EQ(CollectivePayloadBytes(CollectiveOp(1000, 4000)), 4000);
  EXPECT_EQ(CollectivePayloadBytes(CollectiveOp(4000, 1000)), 4000);
  // The all-to-all is named: its sizes alone would read as an all-reduce.
  EXPECT_EQ(ClassifyCollective(AllToAllOp(4000, 4000)), CollectiveKind::kAllToAll);
  EXPECT_EQ(ClassifyCollective(AllToAllOp(4000, 3000)), CollectiveKind::kAllToAll);
  EXPECT_EQ(CollectivePayloadBytes(AllToAllOp(4000, 3000)), 4000);
  EXPECT_EQ(ToString(CollectiveKind::kAllToAll), "all_to_all");
}

TEST(Collective, CostModelPricesTheAllToAllOverTheExpertParallelGroup) {
  // ep = 4 at tp 1 and 2: the group (strided by tp) spans tp·ep = 4 or 8
  // GPUs, inside an 8-GPU node, on NVLink (10 GB/s): 8 GB · 3/4 / 10 GB/s =
  // 0.6 s + 3 · 5 µs. At tp 4 it is ranks 0, 4, 8 and 12, two in each of two
  // nodes (sim/topology.h): each rank sends (4 − 2)/4 of 8 GB
  // over its NIC (5 GB/s: 0.8 s) and (2 − 1)/4 over NVLink (0.2 s) at once,
  // 0.8 s + 3 network latencies (5 µs).
  HardwareOptions hw = testing::TestHardware(1, 1, 10);
  hw.gpu.op_overhead_us = 0;
  hw.gpus_per_node = 8;
  hw.interconnect.domain_gpus = 8;
  hw.interconnect.scale_up = LinkTier{kGBps, 0, kLatencyUs};
  hw.interconnect.scale_out = LinkTier{kGBps / 2, 0, kLatencyUs};
  const traces::Op op = AllToAllOp(kPayload, kPayload);
  EXPECT_EQ(OpCostModel(hw, 1, "fp16", true, kRanks).RooflineNs(op), 600'015'000);
  EXPECT_EQ(OpCostModel(hw, 2, "fp16", true, kRanks).RooflineNs(op), 600'015'000);
  EXPECT_EQ(OpCostModel(hw, 4, "fp16", true, kRanks).RooflineNs(op), 800'015'000);
  // ep 1: nothing to exchange, whatever tp is; the tp collectives ignore ep.
  EXPECT_EQ(OpCostModel(hw, 4, "fp16", true, 1).RooflineNs(op), 0);
  EXPECT_EQ(OpCostModel(hw, 1, "fp16", true, kRanks).RooflineNs(CollectiveOp(kPayload, kPayload)),
            0);
}

TEST(Collective, CostModelPricesTraceCollectivesByKindOnTheTensorParallelGroup) {
  // tp = 4 on NVLink at 10 GB/s and latency 5 µs, no per-op overhead. Payload S = 8 GB
  // in each case (the gathered output, the scattered input, the reduced buffer):
  // all-gather and reduce-scatter 0.6 s + 15 µs, all-reduce 1.2 s + 30 µs, where
  // bytes read + written would have priced them at 1.5 s and 2.4 s.
  HardwareOptions hw = testing::TestHardware(1, 1, 10);
  hw.gpu.op_overhead_us = 0;
  hw.interconnect.domain_gpus = 8;  // the 4 ranks inside one node
  hw.interconnect.scale_up = LinkTier{kGBps, 0, kLatencyUs};
  const OpCostModel cost(hw, kRanks, "fp16");
  EXPECT_EQ(cost.RooflineNs(CollectiveOp(kPayload / 4, kPayload)), 600'015'000);
  EXPECT_EQ(cost.RooflineNs(CollectiveOp(kPayload, kPayload / 4)), 600'015'000);
  EXPECT_EQ(cost.RooflineNs(CollectiveOp(kPayload, kPayload)), 1'200'030'000);
  const OpCostModel single(hw, 1, "fp16");
  EXPECT_EQ(single.RooflineNs(CollectiveOp(kPayload, kPayload)), 0);
}

}  // namespace
}  // namespace ssdtrain::sim

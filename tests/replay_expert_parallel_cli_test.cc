// `mpirun -np 2 ssdtrain replay --model tiny-moe --plan ...` with expert
// parallelism (ep 2 over two data-parallel replicas, exec/step_sync.h's
// traces::Layout: each rank holds 4 of the 8 experts): the MoE dispatch and
// combine, forward and backward, are all-to-alls between the two ranks with
// real bytes (exec/replay_expert_parallel.cc), each piece checked by CRC32C
// and, verified, against its sender's patterns. Under keep, ssdtrain,
// offload-ssd and the planner's own choice each replays verified, leaves no
// files, every rank's memory peaks are the prediction to the byte, and each
// rank sent (n − 1)/n = 1/2 of each all-to-all's payload, the bytes the
// simulator prices; the step time is printed beside the prediction, not
// gated. The same beside tp 2 and beside pp 2 on four ranks. The routed
// experts' gradient buckets are not all-reduced (their expert-data-parallel
// group, dp / ep, is one rank: traces/dp_buckets.h), the others are, the
// simulator's bytes; at dp 4 with ep 2 they are, over pairs of ranks (at
// ZeRO 0 and at ZeRO-1, the distributed optimizer). Built only with MPI
// (SSDTRAIN_HAVE_MPI).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/replay_expert_parallel.h"
#include "traces/dp_buckets.h"
#include "traces/io.h"
#include "traces/plan.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;
using testing::ep_replay::kMicroBatches;
using testing::ep_replay::kRanks;
using testing::ep_replay::kShape;
using testing::ep_replay::Layout;
using testing::ep_replay::ReplayExpertParallelCli;

TEST_F(ReplayExpertParallelCli, KeepReplaysVerifiedOnTwoExpertRanks) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("keep"));
  ExpectEveryRankInPlace();
  for (const nlohmann::json& rank : report_.extra.at("ranks")) {
    EXPECT_EQ(rank.at("ssd_bytes_written").get<int64_t>(), 0);
  }
}

// ZeRO-1 (the distributed optimizer) at ep = dp = 2: each rank holds half
// the dense state and its own experts' whole state (their data-parallel
// group is the rank alone); the replay's peaks are the prediction's.
TEST_F(ReplayExpertParallelCli, ZeroOneReplaysVerifiedOnTwoExpertRanks) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("offload-ssd", Layout{.zero_stage = 1}));
  ExpectEveryRankInPlace();
  auto plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->zero_stage, 1);
}

TEST_F(ReplayExpertParallelCli, SsdtrainReplaysVerifiedOnTwoExpertRanks) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("ssdtrain"));
  ExpectEveryRankInPlace();
}

TEST_F(ReplayExpertParallelCli, OffloadSsdReplaysVerifiedOnTwoExpertRanks) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("offload-ssd"));
  ExpectEveryRankInPlace();
  for (const nlohmann::json& rank : report_.extra.at("ranks")) {
    EXPECT_GT(rank.at("ssd_bytes_written").get<int64_t>(), 0);
  }
}

// Every dimension searched, the ZeRO stage among them (at ep 2 on dp 2 the
// experts' shard group is each rank alone).
TEST_F(ReplayExpertParallelCli, ThePlannersChoiceReplaysVerifiedOnTwoExpertRanks) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("auto", Layout{.zero_stage = -1}));
  ExpectEveryRankInItsPlace(Layout{});
}

// tiny-moe's routed experts on one rank: 4 of 8 in each of its 3 MoE layers,
// 3·f·h = 196 608 fp32 parameters each. Their bucket stays on its rank; the
// dense bucket is all-reduced, with the bytes the prediction's timeline has.
TEST_F(ReplayExpertParallelCli, ExpertBucketsStayOnTheirRankTheDenseOnesAreTheSimulators) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("keep"));
  const std::vector<int64_t> predicted =
      testing::PredictedBucketBytes(File("predicted-timeline.json"));
  auto traced = RunSsdtrain("trace --model " + Model("tiny-moe") + " --dp 2 --ep 2" + kShape +
                            " -o " + File("trace.json"));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  auto trace = traces::ReadTrace(File("trace.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  const traces::BucketTable table = traces::GradientBuckets(*trace, 2);
  EXPECT_EQ(table.expert_dp, 1);
  std::vector<int64_t> dense;
  int64_t expert = 0;
  for (const traces::GradientBucket& b : table.buckets) {
    if (b.group == traces::BucketGroup::kExpertDataParallel) {
      expert += b.bytes;
    } else {
      dense.push_back(b.bytes);
    }
  }
  EXPECT_EQ(expert, 4 * 3 * 4 * 3 * 256 * 256);
  ASSERT_FALSE(dense.empty());
  EXPECT_EQ(predicted, dense);
  std::vector<int64_t> measured;
  for (const nlohmann::json& b : report_.extra.at("gradient_buckets")) {
    measured.push_back(b.at("bytes").get<int64_t>());
  }
  EXPECT_EQ(measured, dense);
}

// dp 4, ep 2: the experts' groups are pairs of ranks (0 and 2, 1 and 3:
// the replicas of one expert index), their buckets summed over those pairs,
// the dense ones over all four; every rank in its place, its peaks the
// prediction's, and the buckets each rank sums are the prediction's, the
// experts' included (at ZeRO-1 too, the distributed optimizer).
TEST_F(ReplayExpertParallelCli, ExpertGroupsBetweenOneRankAndDpSumTheirOwnBuckets) {
  for (int zero : {0, 1}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    const Layout l{.dp = 4, .zero_stage = zero};
    ASSERT_NO_FATAL_FAILURE(PlanAndReplay("keep", l));
    ASSERT_NO_FATAL_FAILURE(ExpectRanksAndStages(l.ranks(), 1));
    for (int r = 0; r < l.ranks(); ++r) ExpectRankOfStage(report_.extra.at("ranks")[r], 0);
    EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
    traces::Trace trace;
    ASSERT_NO_FATAL_FAILURE(TraceAtDp4(zero, &trace));
    const traces::BucketTable table = traces::GradientBuckets(trace, 4);
    EXPECT_EQ(table.expert_dp, 2);
    std::vector<int64_t> all;
    int64_t expert = 0;
    for (const traces::GradientBucket& b : table.buckets) {
      all.push_back(b.bytes);
      if (b.group == traces::BucketGroup::kExpertDataParallel) expert += b.bytes;
    }
    // 4 of 8 experts in each of 3 MoE layers, 3·f·h fp32 parameters each.
    EXPECT_EQ(expert, 4 * 3 * 4 * 3 * 256 * 256);
    EXPECT_EQ(testing::PredictedBucketBytes(File("predicted-timeline.json")), all);
    std::vector<int64_t> measured;
    for (const nlohmann::json& b : report_.extra.at("gradient_buckets")) {
      measured.push_back(b.at("bytes").get<int64_t>());
    }
    EXPECT_EQ(measured, all);
  }
}

// ZeRO-2 and 3 with ep 2 at dp 4 (FSDP with expert parallelism): the dense
// weights' gathers and gradients' reduce-scatters run over all four ranks,
// the routed experts' over their expert-data-parallel pairs (ranks 0 and 2,
// 1 and 3: equal expert index), each piece checked against its sender's
// patterns; verified, peaks the prediction's to the byte, no bucket left to
// all-reduce, nothing left on disk.
TEST_F(ReplayExpertParallelCli, ZeroTwoAndThreeShardTheExpertsOverTheirPairsOnFourRanks) {
  for (int zero : {2, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    const Layout l{.dp = 4, .zero_stage = zero};
    ASSERT_NO_FATAL_FAILURE(PlanAndReplay("keep", l));
    ASSERT_NO_FATAL_FAILURE(ExpectRanksAndStages(l.ranks(), 1));
    const nlohmann::json& ranks = report_.extra.at("ranks");
    for (int r = 0; r < l.ranks(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ExpectRankOfStage(ranks[r], 0);
      const nlohmann::json& by_kind = ranks[r].at("collectives").at("by_kind");
      EXPECT_TRUE(by_kind.contains("all_to_all")) << by_kind.dump();
      EXPECT_TRUE(by_kind.contains("reduce_scatter")) << by_kind.dump();
      EXPECT_EQ(by_kind.contains("all_gather"), zero == 3) << by_kind.dump();
    }
    EXPECT_TRUE(!report_.extra.contains("gradient_buckets") ||
                report_.extra.at("gradient_buckets").empty())
        << report_.extra.dump();
    EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
    traces::Trace trace;
    ASSERT_NO_FATAL_FAILURE(TraceAtDp4(zero, &trace));
    int experts = 0;
    for (const traces::Op& op : trace.ops) {
      if (op.kind != traces::OpKind::kCollective) continue;
      if (traces::GroupOfCollective(op) == traces::CollectiveGroup::kExpertShard) {
        EXPECT_EQ(traces::CollectiveRanks(op, trace.header), 2) << op.name;
        ++experts;
      }
    }
    EXPECT_EQ(experts, zero == 3 ? 9 : 3);  // 3 MoE layers: a scatter, 2 gathers at 3
  }
}

// Context parallelism with experts: the expert grid regroups the cp · dp
// ranks (traces/layout.h), so at cp 2, dp 1 the ep pair is the cp pair, whose
// ring steps and all-to-alls both run between the two; at cp 2 × dp 2 under
// ZeRO-3 the dense weights shard over all four ranks, the experts over the
// pairs of equal expert index, and the ring's and the shard group's pieces
// are checked against each sender's own (expert-salted) patterns. Verified,
// peaks the prediction's to the byte, nothing left on disk.
TEST_F(ReplayExpertParallelCli, ContextParallelRanksRouteTheirOwnTokens) {
  for (const Layout& l : {Layout{.dp = 1, .cp = 2}, Layout{.dp = 2, .zero_stage = 3, .cp = 2}}) {
    SCOPED_TRACE("cp 2 dp " + std::to_string(l.dp));
    ASSERT_NO_FATAL_FAILURE(PlanAndReplay("keep", l));
    ASSERT_NO_FATAL_FAILURE(ExpectRanksAndStages(l.ranks(), 1));
    const nlohmann::json& ranks = report_.extra.at("ranks");
    for (int r = 0; r < l.ranks(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ExpectRankOfStage(ranks[r], 0);
      EXPECT_EQ(ranks[r].at("cp_index").get<int>(), r % 2);
      EXPECT_EQ(ranks[r].at("ep_index").get<int>(), r % 2);
      const nlohmann::json& by_kind = ranks[r].at("collectives").at("by_kind");
      EXPECT_TRUE(by_kind.contains("all_to_all")) << by_kind.dump();
      EXPECT_TRUE(by_kind.contains("send_recv")) << by_kind.dump();
      EXPECT_EQ(by_kind.contains("all_gather"), l.zero_stage == 3) << by_kind.dump();
    }
    EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
  }
}

// HSDP with ep 2 at ZeRO-3: 2 x 2 on four ranks (the dense weights shard over
// {0, 1} and {2, 3}, each shard group one ep pair, so the experts' own shard
// group is each rank alone) and 2 x 4 on eight (shard groups 0-3 and 4-7;
// the experts shard over {0, 2}, {1, 3}, ...). The replicas of a shard
// position ({0, 2} / {0, 4}, equal expert index) sum the dense and the
// experts' gradient buckets: every bucket is summed over 2 ranks, where the
// experts' whole data-parallel group would be 4 at dp 8. Verified, peaks to
// the byte, each rank's buckets the prediction's.
TEST_F(ReplayExpertParallelCli, HsdpWithExpertsSumsEachShardPositionOverItsReplicas) {
  for (const Layout& l : {Layout{.dp = 4, .zero_stage = 3, .dp_shard = 2},
                          Layout{.dp = 8, .zero_stage = 3, .dp_shard = 4}}) {
    SCOPED_TRACE("dp " + std::to_string(l.dp));
    ASSERT_NO_FATAL_FAILURE(PlanAndReplay("keep", l));
    ASSERT_NO_FATAL_FAILURE(ExpectRanksAndStages(l.ranks(), 1));
    for (int r = 0; r < l.ranks(); ++r) ExpectRankOfStage(report_.extra.at("ranks")[r], 0);
    EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
    std::vector<int64_t> measured;
    for (const nlohmann::json& b : report_.extra.at("gradient_buckets")) {
      measured.push_back(b.at("bytes").get<int64_t>());
      EXPECT_EQ(b.at("ranks").get<int>(), 2) << b.dump();
    }
    EXPECT_FALSE(measured.empty());
    EXPECT_EQ(measured, testing::PredictedBucketBytes(File("predicted-timeline.json")));
    auto traced =
        RunSsdtrain("trace --model " + Model("tiny-moe") + " --dp " + std::to_string(l.dp) +
                    " --ep 2" + kShape + " --zero-stage 3 --dp-shard " +
                    std::to_string(l.dp_shard) + " -o " + File("trace.json"));
    ASSERT_EQ(traced.exit_code, 0) << traced.output;
    auto read = traces::ReadTrace(File("trace.json"));
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    bool experts = false;
    for (const traces::GradientBucket& b : traces::GradientBuckets(*read, l.dp).buckets) {
      experts = experts || b.group == traces::BucketGroup::kExpertDataParallel;
    }
    EXPECT_TRUE(experts);
  }
}

TEST_F(ReplayExpertParallelCli, ExpertRanksBesideTensorParallelShardsOnFourRanks) {
  // Rank r is shard r % 2 of replica r / 2: the all-to-alls pair ranks 0 and
  // 2, 1 and 3 (the ep group strided by tp), the all-reduces 0 and 1, 2 and 3.
  const Layout l{2, 1, 2};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("ssdtrain", l));
  ExpectEveryRankInItsPlace(l);
  for (const nlohmann::json& rank : report_.extra.at("ranks")) {
    EXPECT_TRUE(rank.at("collectives").at("by_kind").contains("all_reduce"));
  }
}

// plan --tp-comm-overlap records Transformer Engine's userbuffers overlap, and
// the replay rebuilds the marked trace from the model config (its fingerprint
// the plan's) and runs the marked all-gathers and reduce-scatters as any
// others: verified on four ranks, the peaks the plan's.
TEST_F(ReplayExpertParallelCli, ATpCommOverlapPlanReplaysVerifiedBesideSequenceParallelShards) {
  const Layout l{2, 1, 2};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("keep --sequence-parallel --tp-comm-overlap", l));
  ExpectEveryRankInItsPlace(l);
  auto plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->sequence_parallel);
  EXPECT_TRUE(plan->tp_comm_overlap);
  for (const nlohmann::json& rank : report_.extra.at("ranks")) {
    const nlohmann::json& by_kind = rank.at("collectives").at("by_kind");
    EXPECT_TRUE(by_kind.contains("all_gather")) << by_kind.dump();
    EXPECT_TRUE(by_kind.contains("reduce_scatter")) << by_kind.dump();
  }
}

TEST_F(ReplayExpertParallelCli, ExpertRanksInEachOfTwoStagesOnFourRanks) {
  // Stage r / 2, replica r % 2: each stage's two replicas are its ep group.
  const Layout l{1, 2, 2};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("ssdtrain", l));
  ExpectEveryRankInItsPlace(l);
  const nlohmann::json& ranks = report_.extra.at("ranks");
  for (int r = 0; r < 4; ++r) {
    EXPECT_GT(ranks[r].at("pipeline").at("bytes_sent").get<int64_t>(), 0);
    EXPECT_EQ(ranks[r].at("pipeline").at("bytes_received"),
              ranks[r ^ 2].at("pipeline").at("bytes_sent"));
  }
}

}  // namespace
}  // namespace ssdtrain

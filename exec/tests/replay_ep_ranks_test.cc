// Expert-parallel ranks in one process (exec/tests/thread_ranks.h): two
// threads replay tiny-moe as two data-parallel replicas at ep 2, its MoE
// dispatch and combine all-to-alls exchanging real pieces
// (exec/replay_expert_parallel.cc); the MPI side runs under mpirun in
// tests/mpi_ranks_test.cc and tests/replay_expert_parallel_cli_test.cc. Also
// the ep groups of traces::Layout.
#include <gtest/gtest.h>

#include <vector>

#include "exec/replay.h"
#include "exec/tests/io_test_util.h"
#include "exec/tests/replay_test_util.h"
#include "exec/tests/two_thread_ranks.h"
#include "traces/collective_kind.h"
#include "traces/layout.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using testing::CpuOptions;
using testing::ListTree;
using testing::TinyMoeTrace;

using RankRun = testing::TwoRanks;

// Replays `trace` (every saved activation to the SSD, verified) at dp 2,
// ep 2 on two thread ranks, rank 1's first write failing with EIO when
// `fail_write`.
void RunRanks(const traces::Trace& trace, RankRun& runs, bool fail_write = false) {
  traces::Plan plan = traces::OffloadAllPlan(trace);
  plan.dp = 2;
  plan.ep = 2;
  runs.Run(trace, plan, /*dp=*/2, fail_write);
}

TEST(ReplayExpertParallel, TwoExpertRanksExchangeTheTracesAllToAllsVerified) {
  const traces::Trace trace = TinyMoeTrace(4, 64, /*ep=*/2);
  int64_t count = 0, sent = 0;  // per step: (n − 1)/n of each payload, n = 2
  for (const traces::Op& op : trace.ops) {
    if (op.kind != traces::OpKind::kCollective) continue;
    ASSERT_EQ(traces::ClassifyCollective(op), traces::CollectiveKind::kAllToAll) << op.name;
    ++count;
    sent += traces::CollectivePayloadBytes(op) / 2;
  }
  ASSERT_GT(count, 0);
  RankRun runs;
  RunRanks(trace, runs);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(runs.result[r].ok()) << runs.result[r].status().ToString();
    const ReplayResult& res = *runs.result[r];
    EXPECT_TRUE(res.verified);
    EXPECT_EQ(res.ep_index, r);
    EXPECT_EQ(res.collectives.by_kind[static_cast<size_t>(traces::CollectiveKind::kAllToAll)].count,
              count);
    EXPECT_EQ(res.collectives.pieces_sent, count);
    EXPECT_EQ(res.collectives.bytes_sent, sent);
    EXPECT_EQ(res.collectives.bytes_received, runs.result[1 - r]->collectives.bytes_sent);
    EXPECT_TRUE(ListTree(runs.dir[r].path()).empty());
  }
}

TEST(ReplayExpertParallel, AWriteErrorOnOneRankStopsBothAndLeavesNoFiles) {
  const traces::Trace trace = TinyMoeTrace(4, 64, /*ep=*/2);
  RankRun runs;
  RunRanks(trace, runs, /*fail_write=*/true);
  runs.ExpectRankOnesEioStoppedBoth();
}

TEST(ReplayExpertParallel, UnbalancedRoutingIsRefusedBeforeTheReplayStarts) {
  // 1 × 65 tokens × top-2 = 130 rows over 8 experts: experts 0 and 1 get 17,
  // the rest 16, so rank 0 receives 2 × (17 + 17 + 16 + 16) = 132 rows for
  // the 130 it sends.
  const traces::Trace trace = TinyMoeTrace(1, 65, /*ep=*/2);
  RankRun runs;
  RunRanks(trace, runs);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(runs.result[r].ok()) << r;
    EXPECT_NE(runs.result[r].status().message().find(
                  "moe.dispatch.all_to_all, micro-batch 0): an all-to-all over 2 expert-parallel "
                  "ranks of 133120 bytes in, 135168 bytes out: expected equal bytes in and out "
                  "(balanced routing)"),
              std::string::npos)
        << runs.result[r].status().ToString();
    EXPECT_TRUE(ListTree(runs.dir[r].path()).empty()) << r;
  }
}

TEST(ReplayExpertParallel, EpGroupsAreConsecutiveReplicasOfOneShard) {
  // tp 2, dp 4, ep 2: rank r is shard r % 2 of replica r / 2; the ep groups
  // pair replicas 0–1 and 2–3 of each shard.
  traces::Layout l;
  l.tp = 2;
  l.dp = 4;
  l.ep = 2;
  EXPECT_EQ(l.EpGroup(0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(l.EpGroup(3), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(l.EpGroup(5), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(l.ExpertIndexOf(5), 0);
  EXPECT_EQ(l.ExpertIndexOf(7), 1);
  EXPECT_EQ(l.TpGroup(5), (std::vector<int64_t>{4, 5}));
}

}  // namespace
}  // namespace ssdtrain::exec

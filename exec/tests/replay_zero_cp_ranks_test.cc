// ZeRO-3's gathers and reduce-scatters and context parallelism's ring between
// ranks in one process (exec/tests/thread_ranks.h), so that the sanitizer
// phases run them (exec/replay_ring.cc, the shard group's pairs in
// exec/replay_tensor_parallel.cc): tiny GPT with flash attention, every saved
// activation to the SSD, verified, on two thread ranks as one cp group (cp 2)
// or as two ZeRO-3 replicas (dp 2). The MPI side, with more layouts and the
// predicted peaks: tests/replay_zero_cp_cli_test.cc and tests/mpi_ranks_test.cc.
#include <gtest/gtest.h>

#include "exec/replay.h"
#include "exec/tests/io_test_util.h"
#include "exec/tests/replay_test_util.h"
#include "exec/tests/two_thread_ranks.h"
#include "traces/collective_kind.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using testing::ListTree;
using testing::TinyGptTraceWith;

// tiny GPT at micro-batch 1, sequence 128, flash attention, on two ranks as
// cp 2 (`context_parallel`) or as dp 2 at ZeRO-3.
traces::Trace TwoRankTrace(bool context_parallel) {
  models::ConfigOverrides o;
  o.micro_batch = 1;
  o.seq_len = 128;
  o.attention = "flash";
  o.cp = context_parallel ? 2 : 1;
  o.dp = context_parallel ? 1 : 2;
  o.zero_stage = context_parallel ? 0 : 3;
  return TinyGptTraceWith(o);
}

// Replays it offloading every saved activation, rank 1's first write failing
// with EIO when `fail_write`. At cp 2 the gradients are summed over both
// ranks (dp × cp); at ZeRO-3 without HSDP nothing is left to sum.
void RunPair(const traces::Trace& trace, testing::TwoRanks& runs, bool fail_write = false) {
  traces::Plan plan = traces::OffloadAllPlan(trace);
  plan.cp = trace.header.cp;
  plan.zero_stage = trace.header.zero_stage;
  plan.dp = plan.cp > 1 ? 1 : 2;
  runs.Run(trace, plan, /*dp=*/2, fail_write);
}

struct Exchanged {
  int64_t count[traces::kCollectiveKinds.size()] = {};
  int64_t sent = 0;  // by one rank of two: a ring step's payload, half a gather's or scatter's
};
Exchanged OfTrace(const traces::Trace& trace) {
  Exchanged e;
  for (const traces::Op& op : trace.ops) {
    if (op.kind != traces::OpKind::kCollective) continue;
    const traces::CollectiveKind kind = traces::ClassifyCollective(op);
    ++e.count[static_cast<size_t>(kind)];
    const int64_t s = traces::CollectivePayloadBytes(op);
    e.sent += kind == traces::CollectiveKind::kSendRecv ? s : s / 2;
  }
  return e;
}

// Both verified, the trace's collectives with its bytes (even-sized tensors:
// each rank's chunk is half), nothing left on disk.
void ExpectBothExchangedTheTraces(const traces::Trace& trace, const testing::TwoRanks& runs) {
  const Exchanged e = OfTrace(trace);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(runs.result[r].ok()) << runs.result[r].status().ToString();
    const ReplayResult& res = *runs.result[r];
    EXPECT_TRUE(res.verified);
    for (traces::CollectiveKind kind : traces::kCollectiveKinds) {
      EXPECT_EQ(res.collectives.by_kind[static_cast<size_t>(kind)].count,
                e.count[static_cast<size_t>(kind)])
          << traces::ToString(kind);
    }
    EXPECT_EQ(res.collectives.bytes_sent, e.sent);
    EXPECT_EQ(res.collectives.bytes_received, runs.result[1 - r]->collectives.bytes_sent);
    EXPECT_TRUE(ListTree(runs.dir[r].path()).empty());
  }
}

TEST(ReplayZeroAndRing, TwoContextParallelRanksRunTheRingVerified) {
  const traces::Trace trace = TwoRankTrace(/*context_parallel=*/true);
  ASSERT_GT(OfTrace(trace).count[static_cast<size_t>(traces::CollectiveKind::kSendRecv)], 0);
  testing::TwoRanks runs;
  RunPair(trace, runs);
  ExpectBothExchangedTheTraces(trace, runs);
  ASSERT_TRUE(runs.result[0].ok());
  EXPECT_FALSE(runs.result[0]->gradient_buckets.empty());  // summed over dp × cp
}

TEST(ReplayZeroAndRing, TwoZeroThreeRanksGatherAndScatterVerified) {
  const traces::Trace trace = TwoRankTrace(/*context_parallel=*/false);
  const Exchanged e = OfTrace(trace);
  ASSERT_GT(e.count[static_cast<size_t>(traces::CollectiveKind::kAllGather)], 0);
  ASSERT_GT(e.count[static_cast<size_t>(traces::CollectiveKind::kReduceScatter)], 0);
  testing::TwoRanks runs;
  RunPair(trace, runs);
  ExpectBothExchangedTheTraces(trace, runs);
  ASSERT_TRUE(runs.result[0].ok());
  EXPECT_TRUE(runs.result[0]->gradient_buckets.empty());
}

TEST(ReplayZeroAndRing, AWriteErrorOnOneRingRankStopsBothAndLeavesNoFiles) {
  // Rank 1's first offload write fails; rank 0, waiting for its ring
  // message, is woken by its abort.
  const traces::Trace trace = TwoRankTrace(/*context_parallel=*/true);
  testing::TwoRanks runs;
  RunPair(trace, runs, /*fail_write=*/true);
  runs.ExpectRankOnesEioStoppedBoth();
}

}  // namespace
}  // namespace ssdtrain::exec

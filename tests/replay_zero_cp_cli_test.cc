// `mpirun -np N ssdtrain replay --model ... --plan ...` of today's layouts
// (issue 44): ZeRO-3 over a shard group of four ranks, HSDP (two shard
// groups of two, their gradient shards all-reduced over the replica group),
// context parallelism's ring (cp 2, alone, beside tp 2 and beside pp 2), and
// all of them at once on eight ranks (tp 2 × cp 2 × dp 2 at ZeRO-3).
// tiny-gpt with flash attention at sequence 128, two micro-batches under
// 1F1B, planned on the calibrated cpu-local preset. Each replays verified,
// every rank's memory peaks are its stage's prediction to the byte, nothing
// is left on disk, and the collectives each rank ran are the trace's:
// ZeRO's gathers and reduce-scatters over the shard group and the ring's
// steps, counted and, summed over the ranks, (n − 1) times each gather's
// or scatter's full tensor and one payload per ring step per rank (the
// bytes sim/collective.h prices). The dense gradient buckets go over the
// layout's group (traces::Layout::DenseGradientGroup): none at ZeRO-3
// without HSDP, the replica group's with it, dp × cp's under cp, the
// simulator's bytes each time. Failures on one rank (EIO, a corrupt or
// wrong piece) are tests/mpi_ranks_test.cc's. Built only with MPI.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/cli_util.h"
#include "tests/replay_ranks.h"
#include "traces/collective_kind.h"
#include "traces/io.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;

constexpr int kMicroBatches = 2;

struct Layout {
  int tp = 1, cp = 1, pp = 1, dp = 1, dp_shard = 0, zero = 0;
  bool defer = false;  // --defer-grad-sync
  int ranks() const { return tp * cp * pp * dp; }
  std::string Flags() const {
    std::string f = " --gpus " + std::to_string(ranks()) + " --tp " + std::to_string(tp) +
                    " --cp " + std::to_string(cp) + " --pp " + std::to_string(pp) +
                    " --zero-stage " + std::to_string(zero);
    if (dp_shard > 0) f += " --dp-shard " + std::to_string(dp_shard);
    if (defer) f += " --defer-grad-sync";
    return f;
  }
};
const std::string kShape = " --seq-len 128 --micro-batch 2";
// ZeRO's exchanges are the weights': a small activation shape suffices.
const std::string kSmallShape = " --seq-len 64 --micro-batch 1";

// What one rank's one-micro-batch trace exchanges: per collective kind, its
// ops and the bytes of their full tensors (a ring step's: its payload).
struct Traced {
  int64_t gathers = 0, scatters = 0, ring_steps = 0;
  int64_t gathers_ahead = 0;  // gathers not followed by another exchanging op
  int64_t gathered_bytes = 0, scattered_bytes = 0, ring_bytes = 0;
};

class ReplayZeroCpCli : public testing::ReplayRanksTest {
 protected:
  ReplayZeroCpCli() : ReplayRanksTest("zero-cp-replay-cli") {}
  void SetUp() override {
    ReplayRanksTest::SetUp();
    Result<nlohmann::json> j = traces::ReadJsonFile(Model("tiny-gpt"));
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    (*j)["name"] = "tiny-gpt-flash";
    (*j)["attention"] = "flash";
    ASSERT_TRUE(traces::WriteJsonFile(*j, File("tiny-gpt-flash.json")).ok());
    model_ = File("tiny-gpt-flash.json");
  }

  // Plans the model at `l` with `policy`, checks that plan prints the
  // replay line, and replays it on that many ranks, one measured step,
  // verified; compare sets the run beside the plan's prediction (the same
  // layout: before reports carried cp, a cp run's dp read as ranks / tp).
  void PlanAndReplay(const Layout& l, const std::string& policy,
                     const std::string& shape = kShape) {
    ASSERT_NO_FATAL_FAILURE(PlanThenReplay(model_,
                                           l.Flags() + shape + " --num-micro-batches " +
                                               std::to_string(kMicroBatches) +
                                               " --schedule 1f1b --policy " + policy,
                                           l.ranks()));
    auto compared = RunSsdtrain("compare --prediction " + File("predicted.json") + " --measured " +
                                File("run.json"));
    EXPECT_EQ(compared.exit_code, 0) << compared.output;
    std::printf("tiny-gpt-flash %s, %s: step %.3f ms measured, %.3f ms predicted\n",
                l.Flags().c_str(), policy.c_str(), report_.metrics.step_time_ns / 1e6,
                predicted_.metrics.step_time_ns / 1e6);
  }

  // Stage 0's one-micro-batch trace at `l` and `shape`, as each rank builds it.
  Traced Trace(const Layout& l, const std::string& shape = kShape) {
    Traced t;
    auto traced =
        RunSsdtrain("trace --model " + model_ + l.Flags().substr(l.Flags().find(" --tp")) +
                    " --dp " + std::to_string(l.dp) + shape + " -o " + File("trace.json"));
    EXPECT_EQ(traced.exit_code, 0) << traced.output;
    auto trace = traces::ReadTrace(File("trace.json"));
    EXPECT_TRUE(trace.ok()) << trace.status().ToString();
    if (!trace.ok()) return t;
    for (const traces::Op& op : trace->ops) {
      if (op.kind != traces::OpKind::kCollective) continue;
      const traces::CollectiveGroup group = traces::GroupOfCollective(op);
      if (group == traces::CollectiveGroup::kContext) {
        ++t.ring_steps;
        t.ring_bytes += traces::CollectivePayloadBytes(op);
      } else if (group == traces::CollectiveGroup::kShard) {
        const bool gather = traces::ClassifyCollective(op) == traces::CollectiveKind::kAllGather;
        ++(gather ? t.gathers : t.scatters);
        // A gather goes ahead of the ops after it (exec/replay_beside.cc)
        // unless the next op exchanges too (the first layers' gathers, back
        // to back).
        const auto next = static_cast<size_t>(op.id) + 1;
        if (gather && next < trace->ops.size() &&
            trace->ops[next].kind != traces::OpKind::kCollective) {
          ++t.gathers_ahead;
        }
        (gather ? t.gathered_bytes : t.scattered_bytes) += traces::CollectivePayloadBytes(op);
      }
    }
    return t;
  }

  // Every rank verified at its place with its stage's peaks to the byte;
  // nothing left on disk.
  void ExpectEveryRankInPlace(const Layout& l) {
    ASSERT_NO_FATAL_FAILURE(ExpectRanksAndStages(l.ranks(), l.pp));
    const nlohmann::json& ranks = report_.extra.at("ranks");
    for (int r = 0; r < l.ranks(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      ExpectRankOfStage(ranks[r], r / (l.tp * l.cp * l.dp));
      EXPECT_EQ(ranks[r].at("tp_index").get<int>(), r % l.tp);
      EXPECT_EQ(ranks[r].at("cp_index").get<int>(), r / l.tp % l.cp);
      EXPECT_EQ(ranks[r].at("dp_index").get<int>(), r / (l.tp * l.cp) % l.dp);
    }
    EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
  }

  // Rank r's count of `kind` collectives (0 where it ran none).
  int64_t Count(int r, const std::string& kind) const {
    const nlohmann::json& by_kind = report_.extra.at("ranks")[r].at("collectives").at("by_kind");
    return by_kind.contains(kind) ? by_kind.at(kind).at("count").get<int64_t>() : 0;
  }
  int64_t SentByAll() const {
    int64_t sent = 0;
    for (const nlohmann::json& rank : report_.extra.at("ranks")) {
      sent += rank.at("collectives").at("bytes_sent").get<int64_t>();
    }
    return sent;
  }
  // The replay's dense gradient buckets (rank 0's) are the prediction's.
  void ExpectTheSimulatorsBuckets() const {
    std::vector<int64_t> replayed;
    if (report_.extra.contains("gradient_buckets")) {
      for (const nlohmann::json& b : report_.extra.at("gradient_buckets")) {
        replayed.push_back(b.at("bytes").get<int64_t>());
      }
    }
    EXPECT_EQ(replayed, testing::PredictedBucketBytes(File("predicted-timeline.json")));
  }

  std::string model_;
};

// ZeRO-3 over dp 4: each layer's weights gathered from the four ranks'
// shards before its forward and its backward, each layer's gradients
// reduce-scattered into the shards; no bucket all-reduce is left.
TEST_F(ReplayZeroCpCli, ZeroThreeOverFourRanksGathersAndScattersBetweenThem) {
  const Layout l{.dp = 4, .zero = 3};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l, "keep", kSmallShape));
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInPlace(l));
  const Traced t = Trace(l, kSmallShape);
  ASSERT_GT(t.gathers, 0);
  ASSERT_GT(t.scatters, 0);
  for (int r = 0; r < l.ranks(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(Count(r, "all_gather"), kMicroBatches * t.gathers);
    EXPECT_EQ(Count(r, "reduce_scatter"), kMicroBatches * t.scatters);
    EXPECT_EQ(Count(r, "all_reduce"), 0);
    // FSDP's prefetch: each gather exchanged while the ops before its reader ran.
    EXPECT_EQ(report_.extra.at("ranks")[r].at("collectives").at("prefetched").get<int64_t>(),
              kMicroBatches * t.gathers_ahead);
  }
  EXPECT_GT(t.gathers_ahead, 0);
  EXPECT_EQ(SentByAll(), kMicroBatches * (l.ranks() - 1) * (t.gathered_bytes + t.scattered_bytes));
  ExpectTheSimulatorsBuckets();
  EXPECT_FALSE(report_.extra.contains("gradient_buckets") &&
               !report_.extra.at("gradient_buckets").empty());
}

// ZeRO-3 over dp 4 with the gradients synced once a step (FSDP2's
// set_requires_gradient_sync(False) on the first micro-batch): the gathers
// every micro-batch, the reduce-scatters once, after the last backward, from
// full gradients held over both micro-batches (the peaks, to the byte, hold
// them).
TEST_F(ReplayZeroCpCli, ZeroThreeDeferredSyncReduceScattersOnceAStep) {
  const Layout l{.dp = 4, .zero = 3, .defer = true};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l, "keep", kSmallShape));
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInPlace(l));
  const Traced t = Trace(l, kSmallShape);
  ASSERT_GT(t.scatters, 0);
  for (int r = 0; r < l.ranks(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(Count(r, "all_gather"), kMicroBatches * t.gathers);
    EXPECT_EQ(Count(r, "reduce_scatter"), t.scatters);
  }
  EXPECT_EQ(SentByAll(), (l.ranks() - 1) * (kMicroBatches * t.gathered_bytes + t.scattered_bytes));
  // Held full gradients: a higher peak than every micro-batch's sync at the same layout.
  const int64_t deferred_peak = predicted_.metrics.peak_gpu_bytes;
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(Layout{.dp = 4, .zero = 3}, "keep", kSmallShape));
  EXPECT_GT(deferred_peak, predicted_.metrics.peak_gpu_bytes);
}

// HSDP, dp 4 as two shard groups of two: the gathers and reduce-scatters
// within each pair, the shards all-reduced over the replica group.
TEST_F(ReplayZeroCpCli, HsdpShardsOverPairsAndAllReducesOverReplicas) {
  const Layout l{.dp = 4, .dp_shard = 2, .zero = 3};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l, "keep", kSmallShape));
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInPlace(l));
  const Traced t = Trace(l, kSmallShape);
  ASSERT_GT(t.gathers, 0);
  for (int r = 0; r < l.ranks(); ++r) {
    EXPECT_EQ(Count(r, "all_gather"), kMicroBatches * t.gathers) << "rank " << r;
  }
  // Two groups of two: each moves (2 − 1) · S per op.
  EXPECT_EQ(SentByAll(), 2 * kMicroBatches * (t.gathered_bytes + t.scattered_bytes));
  ASSERT_FALSE(testing::PredictedBucketBytes(File("predicted-timeline.json")).empty());
  ExpectTheSimulatorsBuckets();
}

// cp 2: every ring step sends the rank's payload to the other rank and
// receives its; the gradients are summed over dp × cp.
TEST_F(ReplayZeroCpCli, ContextParallelRingStepsRunBetweenTwoRanks) {
  const Layout l{.cp = 2};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l, "keep"));
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInPlace(l));
  const Traced t = Trace(l);
  ASSERT_GT(t.ring_steps, 0);
  for (int r = 0; r < l.ranks(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(Count(r, "send_recv"), kMicroBatches * t.ring_steps);
    EXPECT_EQ(report_.extra.at("ranks")[r].at("collectives").at("bytes_sent").get<int64_t>(),
              kMicroBatches * t.ring_bytes);
  }
  ASSERT_FALSE(testing::PredictedBucketBytes(File("predicted-timeline.json")).empty());
  ExpectTheSimulatorsBuckets();
}

// The ring beside the SSD: saved activations (the ring's K/V among them)
// written and read back, at a shape whose tensors pass the policy's 1 MiB.
TEST_F(ReplayZeroCpCli, ContextParallelReplaysAnSsdOffloadVerified) {
  const Layout l{.cp = 2};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l, "offload-ssd", " --seq-len 256 --micro-batch 4"));
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInPlace(l));
  EXPECT_GT(report_.metrics.ssd_bytes_written, 0);
}

// A full recompute re-runs each layer's forward in backward, its ring steps
// too: both ranks exchange again, in the same order.
TEST_F(ReplayZeroCpCli, ContextParallelRecomputeExchangesAgainOnBothRanks) {
  const Layout l{.cp = 2};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l, "recompute-full"));
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInPlace(l));
  const Traced t = Trace(l);
  for (int r = 0; r < l.ranks(); ++r) {
    EXPECT_GT(Count(r, "send_recv"), kMicroBatches * t.ring_steps) << "rank " << r;
  }
}

TEST_F(ReplayZeroCpCli, ContextParallelBesideTensorParallelOnFourRanks) {
  const Layout l{.tp = 2, .cp = 2};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l, "keep"));
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInPlace(l));
  for (int r = 0; r < l.ranks(); ++r) {
    EXPECT_GT(Count(r, "send_recv"), 0) << "rank " << r;
    EXPECT_GT(Count(r, "all_reduce"), 0) << "rank " << r;
  }
}

TEST_F(ReplayZeroCpCli, ContextParallelInEachOfTwoStagesOnFourRanks) {
  const Layout l{.cp = 2, .pp = 2};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l, "keep"));
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInPlace(l));
  for (int r = 0; r < l.ranks(); ++r) EXPECT_GT(Count(r, "send_recv"), 0) << "rank " << r;
}

// Eight ranks, every group at once: tp 2 × cp 2 × dp 2 at ZeRO-3, the
// shard group dp × cp (four ranks strided by tp), the ring inside it, the
// tp collectives beside; no HSDP, so no bucket all-reduce.
TEST_F(ReplayZeroCpCli, ZeroThreeWithContextAndTensorParallelOnEightRanks) {
  const Layout l{.tp = 2, .cp = 2, .dp = 2, .zero = 3};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l, "keep", kSmallShape));
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInPlace(l));
  const Traced t = Trace(l, kSmallShape);
  ASSERT_GT(t.gathers, 0);
  ASSERT_GT(t.ring_steps, 0);
  for (int r = 0; r < l.ranks(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(Count(r, "all_gather"), kMicroBatches * t.gathers);
    EXPECT_EQ(Count(r, "reduce_scatter"), kMicroBatches * t.scatters);
    EXPECT_EQ(Count(r, "send_recv"), kMicroBatches * t.ring_steps);
    EXPECT_GT(Count(r, "all_reduce"), 0);
  }
  ExpectTheSimulatorsBuckets();
}

}  // namespace
}  // namespace ssdtrain

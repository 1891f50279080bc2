// `mpirun -np tp·pp·dp ssdtrain replay --model ... --plan ...` with tensor
// parallelism (exec/step_sync.h: Megatron-LM's rank order, tp fastest, then
// dp, then pp): tiny-gpt at tp 2 alone, with sequence parallelism, with two
// pipeline stages and with two data-parallel replicas. Each replays verified
// (every collective's pieces checked by CRC32C and against the group's
// patterns), leaves no files, and every rank's memory peaks are its stage's
// prediction to the byte; the step time is printed beside the prediction,
// not gated (four ranks share this machine's cores), and `compare` sets each
// kind of collective's measured time beside its predicted one; the
// column-parallel layers' backward collectives are exchanged while the GEMM
// beside them runs (exec/README.md, "Asynchronous tp collectives"). Built only with MPI
// (SSDTRAIN_HAVE_MPI).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tests/cli_util.h"
#include "tests/replay_ranks.h"
#include "traces/collective_kind.h"
#include "traces/io.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;

struct Layout {
  int tp = 1, pp = 1, dp = 1;
  int ranks() const { return tp * pp * dp; }
};

class ReplayTensorParallelCli : public testing::ReplayRanksTest {
 protected:
  ReplayTensorParallelCli() : ReplayRanksTest("tp-cli") {}
  void SetUp() override {
    ReplayRanksTest::SetUp();
    model_ = Model("tiny-gpt");
  }
  // tiny-gpt with sequence parallelism (a copy of its config that says so).
  void UseSequenceParallelism() {
    std::ifstream in(model_);
    nlohmann::json config = nlohmann::json::parse(in);
    config["sequence_parallel"] = true;
    config["name"] = "tiny-gpt-sp";  // a config is named as its file
    std::ofstream(File("tiny-gpt-sp.json")) << config.dump();
    model_ = File("tiny-gpt-sp.json");
  }

  // Plans tiny-gpt at `l` (micro-batch 4, sequence 128, 2 micro-batches
  // under 1F1B, every saved activation of 1 MiB or more to the SSD: a
  // shard's MLP activations, 4 × 128 × 1024 / 2 × 4 bytes), checks that plan
  // prints the ranks' count, and replays it on that many ranks, one measured
  // step, verified.
  void PlanAndReplay(const Layout& l) {
    auto planned =
        RunSsdtrain("plan --model " + model_ + " --hardware " + File("hw.json") + " --gpus " +
                    std::to_string(l.ranks()) + " --tp " + std::to_string(l.tp) + " --pp " +
                    std::to_string(l.pp) + " --dp " + std::to_string(l.dp) +
                    " --num-micro-batches 2 --schedule 1f1b --policy offload-ssd --micro-batch 4 "
                    "--seq-len 128 --zero-stage 1 -o " +
                    File("plan.json") + " --prediction " + File("predicted.json"));
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    EXPECT_NE(
        planned.output.find("replay this plan: mpirun -np " + std::to_string(l.ranks()) + " "),
        std::string::npos)
        << planned.output;
    auto r =
        testing::MpiReplay(l.ranks(), model_, File("plan.json"), File("offload"), File("run.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("x " + std::to_string(l.ranks()) + " ranks"), std::string::npos)
        << r.output;
    ASSERT_NO_FATAL_FAILURE(ReadReports());
    std::printf("tp %d x pp %d x dp %d: step %.3f ms measured, %.3f ms predicted\n", l.tp, l.pp,
                l.dp, report_.metrics.step_time_ns / 1e6, predicted_.metrics.step_time_ns / 1e6);
  }

  // Every rank sits where Megatron-LM's order puts it, verified, with its
  // stage's predicted peaks to the byte; the ranks of a tensor-parallel group
  // sent each other what they received; nothing is left on disk.
  void ExpectEveryRankInPlace(const Layout& l) {
    ASSERT_NO_FATAL_FAILURE(ExpectRanksAndStages(l.ranks(), l.pp));
    const nlohmann::json& ranks = report_.extra.at("ranks");
    for (int r = 0; r < l.ranks(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const nlohmann::json& rank = ranks[r];
      ExpectRankOfStage(rank, r / (l.tp * l.dp));
      EXPECT_EQ(rank.at("dp_index").get<int>(), r / l.tp % l.dp);
      EXPECT_EQ(rank.at("tp_index").get<int>(), r % l.tp);
      EXPECT_GT(rank.at("ssd_bytes_written").get<int64_t>(), 0);
      // Its tensor-parallel partner (tp 2) received what it sent.
      const nlohmann::json& mine = rank.at("collectives");
      const nlohmann::json& partner = ranks[r ^ 1].at("collectives");
      EXPECT_GT(mine.at("bytes_sent").get<int64_t>(), 0);
      EXPECT_EQ(mine.at("bytes_sent"), partner.at("bytes_received"));
      EXPECT_EQ(mine.at("pieces_sent"), partner.at("pieces_received"));
    }
    EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
  }

  // Rank 0's collectives in the last step are its trace's, each micro-batch's
  // once per kind, and it sent (n − 1)/n of each payload S per phase (two for
  // an all-reduce, n = 2): S for an all-reduce, S / 2 for a gather or scatter;
  // the prediction has the same, and compare shows each kind's times.
  void ExpectRankZerosCollectivesAreTheTraces(int micro_batches) {
    auto traced = RunSsdtrain("trace --model " + model_ +
                              " --micro-batch 4 --seq-len 128 --tp 2 -o " + File("trace.json"));
    ASSERT_EQ(traced.exit_code, 0) << traced.output;
    auto trace = traces::ReadTrace(File("trace.json"));
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    std::map<std::string, int64_t> count;
    int64_t sent = 0, beside = 0;
    for (const traces::Op& op : trace->ops) {
      if (op.kind != traces::OpKind::kCollective) continue;
      if (traces::AsyncOverlapGemm(*trace, op.id) != traces::kNoOp) beside += micro_batches;
      const traces::CollectiveKind kind = traces::ClassifyCollective(op);
      count[std::string(traces::ToString(kind))] += micro_batches;
      const int64_t s = traces::CollectivePayloadBytes(op);
      sent += micro_batches * (kind == traces::CollectiveKind::kAllReduce ? s : s / 2);
    }
    const nlohmann::json& c = report_.extra.at("ranks")[0].at("collectives");
    std::map<std::string, int64_t> ran;
    for (const auto& [kind, figures] : c.at("by_kind").items()) {
      ran[kind] = figures.at("count").get<int64_t>();
      EXPECT_GT(figures.at("ns").get<int64_t>(), 0) << kind;
    }
    EXPECT_EQ(ran, count);
    EXPECT_EQ(c.at("bytes_sent").get<int64_t>(), sent);
    // Each column-parallel layer's backward collectives (the asynchronous tp
    // backward, on by default) exchanged while the GEMM beside them ran.
    EXPECT_GT(beside, 0);
    EXPECT_EQ(c.at("beside_gemm").get<int64_t>(), beside);
    // The prediction prices the same collectives (stage 0's, by kind).
    std::map<std::string, int64_t> priced;
    for (const auto& [kind, figures] : predicted_.extra.at("details").at("collectives").items()) {
      priced[kind] = figures.at("count").get<int64_t>();
    }
    EXPECT_EQ(priced, count);
    // compare sets each kind's measured time beside the predicted one.
    auto compared = RunSsdtrain("compare --prediction " + File("predicted.json") + " --measured " +
                                File("run.json"));
    ASSERT_EQ(compared.exit_code, 0) << compared.output;
    for (const auto& [kind, n] : count) {
      EXPECT_NE(compared.output.find("collective." + kind + " "), std::string::npos)
          << compared.output;
    }
  }

  std::string model_;
};

TEST_F(ReplayTensorParallelCli, TwoTensorParallelRanksAllReduceVerified) {
  const Layout l{2, 1, 1};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l));
  ExpectEveryRankInPlace(l);
  ExpectRankZerosCollectivesAreTheTraces(2);
  // Without sequence parallelism every collective is an all-reduce.
  const nlohmann::json& by_kind = report_.extra.at("ranks")[0].at("collectives").at("by_kind");
  EXPECT_EQ(by_kind.size(), 1u) << by_kind.dump();
  EXPECT_TRUE(by_kind.contains("all_reduce"));
}

TEST_F(ReplayTensorParallelCli, SequenceParallelRanksGatherAndScatterVerified) {
  UseSequenceParallelism();
  const Layout l{2, 1, 1};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l));
  ExpectEveryRankInPlace(l);
  ExpectRankZerosCollectivesAreTheTraces(2);
  const nlohmann::json& by_kind = report_.extra.at("ranks")[0].at("collectives").at("by_kind");
  EXPECT_TRUE(by_kind.contains("all_gather")) << by_kind.dump();
  EXPECT_TRUE(by_kind.contains("reduce_scatter")) << by_kind.dump();
}

TEST_F(ReplayTensorParallelCli, TwoShardsOfTwoStagesOnFourRanks) {
  // Rank r runs stage r / 2 as shard r % 2: ranks 0 and 1 (stage 0) send
  // their activations to ranks 2 and 3 (stage 1), each to the one of its shard.
  const Layout l{2, 2, 1};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l));
  ExpectEveryRankInPlace(l);
  const nlohmann::json& ranks = report_.extra.at("ranks");
  for (int r = 0; r < 4; ++r) {
    const nlohmann::json& p = ranks[r].at("pipeline");
    EXPECT_GT(p.at("bytes_sent").get<int64_t>(), 0);
    // Its stage neighbour is rank r ± tp × dp = r ± 2.
    EXPECT_EQ(p.at("bytes_received"), ranks[r ^ 2].at("pipeline").at("bytes_sent"));
  }
}

TEST_F(ReplayTensorParallelCli, TwoShardsOfTwoReplicasOnFourRanks) {
  // Rank r is shard r % 2 of replica r / 2; ranks 0 and 2 (shard 0) sum
  // their gradients, as do ranks 1 and 3.
  const Layout l{2, 1, 2};
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay(l));
  ExpectEveryRankInPlace(l);
  for (const nlohmann::json& rank : report_.extra.at("ranks")) {
    EXPECT_GT(rank.at("allreduce_ns").get<int64_t>(), 0);
  }
}

}  // namespace
}  // namespace ssdtrain

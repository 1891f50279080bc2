// The fixture of the expert-parallel replays on MPI ranks
// (replay_expert_parallel_cli_test.cc, replay_mla_cli_test.cc): plans a MoE
// model at a layout with ep 2, replays it under mpirun, and checks every
// rank's place, its all-to-alls and its peaks. Built only with MPI.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli_util.h"
#include "tests/replay_ranks.h"
#include "traces/collective_kind.h"
#include "traces/io.h"
#include "traces/report.h"

namespace ssdtrain::testing::ep_replay {

namespace fs = std::filesystem;

constexpr int kRanks = 2, kMicroBatches = 2;

struct Layout {
  int tp = 1, pp = 1, dp = 2;
  int zero_stage = 0;  // -1: searched
  int cp = 1;          // > 1: with flash attention
  int dp_shard = 0;    // > 0: HSDP
  int ranks() const { return tp * cp * pp * dp; }
  std::string Flags() const {
    std::string flags = " --gpus " + std::to_string(ranks()) + " --tp " + std::to_string(tp) +
                        " --pp " + std::to_string(pp) + " --dp " + std::to_string(dp) + " --ep 2";
    if (zero_stage >= 0) flags.append(" --zero-stage ").append(std::to_string(zero_stage));
    if (cp > 1) flags.append(" --cp ").append(std::to_string(cp)).append(" --attention flash");
    if (dp_shard > 0) flags.append(" --dp-shard ").append(std::to_string(dp_shard));
    return flags;
  }
};
// tiny-moe at sequence 64 (micro-batch 4): 256 tokens × top-2 = 512 routed rows.
inline const std::string kShape = " --seq-len 64 --micro-batch 4";

class ReplayExpertParallelCli : public ReplayRanksTest {
 protected:
  ReplayExpertParallelCli() : ReplayRanksTest("ep-replay-cli") {}

  // Plans tiny-moe (or `model`) at `l` (tp 1, pp 1, dp 2, ZeRO 0 unless
  // given), ep 2, with `policy` (2 micro-batches under 1F1B), checks that plan prints
  // the replay line, and replays it on that many ranks, one measured step,
  // verified.
  void PlanAndReplay(const std::string& policy, const Layout& l = {},
                     const std::string& model_path = "") {
    const std::string model = model_path.empty() ? Model("tiny-moe") : model_path;
    ASSERT_NO_FATAL_FAILURE(PlanThenReplay(model,
                                           l.Flags() + kShape + " --num-micro-batches " +
                                               std::to_string(kMicroBatches) +
                                               " --schedule 1f1b --policy " + policy,
                                           l.ranks()));
    std::printf("%s tp %d pp %d dp %d ep 2, %s: step %.3f ms measured, %.3f ms predicted\n",
                model_path.empty() ? "tiny-moe" : "model", l.tp, l.pp, l.dp, policy.c_str(),
                report_.metrics.step_time_ns / 1e6, predicted_.metrics.step_time_ns / 1e6);
  }

  // The all-to-alls of one rank's trace at tp 1, pp 1 (built as the replay
  // builds it), per micro-batch: how many, and the bytes a rank sends,
  // (n − 1)/n of each payload S (sim/collective.h's figure).
  void TracedAllToAlls(int64_t* count, int64_t* sent) {
    auto traced = RunSsdtrain("trace --model " + Model("tiny-moe") + " --dp 2 --ep 2" + kShape +
                              " -o " + File("trace.json"));
    ASSERT_EQ(traced.exit_code, 0) << traced.output;
    auto trace = traces::ReadTrace(File("trace.json"));
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    *count = 0;
    *sent = 0;
    for (const traces::Op& op : trace->ops) {
      if (op.kind != traces::OpKind::kCollective) continue;
      ASSERT_EQ(traces::ClassifyCollective(op), traces::CollectiveKind::kAllToAll) << op.name;
      ++*count;
      *sent += traces::CollectivePayloadBytes(op) * (kRanks - 1) / kRanks;
    }
  }

  // Every rank sits where the layout puts it (its ep index its replica % 2),
  // verified, with its stage's predicted peaks to the byte; it ran
  // all-to-alls and received what its ep partner (the other replica of its
  // stage and shard) sent; nothing is left on disk.
  void ExpectEveryRankInItsPlace(const Layout& l) {
    ASSERT_NO_FATAL_FAILURE(ExpectRanksAndStages(l.ranks(), l.pp));
    const nlohmann::json& ranks = report_.extra.at("ranks");
    for (int r = 0; r < l.ranks(); ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const nlohmann::json& rank = ranks[r];
      const int stage = r / (l.tp * l.dp), replica = r / l.tp % l.dp;
      ExpectRankOfStage(rank, stage);
      EXPECT_EQ(rank.at("dp_index").get<int>(), replica);
      EXPECT_EQ(rank.at("ep_index").get<int>(), replica % 2);
      const int partner = stage * l.tp * l.dp + (replica ^ 1) * l.tp + r % l.tp;
      const nlohmann::json& mine = rank.at("collectives");
      const nlohmann::json& theirs = ranks[partner].at("collectives");
      EXPECT_GT(mine.at("by_kind").at("all_to_all").at("count").get<int64_t>(), 0);
      EXPECT_EQ(mine.at("bytes_sent"), theirs.at("bytes_received"));
      EXPECT_EQ(mine.at("pieces_sent"), theirs.at("pieces_received"));
    }
    EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
  }

  // One rank's trace of tiny-moe at dp 4, ep 2 and ZeRO stage `zero`, built
  // as the replay builds it.
  void TraceAtDp4(int zero, traces::Trace* out) {
    auto traced =
        RunSsdtrain("trace --model " + Model("tiny-moe") + " --dp 4 --ep 2" + kShape +
                    " --zero-stage " + std::to_string(zero) + " -o " + File("trace.json"));
    ASSERT_EQ(traced.exit_code, 0) << traced.output;
    auto trace = traces::ReadTrace(File("trace.json"));
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    *out = std::move(*trace);
  }

  // At tp 1, pp 1 (two ranks): every rank in its place, its all-to-alls the
  // trace's with the trace's bytes, and the prediction priced the same ones.
  void ExpectEveryRankInPlace() {
    ASSERT_NO_FATAL_FAILURE(ExpectEveryRankInItsPlace(Layout{}));
    int64_t per_micro_batch = 0, sent = 0;
    ASSERT_NO_FATAL_FAILURE(TracedAllToAlls(&per_micro_batch, &sent));
    ASSERT_GT(per_micro_batch, 0);
    for (int r = 0; r < kRanks; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const nlohmann::json& mine = report_.extra.at("ranks")[r].at("collectives");
      EXPECT_EQ(mine.at("bytes_sent").get<int64_t>(), kMicroBatches * sent);
      EXPECT_EQ(mine.at("pieces_sent").get<int64_t>(), kMicroBatches * per_micro_batch);
      const nlohmann::json& by_kind = mine.at("by_kind");
      ASSERT_EQ(by_kind.size(), 1u) << by_kind.dump();
      EXPECT_EQ(by_kind.at("all_to_all").at("count").get<int64_t>(),
                kMicroBatches * per_micro_batch);
    }
    const nlohmann::json& priced = predicted_.extra.at("details").at("collectives");
    EXPECT_EQ(priced.at("all_to_all").at("count").get<int64_t>(), kMicroBatches * per_micro_batch)
        << priced.dump();
  }
};

}  // namespace ssdtrain::testing::ep_replay

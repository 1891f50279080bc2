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

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli_util.h"
#include "tests/replay_ranks.h"
#include "traces/collective_kind.h"
#include "traces/dp_buckets.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;

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
const std::string kShape = " --seq-len 64 --micro-batch 4";

class ReplayExpertParallelCli : public testing::ReplayRanksTest {
 protected:
  ReplayExpertParallelCli() : ReplayRanksTest("ep-replay-cli") {}

  // Plans tiny-moe (or `model`) at `l` (tp 1, pp 1, dp 2, ZeRO 0 unless
  // given), ep 2, with `policy` (2 micro-batches under 1F1B), checks that plan prints
  // the replay line, and replays it on that many ranks, one measured step,
  // verified.
  void PlanAndReplay(const std::string& policy, const Layout& l = {},
                     const std::string& model_path = "") {
    const std::string model = model_path.empty() ? Model("tiny-moe") : model_path;
    auto planned = RunSsdtrain(
        "plan --model " + model + " --hardware " + File("hw.json") + l.Flags() + kShape +
        " --num-micro-batches " + std::to_string(kMicroBatches) + " --schedule 1f1b --policy " +
        policy + " -o " + File("plan.json") + " --prediction " + File("predicted.json") +
        " --timeline " + File("predicted-timeline.json"));
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    const std::string n = std::to_string(l.ranks());
    EXPECT_NE(planned.output.find("replay this plan: mpirun -np " + n + " "), std::string::npos)
        << planned.output;
    auto r =
        testing::MpiReplay(l.ranks(), model, File("plan.json"), File("offload"), File("run.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("x " + n + " ranks"), std::string::npos) << r.output;
    ASSERT_NO_FATAL_FAILURE(ReadReports());
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

// DeepSeek-V3's genuine file reduced to a few layers (models/tests/hf/): multi-head
// latent attention, a dense first layer, MoE layers of 8 sigmoid-routed experts with
// a shared expert, and one multi-token-prediction depth on the last stage, at ep 2
// on two ranks. Under keep and recompute-selective of mla_up_proj (query, key and
// value dropped and rebuilt from the latents) every rank replays verified with its
// predicted peaks to the byte and nothing left on disk. (Its tensors are under the
// fixed policies' 1 MiB offload floor; hf_replay_cli_test.cc replays the same file
// through the SSD path.)
class ReplayMlaCli : public ReplayExpertParallelCli {
 protected:
  std::string ReducedDeepseek() {
    std::ifstream in(testing::SourceDir() + "/models/tests/hf/deepseek-v3/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    // Query, key and value of 256 tokens x 8 heads over 64 KiB each (the
    // smallest saved tensor a plan moves, models/detail/trace_builder.h).
    const nlohmann::json sizes = {
        {"hidden_size", 128},       {"num_hidden_layers", 3},      {"num_attention_heads", 8},
        {"num_key_value_heads", 8}, {"q_lora_rank", 64},           {"kv_lora_rank", 32},
        {"qk_nope_head_dim", 32},   {"qk_rope_head_dim", 16},      {"v_head_dim", 32},
        {"intermediate_size", 256}, {"moe_intermediate_size", 64}, {"n_routed_experts", 8},
        {"num_experts_per_tok", 2}, {"first_k_dense_replace", 1},  {"vocab_size", 512}};
    for (const auto& [key, value] : sizes.items()) {
      EXPECT_TRUE(j.contains(key)) << key;
      j[key] = value;
    }
    EXPECT_EQ(j.at("num_nextn_predict_layers"), 1);
    fs::create_directories(dir_ / "deepseek-v3-reduced");
    std::ofstream(dir_ / "deepseek-v3-reduced" / "config.json") << j.dump(2);
    return (dir_ / "deepseek-v3-reduced").string();
  }
};

TEST_F(ReplayMlaCli, KeepReplaysVerifiedOnTwoExpertRanks) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("keep", Layout{}, ReducedDeepseek()));
  ExpectEveryRankInItsPlace(Layout{});
}

TEST_F(ReplayMlaCli, UpProjectionRecomputeReplaysVerifiedOnTwoExpertRanks) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("recompute-selective --recompute-modules mla_up_proj",
                                        Layout{}, ReducedDeepseek()));
  ExpectEveryRankInItsPlace(Layout{});
  auto plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  int recomputed = 0;
  for (const traces::Placement& p : plan->placements) {
    recomputed += p.action == traces::TensorAction::kRecompute ? 1 : 0;
  }
  // query, key and value in each of the 3 blocks and the MTP depth's.
  EXPECT_EQ(recomputed, 3 * 4);
}

// The same recompute beside tensor-parallel shards with sequence parallelism
// (plan --sequence-parallel over the Hugging Face file, which has none): the
// rotary key all-gathered over the shards and rebuilt into query, key and
// value on each, the down projections replicated; four ranks, verified, with
// the plan's peaks to the byte.
TEST_F(ReplayMlaCli, UpProjectionRecomputeReplaysBesideSequenceParallelShards) {
  const Layout l{2, 1, 2};
  ASSERT_NO_FATAL_FAILURE(
      PlanAndReplay("recompute-selective --recompute-modules mla_up_proj --sequence-parallel", l,
                    ReducedDeepseek()));
  ExpectEveryRankInItsPlace(l);
  auto plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->sequence_parallel);
  int recomputed = 0;
  for (const traces::Placement& p : plan->placements) {
    recomputed += p.action == traces::TensorAction::kRecompute ? 1 : 0;
  }
  EXPECT_EQ(recomputed, 3 * 4);
  for (const nlohmann::json& rank : report_.extra.at("ranks")) {
    const nlohmann::json& by_kind = rank.at("collectives").at("by_kind");
    EXPECT_TRUE(by_kind.contains("all_gather")) << by_kind.dump();
    EXPECT_TRUE(by_kind.contains("reduce_scatter")) << by_kind.dump();
  }
}

}  // namespace
}  // namespace ssdtrain

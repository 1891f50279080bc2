// DeepSeek-V3's multi-head latent attention replayed at ep 2 on MPI ranks (the
// fixture: tests/replay_expert_parallel.h). Built only with MPI.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/replay_expert_parallel.h"
#include "traces/io.h"
#include "traces/plan.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::ep_replay::Layout;
using testing::ep_replay::ReplayExpertParallelCli;

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

// The layout's rank order and groups against Megatron-Core's, its sharding
// degrees and its validation.
#include "traces/layout.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace ssdtrain::traces {
namespace {

using Groups = std::vector<std::vector<int64_t>>;

// Every distinct group `of` gives over the world, in order of their first rank.
template <typename Of>
Groups AllGroups(const Layout& l, Of of) {
  std::set<std::vector<int64_t>> seen;
  Groups out;
  for (int64_t r = 0; r < l.world(); ++r) {
    std::vector<int64_t> g = of(r);
    if (seen.insert(g).second) out.push_back(g);
  }
  return out;
}

// The groups below are what Megatron-Core's RankGenerator makes for tp 2, cp 2,
// dp 2, pp 2 under its default order tp-cp-ep-dp-pp
// (generate_masked_orthogonal_rank_groups in megatron/core/parallel_state.py at
// d98e8a64; its algorithm re-typed and run to list them), and for its expert
// grid with ep 2 (tp 2, ep 2, expert dp 16 / (2·2·2) = 2, pp 2).
TEST(Layout, RankOrderAndGroupsAreMegatronsForTp2Cp2Pp2Dp2) {
  Layout l;
  l.tp = 2;
  l.cp = 2;
  l.pp = 2;
  l.dp = 2;
  ASSERT_EQ(l.world(), 16);
  // rank = tp + 2·(cp + 2·(dp + 2·stage)): rank 13 = 1 + 2·(0 + 2·(1 + 2·1)).
  EXPECT_EQ(l.CoordsOf(13), (RankCoords{1, 0, 1, 1}));
  for (int64_t r = 0; r < 16; ++r) EXPECT_EQ(l.RankOf(l.CoordsOf(r)), r);
  auto groups = [&](unsigned dims) {
    return AllGroups(l, [&](int64_t r) { return l.GroupOf(r, dims); });
  };
  EXPECT_EQ(groups(kTpDim),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(groups(kCpDim),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(groups(kDpDim),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(groups(kPpDim),
            (Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}));
  EXPECT_EQ(groups(kCpDim | kDpDim),
            (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  EXPECT_EQ(groups(kTpDim | kCpDim),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(l.NextStageRank(5), 13);
  EXPECT_EQ(l.PrevStageRank(5), 13);  // two stages: the wrap meets the same rank

  l.ep = 2;
  ASSERT_TRUE(ValidateLayout(l, "x").ok());
  EXPECT_EQ(AllGroups(l, [&](int64_t r) { return l.EpGroup(r); }),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(AllGroups(l, [&](int64_t r) { return l.ExpertDpGroup(r); }),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
}

// Without cp the expert groups are the ones exec's replay has used since ep
// landed: ep consecutive dp replicas of one stage and tp index.
TEST(Layout, ExpertGroupsWithoutCpAreConsecutiveReplicas) {
  Layout l;
  l.tp = 2;
  l.dp = 4;
  l.ep = 2;
  EXPECT_EQ(l.EpGroup(5), (std::vector<int64_t>{5, 7}));  // dp 2 and 3 of tp index 1
  EXPECT_EQ(l.ExpertIndexOf(5), 0);
  EXPECT_EQ(l.ExpertDpGroup(5), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(l.ExpertDp(), 2);
}

// HSDP with experts: dp 8 in shard groups of 4 (ranks 0-3, 4-7; tp 1), ep 2.
// The experts shard over the ranks of equal expert index in the shard group
// ({0, 2}, {1, 3}, {4, 6}, {5, 7}: cp · dp_shard / ep = 2) and their
// gradients are summed over the replica group, as the dense ones ({0, 4}, ...).
TEST(Layout, HsdpShardsTheExpertsInsideEachShardGroup) {
  Layout l;
  l.dp = 8;
  l.ep = 2;
  l.zero_stage = 3;
  l.dp_shard = 4;
  ASSERT_TRUE(ValidateLayout(l, "x").ok());
  EXPECT_EQ(AllGroups(l, [&](int64_t r) { return l.ExpertShardGroup(r); }),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(AllGroups(l, [&](int64_t r) { return l.ExpertGradientGroup(r); }),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(l.ExpertWeightShards(), 2);
  EXPECT_EQ(l.WeightShards(), 4);
  // Each replica group holds one expert index.
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t m : l.ExpertGradientGroup(r)) EXPECT_EQ(l.ExpertIndexOf(m), l.ExpertIndexOf(r));
  }
  // Without HSDP: the whole expert-data-parallel group, and no replica to sum over at ZeRO-3.
  l.dp_shard = 0;
  EXPECT_EQ(l.ExpertShardGroup(1), (std::vector<int64_t>{1, 3, 5, 7}));
  EXPECT_EQ(l.ExpertGradientGroup(1), (std::vector<int64_t>{1}));
  l.zero_stage = 1;
  EXPECT_EQ(l.ExpertGradientGroup(1), (std::vector<int64_t>{1, 3, 5, 7}));
}

// HSDP over dp 4 with dp_shard 2 and cp 2 (tp 1): dp_index = replica · 2 +
// shard, and rank = cp + 2·dp. The shard group of rank 0 is dp 0..1 × cp 0..1
// = ranks {0, 1, 2, 3}; its replica group dp {0, 2} at cp 0 = {0, 4}.
TEST(Layout, HsdpShardsOverDpShardTimesCpAndReplicatesAcross) {
  Layout l;
  l.cp = 2;
  l.dp = 4;
  l.dp_shard = 2;
  l.zero_stage = 3;
  ASSERT_TRUE(ValidateLayout(l, "x").ok());
  EXPECT_EQ(l.ShardGroup(0), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(l.ShardGroup(6), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(l.ReplicaGroup(0), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(l.ReplicaGroup(3), (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(l.Replicas(), 2);
  // Every rank is in exactly one shard group and one replica group, and their
  // sizes multiply to dp × cp.
  for (int64_t r = 0; r < l.world(); ++r)
    EXPECT_EQ(l.ShardGroup(r).size() * l.ReplicaGroup(r).size(), size_t{8});
  // The dense gradient buckets: over the replica group at stages 2 and 3
  // (the shard group reduce-scattered them), over dp × cp at 0 and 1.
  EXPECT_EQ(l.DenseGradientGroup(3), (std::vector<int64_t>{3, 7}));
  l.zero_stage = 2;
  EXPECT_EQ(l.DenseGradientGroup(3), (std::vector<int64_t>{3, 7}));
  l.zero_stage = 1;
  EXPECT_EQ(l.DenseGradientGroup(3), l.DpCpGroup(3));
  EXPECT_EQ(l.DenseGradientGroup(3).size(), size_t{8});
  // Without HSDP, ZeRO-3 leaves nothing to all-reduce: a group of one.
  l.zero_stage = 3;
  l.dp_shard = 0;
  EXPECT_EQ(l.DenseGradientGroup(5), (std::vector<int64_t>{5}));
}

// The sharding degrees by ZeRO stage at dp 8, cp 2 (and dp_shard 4: HSDP).
TEST(Layout, ShardsByZeroStage) {
  Layout l;
  l.cp = 2;
  l.dp = 8;
  const int64_t expected[4][3] = {// optimizer, gradients, weights
                                  {1, 1, 1},
                                  {16, 1, 1},
                                  {16, 16, 1},
                                  {16, 16, 16}};
  for (int64_t z = 0; z <= 3; ++z) {
    l.zero_stage = z;
    EXPECT_EQ(l.OptimizerShards(), expected[z][0]) << "zero " << z;
    EXPECT_EQ(l.GradientShards(), expected[z][1]) << "zero " << z;
    EXPECT_EQ(l.WeightShards(), expected[z][2]) << "zero " << z;
    EXPECT_EQ(l.ShardGroup(0).size(), static_cast<size_t>(z == 0 ? 1 : 16));
  }
  l.dp_shard = 4;
  EXPECT_EQ(l.WeightShards(), 8);  // dp_shard 4 × cp 2
  l.ep = 4;
  EXPECT_EQ(l.ExpertWeightShards(), 2);  // cp·dp_shard / ep = 8 / 4
  l.dp_shard = 0;
  EXPECT_EQ(l.ExpertWeightShards(), 4);  // cp·dp / ep = 16 / 4
}

TEST(Layout, ValidationNamesTheField) {
  Layout l;
  l.dp = 4;
  l.dp_shard = 3;
  l.zero_stage = 3;
  EXPECT_EQ(ValidateLayout(l, "plan.json").message(),
            "plan.json: dp_shard: 3 does not divide dp 4 (HSDP shards inside groups of dp_shard "
            "ranks and replicates across dp / dp_shard)");
  l.dp_shard = 2;
  l.zero_stage = 0;
  EXPECT_NE(ValidateLayout(l, "plan").message().find("needs a ZeRO stage"), std::string::npos);
  l.zero_stage = 4;
  EXPECT_NE(
      ValidateLayout(l, "cli", "--").message().find("cli: --zero_stage: expected 0, 1, 2 or 3"),
      std::string::npos);
  l = Layout{};
  l.cp = 0;
  EXPECT_EQ(ValidateLayout(l, "f").message(), "f: cp: expected a positive integer, got 0");
  // What the traces do not model yet, one rule for configs and the planner.
  EXPECT_FALSE(Unmodelled(Layout{.ep = 2}, true));
  EXPECT_FALSE(Unmodelled(Layout{.zero_stage = 2}, true));
  // ZeRO-1 with ep: the distributed optimizer, its experts' state over dp / ep.
  EXPECT_FALSE(Unmodelled(Layout{.dp = 4, .ep = 2, .zero_stage = 1}, false));
  // ZeRO-2/3 with ep: the experts' gradients and weights over dp / ep too.
  EXPECT_FALSE(Unmodelled(Layout{.dp = 4, .ep = 2, .zero_stage = 2}, false));
  EXPECT_FALSE(Unmodelled(Layout{.dp = 4, .ep = 2, .zero_stage = 3}, false));
  // HSDP with ep: an ep group inside each shard group.
  EXPECT_FALSE(Unmodelled(Layout{.dp = 4, .ep = 2, .zero_stage = 3, .dp_shard = 2}, false));
  EXPECT_EQ(ValidateLayout(Layout{.dp = 8, .ep = 4, .zero_stage = 3, .dp_shard = 2}, "f").message(),
            "f: ep: 4 does not divide cp x dp_shard = 1 x 2 (with HSDP the expert-parallel group "
            "is taken from one shard group's ranks)");
  EXPECT_EQ(Unmodelled(Layout{.zero_stage = 3}, true)->field, "fp8");
  EXPECT_FALSE(Unmodelled(Layout{.zero_stage = 3}, false));
  // HSDP at ZeRO-1 (a shard group smaller than dp): the partial distributed
  // optimizer is not built; a shard group of all dp is plain ZeRO-1.
  EXPECT_EQ(Unmodelled(Layout{.dp = 8, .zero_stage = 1, .dp_shard = 4}, false)->field, "dp_shard");
  EXPECT_FALSE(Unmodelled(Layout{.dp = 8, .zero_stage = 1, .dp_shard = 8}, false));
  EXPECT_FALSE(Unmodelled(Layout{.dp = 8, .zero_stage = 2, .dp_shard = 4}, false));
  l = Layout{};
  l.dp = 3;
  l.ep = 2;
  EXPECT_NE(ValidateLayout(l, "f").message().find("f: ep: 2 does not divide cp x dp = 3"),
            std::string::npos);
  l = Layout{};
  l.tp = 2;
  l.cp = 2;
  l.dp = 2;
  EXPECT_TRUE(CheckWorld(l, 8, "s").ok());
  EXPECT_EQ(CheckWorld(l, 16, "s").message(), "s: tp 2 x cp 2 x dp 2 x pp 1 = 8 ranks, not 16");
}

// The pipeline split, Megatron-Core's --decoder-first/last-pipeline-num-layers:
// the stages between take the rest evenly; every block on exactly one stage.
TEST(Layout, UnevenPipelineSplitGivesTheMiddleStagesTheRest) {
  Layout l{.pp = 16, .pp_first_layers = 3, .pp_last_layers = 2};
  ASSERT_FALSE(PipelineSplitError(l, 61));  // DeepSeek-V3: 3 + 14 x 4 + 2
  EXPECT_EQ(BlocksOfStage(l, 61, 0), (StageBlocks{0, 3}));
  EXPECT_EQ(BlocksOfStage(l, 61, 1), (StageBlocks{3, 4}));
  EXPECT_EQ(BlocksOfStage(l, 61, 14), (StageBlocks{55, 4}));
  EXPECT_EQ(BlocksOfStage(l, 61, 15), (StageBlocks{59, 2}));
  int64_t next = 0;
  for (int64_t s = 0; s < l.pp; ++s) {
    const StageBlocks b = BlocksOfStage(l, 61, s);
    EXPECT_EQ(b.first, next) << s;
    EXPECT_GE(b.count, 1) << s;
    next = b.first + b.count;
  }
  EXPECT_EQ(next, 61);
  EXPECT_EQ(l.Describe(), "pp 16 (first 3, last 2)");
  // Only the first set: the rest over the pp - 1 others, the last among them.
  l = Layout{.pp = 4, .pp_first_layers = 1};
  ASSERT_FALSE(PipelineSplitError(l, 31));
  EXPECT_EQ(BlocksOfStage(l, 31, 0), (StageBlocks{0, 1}));
  EXPECT_EQ(BlocksOfStage(l, 31, 3), (StageBlocks{21, 10}));
  // Only the last set.
  l = Layout{.pp = 3, .pp_last_layers = 1};
  ASSERT_FALSE(PipelineSplitError(l, 9));
  EXPECT_EQ(BlocksOfStage(l, 9, 0), (StageBlocks{0, 4}));
  EXPECT_EQ(BlocksOfStage(l, 9, 1), (StageBlocks{4, 4}));
  EXPECT_EQ(BlocksOfStage(l, 9, 2), (StageBlocks{8, 1}));
  // The even split, unchanged.
  l = Layout{.pp = 4};
  EXPECT_EQ(BlocksOfStage(l, 32, 3), (StageBlocks{24, 8}));
}

TEST(Layout, UnevenPipelineSplitRefusalsNameTheField) {
  EXPECT_EQ(PipelineSplitError(Layout{.pp = 16}, 61)->field, "pp");
  EXPECT_EQ(PipelineSplitError(Layout{.pp = 16}, 61)->why,
            "layers 61 are not divisible by pp 16 (each stage holds layers / pp blocks unless "
            "the first and last stages' blocks are set)");
  auto refusal =
      PipelineSplitError(Layout{.pp = 16, .pp_first_layers = 2, .pp_last_layers = 2}, 61);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->field, "pp_last_layers");
  EXPECT_EQ(refusal->why,
            "first 2, last 2 of 61 layers over pp 16 leaves 57 blocks, which 14 stages do not "
            "share evenly (the stages between the first and the last hold the same blocks)");
  refusal = PipelineSplitError(Layout{.pp = 1, .pp_first_layers = 2}, 61);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->field, "pp_first_layers");
  refusal = PipelineSplitError(Layout{.pp = 4, .vp = 2, .pp_first_layers = 3}, 61);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->field, "virtual_stages");
  refusal = PipelineSplitError(Layout{.pp = 2, .pp_first_layers = 30, .pp_last_layers = 30}, 61);
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->why,
            "first 30, last 30 of 61 layers over pp 2: the two stages hold 60 "
            "blocks, not 61");
  refusal = PipelineSplitError(Layout{.pp = 8, .pp_first_layers = 30, .pp_last_layers = 30}, 61);
  ASSERT_TRUE(refusal);
  EXPECT_NE(refusal->why.find("leaves 1 blocks for 6 stages"), std::string::npos);
}

// The planner's split where pp does not divide the layers: ceil(layers / pp)
// on each middle stage, the rest on the first and last, the first the larger.
TEST(Layout, DefaultUnevenSplitPutsTheRestOnTheFirstAndLastStages) {
  using Split = std::optional<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(DefaultUnevenSplit(61, 16), (Split{{3, 2}}));  // 3 + 14 x 4 + 2
  EXPECT_EQ(DefaultUnevenSplit(61, 8), (Split{{7, 6}}));   // 7 + 6 x 8 + 6
  EXPECT_EQ(DefaultUnevenSplit(61, 2), (Split{{31, 30}}));
  EXPECT_EQ(DefaultUnevenSplit(126, 8), (Split{{15, 15}}));  // Llama-3.1-405B
  EXPECT_EQ(DefaultUnevenSplit(64, 8), std::nullopt);        // the even split
  EXPECT_EQ(DefaultUnevenSplit(61, 32), std::nullopt);  // 30 x 2 leaves one block for two stages
  EXPECT_EQ(DefaultUnevenSplit(3, 4), std::nullopt);
  for (int64_t layers = 2; layers <= 130; ++layers) {
    for (int64_t pp = 2; pp <= layers; ++pp) {
      const Split s = DefaultUnevenSplit(layers, pp);
      if (!s) continue;
      const Layout l{.pp = pp, .pp_first_layers = s->first, .pp_last_layers = s->second};
      ASSERT_FALSE(PipelineSplitError(l, layers)) << layers << " over " << pp;
      EXPECT_LE(BlocksOfStage(l, layers, 0).count,
                pp > 2 ? BlocksOfStage(l, layers, 1).count : layers);
    }
  }
}

TEST(Layout, SequenceSplitsInto2CpChunksOfTpPieces) {
  Layout l;
  l.cp = 4;
  l.tp = 2;
  EXPECT_EQ(SequenceSplitError(l, 4096, true), "");  // 4096 / (8 · 2)
  EXPECT_EQ(SequenceSplitError(l, 24, false), "");   // 24 / 8
  EXPECT_EQ(SequenceSplitError(l, 24, true),
            "sequence 24 does not divide into 2 x cp = 8 chunks (the load-balanced split) of tp "
            "2 pieces each");
  l.cp = 1;
  EXPECT_EQ(SequenceSplitError(l, 7, false), "");
  EXPECT_EQ(SequenceSplitError(l, 7, true),
            "sequence 7 does not divide into tp = 2 pieces "
            "(sequence parallelism)");
}

// Consecutive ranks fill domains of 8: tp 8 sits in one node; the dp group of
// tp 8 spans one rank in each of dp nodes; at tp 2, dp 4 the dp group is 4
// ranks of one node.
TEST(Layout, GroupsArePlacedByTheRankOrder) {
  Layout l;
  l.tp = 8;
  l.dp = 4;
  GroupPlacement tp = PlaceGroup(l.TpGroup(9), 8);
  EXPECT_EQ(tp.ranks, 8);
  EXPECT_TRUE(tp.within_one_domain());
  GroupPlacement dp = PlaceGroup(l.DpGroup(9), 8);
  EXPECT_EQ(dp.domains, 4);
  EXPECT_EQ(dp.max_per_domain, 1);
  l.tp = 2;
  l.dp = 16;
  dp = PlaceGroup(l.DpGroup(3), 8);  // ranks 1, 3, ..., 31: 4 per node over 4 nodes
  EXPECT_EQ(dp.domains, 4);
  EXPECT_EQ(dp.max_per_domain, 4);
  EXPECT_EQ(l.Describe(), "tp 2 dp 16");
}

}  // namespace
}  // namespace ssdtrain::traces

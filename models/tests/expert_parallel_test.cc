// Expert parallelism in the trace: each rank's expert memory in closed form at
// ep = 1, 2, 4, the dispatch and combine all-to-alls and their payloads, the
// experts' gemms at the tokens the group routes to them, and the refusals.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/moe_config.h"
#include "models/tests/trace_stats.h"
#include "traces/collective_kind.h"
#include "traces/dp_buckets.h"
#include "traces/storage_plan.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

// tiny-moe: h 256, 8 experts of width 256, top-2, fp32 (adam mixed: 2 fp32
// moments, no master copy), 4 layers of which the first is dense; micro-batch
// 4 × 256 tokens. dp 4 lets ep reach 4.
ModelConfig TinyMoe(int64_t ep) {
  Result<ModelConfig> c =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/tiny-moe.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  ConfigOverrides o;
  o.dp = 4;
  o.ep = ep;
  Result<ModelConfig> with = ApplyOverrides(*c, o, "tiny-moe.json");
  EXPECT_TRUE(with.ok()) << with.status().ToString();
  return with.ok() ? *with : ModelConfig{};
}

traces::Trace Build(const ModelConfig& c) {
  Result<traces::Trace> t = BuildTrace(c, 0);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  EXPECT_TRUE(traces::Validate(*t, "tiny-moe").ok());
  return *t;
}

bool InRoutedExperts(const std::string& name) {
  return name.find(".experts.") != std::string::npos;  // not "shared_expert"
}

struct Static {
  int64_t expert_weights = 0, expert_grads = 0, total = 0;
};

Static StaticBytes(const traces::Trace& t) {
  Static s;
  for (const traces::Tensor& x : t.tensors) {
    if (x.alias_of) continue;
    const bool grad = traces::IsWeightGradient(t, x);
    if (x.kind == traces::TensorKind::kWeight && InRoutedExperts(x.name))
      s.expert_weights += x.bytes;
    if (grad && InRoutedExperts(x.name)) s.expert_grads += x.bytes;
    if (x.kind == traces::TensorKind::kWeight || x.kind == traces::TensorKind::kOptimizerState ||
        grad) {
      s.total += x.bytes;
    }
  }
  return s;
}

// One expert: 3 · 256 · 256 = 196,608 parameters; 4 bytes of weight, 4 of
// gradient, 8 of adam state each. Three MoE layers of E/ep experts per rank.
constexpr int64_t kExpertParams = 3 * 256 * 256;
constexpr int64_t kMoeLayers = 3;
constexpr int64_t kExperts = 8;

TEST(ExpertParallel, EachRankHoldsItsShareOfTheExpertsWeightsGradientsAndState) {
  const Static one = StaticBytes(Build(TinyMoe(1)));
  for (int64_t ep : {1, 2, 4}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    const Static s = StaticBytes(Build(TinyMoe(ep)));
    const int64_t local = kExperts / ep;
    EXPECT_EQ(s.expert_weights, kMoeLayers * local * kExpertParams * 4);
    EXPECT_EQ(s.expert_grads, kMoeLayers * local * kExpertParams * 4);
    // Weights, gradients and optimizer state together: 16 bytes a parameter,
    // the other (E − E/ep) experts' gone and nothing else changed.
    EXPECT_EQ(one.total - s.total, kMoeLayers * (kExperts - local) * kExpertParams * 16);
  }
  // To the byte: ep 1, 2, 4 hold 75,497,472, 37,748,736 and 18,874,368 bytes of
  // routed experts' weights, gradients and state.
  EXPECT_EQ(kMoeLayers * kExperts * kExpertParams * 16, 75'497'472);
}

// ZeRO-1 with ep (Megatron-Core's distributed optimizer): the routed experts'
// state over their expert-data-parallel group, dp / ep ranks; the rest's over
// dp. tiny-moe's adam state is 2 fp32 words a parameter, one tensor per
// layer's group (ceil(2p / shards) words), the experts' a group of their own.
TEST(ExpertParallel, ZeroOneShardsTheExpertsStateOverTheirDataParallelGroup) {
  for (int64_t ep : {1, 2, 4}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    ModelConfig zero0 = TinyMoe(ep), zero1 = TinyMoe(ep);
    zero1.zero_stage = 1;
    ASSERT_TRUE(ValidateConfig(zero1, "tiny-moe").ok())
        << ValidateConfig(zero1, "tiny-moe").ToString();
    const traces::Trace unsharded = Build(zero0), t = Build(zero1);
    // Per layer: its dense and its routed experts' parameters (as built at ep).
    std::map<int, int64_t> dense, experts;
    for (const traces::Tensor& x : unsharded.tensors) {
      if (x.alias_of || x.kind != traces::TensorKind::kWeight) continue;
      int64_t n = 1;
      for (int64_t d : x.shape) n *= d;
      (traces::IsRoutedExpert(x) ? experts : dense)[x.layer] += n;
    }
    EXPECT_EQ(experts.size(), static_cast<size_t>(kMoeLayers));
    const int64_t expert_dp = 4 / ep;
    int64_t want = 0;
    for (const auto& [layer, p] : dense) want += 4 * ((2 * p + 3) / 4);
    for (const auto& [layer, p] : experts) {
      EXPECT_EQ(p, kExperts / ep * kExpertParams) << layer;
      // At ep 1 the experts' group is dp itself: one group per layer.
      if (ep == 1) {
        want += 4 * ((2 * (p + dense.at(layer)) + 3) / 4) - 4 * ((2 * dense.at(layer) + 3) / 4);
      } else {
        want += 4 * ((2 * p + expert_dp - 1) / expert_dp);
      }
    }
    int64_t state = 0, expert_states = 0;
    for (const traces::Tensor& x : t.tensors) {
      if (x.kind != traces::TensorKind::kOptimizerState) continue;
      state += x.bytes;
      if (x.name.find("_state.experts") != std::string::npos) ++expert_states;
    }
    EXPECT_EQ(state, want);
    EXPECT_EQ(expert_states, ep == 1 ? 0 : kMoeLayers);
    EXPECT_EQ(t.header.zero_shards, 4);
  }
  // So a rank's routed experts' state is the same at every ep: E/ep experts'
  // over dp/ep ranks, E/dp experts' worth; at ZeRO-1 ep trades their weights
  // and gradients only. tiny-moe: 3 MoE layers × 2 experts' worth × 196,608
  // parameters × 8 bytes = 9,437,184 bytes (at ZeRO 0: 37,748,736 at ep 1).
  EXPECT_EQ(kMoeLayers * (kExperts / 4) * kExpertParams * 8, 9'437'184);
}

// ZeRO-2 and 3 with ep (torchtitan's FSDP with expert parallelism; Megatron-
// FSDP): the routed experts' gradients (2) and weights too (3) shard over
// their expert-data-parallel group, dp / ep ranks, the rest's over dp; each
// MoE layer's experts are reduce-scattered (and gathered) by ops of their own
// over that group. tiny-moe at dp 4: each grouped weight [E/ep, ...] of
// E/ep · 65,536 · {2, 1} elements (fc1, fc2), its shard ceil(elements / (4/ep)).
TEST(ExpertParallel, ZeroTwoAndThreeShardTheExpertsOverTheirDataParallelGroup) {
  for (int64_t stage : {2, 3}) {
    for (int64_t ep : {2, 4}) {
      SCOPED_TRACE("zero " + std::to_string(stage) + " ep " + std::to_string(ep));
      ModelConfig c = TinyMoe(ep);
      c.zero_stage = stage;
      ASSERT_TRUE(ValidateConfig(c, "tiny-moe").ok()) << ValidateConfig(c, "tiny-moe").ToString();
      const traces::Trace t = Build(c);
      const int64_t expert_dp = 4 / ep, local = kExperts / ep;
      // Per MoE layer: fc1 [E/ep, 512, 256] and fc2 [E/ep, 256, 256], 4 bytes each.
      const int64_t shard_bytes = 4 * ((local * 512 * 256 + expert_dp - 1) / expert_dp +
                                       (local * 256 * 256 + expert_dp - 1) / expert_dp);
      const Static st = StaticBytes(t);
      EXPECT_EQ(st.expert_grads, kMoeLayers * shard_bytes);
      EXPECT_EQ(st.expert_weights,
                stage == 3 ? kMoeLayers * shard_bytes : kMoeLayers * local * kExpertParams * 4);
      // The experts' collectives: one reduce-scatter per MoE layer (and at
      // ZeRO-3 a gather before its forward and one before its backward),
      // each over dp / ep ranks, its payload the full grouped tensors.
      int scatters = 0, gathers = 0;
      for (const traces::Op& op : t.ops) {
        if (op.kind != traces::OpKind::kCollective ||
            traces::GroupOfCollective(op) != traces::CollectiveGroup::kExpertShard) {
          continue;
        }
        EXPECT_EQ(traces::CollectiveRanks(op, t.header), expert_dp) << op.name;
        EXPECT_EQ(traces::CollectivePayloadBytes(op), 4 * local * kExpertParams) << op.name;
        const bool gather = traces::ClassifyCollective(op) == traces::CollectiveKind::kAllGather;
        EXPECT_EQ(
            op.name.ends_with(gather ? ".experts.zero_all_gather" : ".experts.zero_reduce_scatter"),
            true)
            << op.name;
        (gather ? gathers : scatters) += 1;
      }
      EXPECT_EQ(scatters, kMoeLayers);
      EXPECT_EQ(gathers, stage == 3 ? 2 * kMoeLayers : 0);
      // No dense ZeRO op reads an expert's tensor.
      for (const traces::Op& op : t.ops) {
        if (traces::GroupOfCollective(op) != traces::CollectiveGroup::kShard ||
            op.kind != traces::OpKind::kCollective) {
          continue;
        }
        EXPECT_EQ(traces::CollectiveRanks(op, t.header), 4) << op.name;
        for (traces::TensorId in : op.inputs) {
          EXPECT_FALSE(traces::IsRoutedExpert(t.tensor(in))) << op.name;
        }
      }
    }
  }
}

// HSDP with ep (torchtitan's dp_replicate x dp_shard with EP): dp 8 in shard
// groups of 4, ep 2. The dense weights shard 4 ways; the routed experts over
// the ranks of equal expert index in the shard group, 4 / 2 = 2 ways.
TEST(ExpertParallel, HsdpShardsTheExpertsInsideTheirShardGroup) {
  ModelConfig c = TinyMoe(2);
  ConfigOverrides o;
  o.dp = 8;
  o.zero_stage = 3;
  o.dp_shard = 4;
  Result<ModelConfig> hsdp = ApplyOverrides(c, o, "tiny-moe.json");
  ASSERT_TRUE(hsdp.ok()) << hsdp.status().ToString();
  const traces::Trace t = Build(*hsdp);
  EXPECT_EQ(t.header.zero_shards, 4);
  const int64_t local = kExperts / 2;
  const int64_t shard_bytes = 4 * ((local * 512 * 256 + 1) / 2 + (local * 256 * 256 + 1) / 2);
  const Static st = StaticBytes(t);
  EXPECT_EQ(st.expert_weights, kMoeLayers * shard_bytes);
  EXPECT_EQ(st.expert_grads, kMoeLayers * shard_bytes);
  int experts = 0, dense = 0;
  for (const traces::Op& op : t.ops) {
    if (op.kind != traces::OpKind::kCollective) continue;
    const traces::CollectiveGroup g = traces::GroupOfCollective(op);
    if (g == traces::CollectiveGroup::kExpertShard) {
      EXPECT_EQ(traces::CollectiveRanks(op, t.header), 2) << op.name;
      ++experts;
    } else if (g == traces::CollectiveGroup::kShard) {
      EXPECT_EQ(traces::CollectiveRanks(op, t.header), 4) << op.name;
      ++dense;
    }
  }
  EXPECT_EQ(experts, 3 * kMoeLayers);  // a reduce-scatter and two gathers per MoE layer
  EXPECT_GT(dense, 0);
}

TEST(ExpertParallel, DispatchAndCombineAreAllToAllsAroundTheLocalExperts) {
  const traces::Trace t = Build(TinyMoe(2));
  EXPECT_EQ(t.header.ep, 2);
  // Layer 1 (the first MoE layer): dispatch and combine forward, their
  // gradients backward; each moves the 4 · 256 · 2 = 2048 routed rows of
  // h = 256 fp32: 2 MiB.
  int all_to_alls = 0;
  for (const traces::Op& op : t.ops) {
    if (op.kind != traces::OpKind::kCollective || op.layer != 1) continue;
    ASSERT_EQ(traces::ClassifyCollective(op), traces::CollectiveKind::kAllToAll) << op.name;
    EXPECT_EQ(traces::CollectivePayloadBytes(op), 2048 * 256 * 4) << op.name;
    EXPECT_EQ(traces::CollectiveRanks(op, t.header), 2);
    ++all_to_alls;
  }
  EXPECT_EQ(all_to_alls, 4);
  // Four local experts, each at 2 ranks × 2048 / 8 = 512 tokens: one grouped
  // GEMM of 4 × 512 rows.
  int grouped = 0;
  for (const traces::Op& op : t.ops) {
    if (op.layer != 1 || op.name.find(".fc1") == std::string::npos || !op.gemm ||
        op.phase != traces::Phase::kForward || !InRoutedExperts(op.name)) {
      continue;
    }
    EXPECT_EQ(op.gemm->m, 512) << op.name;
    EXPECT_EQ(op.gemm->batch, 4) << op.name;
    ++grouped;
  }
  EXPECT_EQ(grouped, 1);
}

TEST(ExpertParallel, BalancedRoutingSavesTheSameBytesPerLayerAtAnyEp) {
  // The experts' rows per rank stay 2048 (E/ep experts at ep times the
  // tokens); the combine's returned rows are saved where the experts'
  // outputs were.
  const traces::Trace one = Build(TinyMoe(1));
  const traces::Trace four = Build(TinyMoe(4));
  EXPECT_EQ(testing::StatsOf(four, 1).saved_bytes, testing::StatsOf(one, 1).saved_bytes);
  EXPECT_EQ(testing::StatsOf(four, 1).forward_flops, testing::StatsOf(one, 1).forward_flops);
}

TEST(ExpertParallel, TheEp1TraceHasNoAllToAll) {
  for (const traces::Op& op : Build(TinyMoe(1)).ops) {
    if (op.kind == traces::OpKind::kCollective) {
      EXPECT_NE(traces::ClassifyCollective(op), traces::CollectiveKind::kAllToAll);
    }
  }
}

std::string Refusal(ModelConfig c, const ConfigOverrides& o) {
  Result<ModelConfig> r = ApplyOverrides(std::move(c), o, "m.json");
  EXPECT_FALSE(r.ok());
  return r.ok() ? std::string() : r.status().message();
}

TEST(ExpertParallel, RefusesAnEpThatTheExpertsOrTheDataParallelRanksDoNotDivide) {
  const ModelConfig c = TinyMoe(1);
  ConfigOverrides o;
  o.ep = 3;
  EXPECT_NE(Refusal(c, o).find("m.json with --ep 3: ep: 3 does not divide the 8 experts"),
            std::string::npos)
      << Refusal(c, o);
  o.ep = 8;
  o.dp = 4;
  EXPECT_NE(Refusal(c, o).find("ep: ep x tp = 8 x 1 does not divide dp x tp = 4 x 1"),
            std::string::npos)
      << Refusal(c, o);
  o.ep = 4;
  o.zero_stage = 1;
  o.dp_shard = 2;
  EXPECT_NE(Refusal(c, o).find("ep: 4 does not divide cp x dp_shard = 1 x 2 (with HSDP"),
            std::string::npos)
      << Refusal(c, o);
  o = ConfigOverrides{};
  o.ep = 0;
  EXPECT_NE(Refusal(c, o).find("ep: expected a positive integer, got 0"), std::string::npos);
}

TEST(ExpertParallel, ADenseModelRefusesEp) {
  ModelConfig dense = TinyMoe(1);
  dense.experts = 0;
  dense.experts_per_token = 0;
  dense.expert_ffn_hidden = 0;
  dense.shared_expert_ffn_hidden = 0;
  dense.shared_expert_gate = false;
  dense.first_dense_layers = 0;
  ConfigOverrides o;
  o.ep = 2;
  EXPECT_NE(Refusal(dense, o).find("ep: is a mixture-of-experts field and needs experts > 0"),
            std::string::npos)
      << Refusal(dense, o);
}

}  // namespace
}  // namespace ssdtrain::models

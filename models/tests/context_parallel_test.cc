// Context parallelism in the trace (models/detail/ring_attention.h): the
// activation bytes and FLOPs of a rank under cp 1, 2, 4 and 8 against cp 1's,
// in closed form; each ring exchange's bytes and count per layer; the shard
// group ZeRO uses under cp; the header; the refusals.
#include <gtest/gtest.h>

#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "traces/collective_kind.h"
#include "traces/io.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

// Llama-3-8B's shapes at 2 layers, tp 1, sequence 4096, flash attention, bf16:
// 32 query heads, 8 key/value heads of 128.
ModelConfig Llama(int64_t cp, int64_t tp = 1) {
  Result<ModelConfig> c =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/llama-3-8b.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  ModelConfig m = *c;
  m.layers = 2;
  m.seq_len = 4096;
  m.tp = tp;
  m.sequence_parallel = tp > 1;
  m.cp = cp;
  m.attention = "flash";
  const Status valid = ValidateConfig(m, "llama");
  EXPECT_TRUE(valid.ok()) << valid.ToString();
  return m;
}

traces::Trace Build(const ModelConfig& c) {
  Result<traces::Trace> t = BuildTrace(c, 0);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  const Status valid = traces::Validate(*t, "cp");
  EXPECT_TRUE(valid.ok()) << valid.ToString();
  return *t;
}

struct Totals {
  int64_t saved_activation_bytes = 0;
  int64_t forward_flops = 0, backward_flops = 0;
};

Totals Of(const traces::Trace& t) {
  Totals out;
  for (const traces::Tensor& x : t.tensors) {
    if (x.alias_of || x.kind != traces::TensorKind::kActivation || !x.saved_for_backward) continue;
    out.saved_activation_bytes += x.bytes;
  }
  for (const traces::Op& op : t.ops) {
    if (op.phase == traces::Phase::kForward) out.forward_flops += op.flops;
    if (op.phase == traces::Phase::kBackward) out.backward_flops += op.flops;
  }
  return out;
}

// Every per-token tensor holds s / cp tokens on a rank, and every rank does
// 1/cp of the attention (cp ring steps of (s/cp)² each): the saved bytes and
// the FLOPs of a rank are exactly cp 1's over cp.
TEST(ContextParallel, ARanksActivationsAndFlopsAreCpOnesOverCp) {
  const Totals one = Of(Build(Llama(1)));
  ASSERT_GT(one.saved_activation_bytes, 0);
  for (int64_t cp : {2, 4, 8}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    const Totals split = Of(Build(Llama(cp)));
    EXPECT_EQ(split.saved_activation_bytes * cp, one.saved_activation_bytes);
    EXPECT_EQ(split.forward_flops * cp, one.forward_flops);
    EXPECT_EQ(split.backward_flops * cp, one.backward_flops);
  }
  // With tensor and sequence parallelism as well: 1/(tp·cp) of the residual stream.
  const Totals tp2 = Of(Build(Llama(1, 2)));
  const Totals tp2_cp4 = Of(Build(Llama(4, 2)));
  EXPECT_EQ(tp2_cp4.saved_activation_bytes * 4, tp2.saved_activation_bytes);
  EXPECT_EQ(tp2_cp4.forward_flops * 4, tp2.forward_flops);
}

// Per layer and micro-batch: forward cp − 1 exchanges of the rank's K and V
// (KV = 2 · s/cp · b · kv_heads · d · 2 bytes), backward cp: K/V, then K/V
// with dK/dV (cp − 2 of them), then dK/dV home: 2 · (cp − 1) · KV in all, as
// Transformer Engine's P2P ring sends. Each a send_recv over the cp ranks on
// the ring's stream.
TEST(ContextParallel, EachRingExchangeCarriesTheClosedFormBytes) {
  for (int64_t cp : {1, 2, 4, 8}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    const traces::Trace t = Build(Llama(cp));
    EXPECT_EQ(t.header.cp, cp);
    const int64_t kv = 2 * (4096 / cp) * 1 * 8 * 128 * 2;
    for (int64_t layer = 0; layer < 2; ++layer) {
      int64_t forward = 0, backward = 0, forward_bytes = 0, backward_bytes = 0;
      std::vector<int64_t> backward_payloads;
      for (const traces::Op& op : t.ops) {
        if (op.layer != layer || op.kind != traces::OpKind::kCollective) continue;
        if (traces::GroupOfCollective(op) != traces::CollectiveGroup::kContext) continue;
        EXPECT_EQ(traces::ClassifyCollective(op), traces::CollectiveKind::kSendRecv) << op.name;
        EXPECT_EQ(op.stream, traces::kCpRingStream) << op.name;
        EXPECT_EQ(traces::CollectiveRanks(op, t.header), cp) << op.name;
        const int64_t payload = traces::CollectivePayloadBytes(op);
        if (op.phase == traces::Phase::kForward) {
          ++forward;
          forward_bytes += payload;
          EXPECT_EQ(payload, kv) << op.name;
        } else {
          ++backward;
          backward_bytes += payload;
          backward_payloads.push_back(payload);
        }
      }
      EXPECT_EQ(forward, cp - 1);
      EXPECT_EQ(forward_bytes, (cp - 1) * kv);
      EXPECT_EQ(backward, cp == 1 ? 0 : cp);
      EXPECT_EQ(backward_bytes, 2 * (cp - 1) * kv);
      if (cp > 1) {
        EXPECT_EQ(backward_payloads.front(), kv);  // K/V only
        EXPECT_EQ(backward_payloads.back(), kv);   // dK/dV home
      }
    }
  }
}

// The ring overlaps: each exchange comes in the trace before the attention
// step before the one that reads it, and only that one step waits for it.
TEST(ContextParallel, EachExchangeIsIssuedAStepAheadOfItsReader) {
  const traces::Trace t = Build(Llama(4));
  std::vector<const traces::Op*> layer0;
  for (const traces::Op& op : t.ops) {
    if (op.layer == 0 && op.phase == traces::Phase::kForward &&
        (op.kind == traces::OpKind::kAttention || op.stream == traces::kCpRingStream)) {
      layer0.push_back(&op);
    }
  }
  std::vector<std::string> names;
  for (const traces::Op* op : layer0) names.push_back(op->name);
  EXPECT_EQ(names, (std::vector<std::string>{"L0.attn.kv1.cp_ring", "L0.attn.flash.step0",
                                             "L0.attn.kv2.cp_ring", "L0.attn.flash.step1",
                                             "L0.attn.kv3.cp_ring", "L0.attn.flash.step2",
                                             "L0.attn.flash.step3"}));
}

// ZeRO shards over dp × cp (Megatron's intra_dp_cp_group): the header's shard
// group, and the layout's, is dp · cp ranks.
TEST(ContextParallel, ZeroShardsOverDpTimesCp) {
  ModelConfig c = Llama(2);
  c.dp = 4;
  c.zero_stage = 3;
  ASSERT_TRUE(ValidateConfig(c, "llama").ok());
  const traces::Trace t = Build(c);
  EXPECT_EQ(t.header.zero_shards, 8);
  EXPECT_EQ(LayoutOf(c).WeightShards(), 8);
  EXPECT_EQ(LayoutOf(c).world(), 8);
}

// The header's cp is written only when set (cp 1 traces print and fingerprint
// as before) and read back.
TEST(ContextParallel, TheHeaderCarriesCp) {
  const traces::Trace one = Build(Llama(1));
  EXPECT_FALSE(traces::ToJson(one)["header"].contains("cp"));
  const traces::Trace two = Build(Llama(2));
  const nlohmann::json j = traces::ToJson(two);
  EXPECT_EQ(j["header"]["cp"], 2);
  Result<traces::Trace> back = traces::TraceFromJson(j, "t.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->header.cp, 2);
  EXPECT_EQ(traces::Fingerprint(*back), traces::Fingerprint(two));
}

TEST(ContextParallel, WhatCannotRunContextParallelIsRefused) {
  auto refused = [](ModelConfig c, const std::string& want) {
    const Status s = ValidateConfig(c, "m.json");
    ASSERT_FALSE(s.ok()) << want;
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  };
  ModelConfig standard = Llama(1);
  standard.cp = 2;
  standard.attention = "standard";
  refused(standard, "m.json: cp: 2: context parallelism needs attention flash");
  ModelConfig uneven = Llama(1);
  uneven.cp = 3;
  refused(uneven, "m.json: seq_len: sequence 4096 does not divide into 2 x cp = 6 chunks");
  ModelConfig huge = Llama(1);  // 2 · cp past int64's range: refused, not overflowed
  huge.cp = INT64_MAX;
  refused(huge, "m.json: seq_len: sequence 4096 does not divide into 2 x cp = 2 x ");
  ModelConfig sp = Llama(1, 8);
  sp.seq_len = 4096 + 32;  // 2 · cp · tp = 32 divides it
  sp.cp = 2;
  EXPECT_TRUE(ValidateConfig(sp, "m.json").ok());
  sp.seq_len = 4096 + 16;
  refused(sp, "2 x cp = 4 chunks (the load-balanced split) of tp 8 pieces each");
  Result<ModelConfig> t5 =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/t5-large.json");
  ASSERT_TRUE(t5.ok()) << t5.status().ToString();
  {
    ModelConfig c = *t5;
    c.attention = "flash";
    c.cp = 2;
    refused(c, "not modelled for t5");
  }
  // A MoE model's ep must divide cp · dp (the expert grid regroups both).
  Result<ModelConfig> moe =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/tiny-moe.json");
  ASSERT_TRUE(moe.ok()) << moe.status().ToString();
  ModelConfig m = *moe;
  m.attention = "flash";
  m.cp = 2;
  m.ep = 4;
  refused(m, "m.json: ep: ep x tp = 4 x 1 does not divide cp x dp x tp = 2 x 1 x 1");
}

// Mixture of experts under cp: each rank routes its own s/cp tokens, so the
// routed rows, the experts' GEMMs and every saved tensor are cp 1's over cp;
// ep may take the cp ranks (ep 2 at cp 2, dp 1: Megatron-Core's expert grid
// over cp · dp), its all-to-alls carrying a rank's own rows.
TEST(ContextParallel, MixtureOfExpertsRoutesEachRanksOwnTokens) {
  Result<ModelConfig> loaded =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/tiny-moe.json");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ModelConfig one = *loaded;
  one.attention = "flash";
  ASSERT_TRUE(ValidateConfig(one, "tiny-moe").ok());
  ModelConfig two = one;
  two.cp = 2;
  ASSERT_TRUE(ValidateConfig(two, "tiny-moe").ok()) << ValidateConfig(two, "tiny-moe").ToString();
  const Totals whole = Of(Build(one)), half = Of(Build(two));
  EXPECT_EQ(half.saved_activation_bytes * 2, whole.saved_activation_bytes);
  EXPECT_EQ(half.forward_flops * 2, whole.forward_flops);
  EXPECT_EQ(half.backward_flops * 2, whole.backward_flops);
  // 128 tokens × 4 sequences × top-2 = 1024 rows over 8 experts on each rank.
  ModelConfig ep = two;
  ep.ep = 2;
  ASSERT_TRUE(ValidateConfig(ep, "tiny-moe").ok()) << ValidateConfig(ep, "tiny-moe").ToString();
  const traces::Trace t = Build(ep);
  EXPECT_EQ(t.header.cp, 2);
  EXPECT_EQ(t.header.ep, 2);
  int all_to_alls = 0;
  for (const traces::Op& op : t.ops) {
    if (op.name == "L1.experts.fc1") {
      // 4 local experts, each at 2 ranks × 1024 / 8 rows.
      EXPECT_EQ(*op.gemm, (traces::GemmDims{.m = 256, .n = 512, .k = 256, .batch = 4}));
    }
    if (op.kind != traces::OpKind::kCollective ||
        traces::ClassifyCollective(op) != traces::CollectiveKind::kAllToAll) {
      continue;
    }
    ++all_to_alls;
    EXPECT_EQ(traces::CollectivePayloadBytes(op), 1024 * 256 * 4) << op.name;
  }
  EXPECT_EQ(all_to_alls, 3 * 4);  // 3 MoE layers: dispatch, combine and their gradients
}

}  // namespace
}  // namespace ssdtrain::models

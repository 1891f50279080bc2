// Mixture-of-experts models: the parameter counts of the real Mixtral-8x7B and
// Qwen3-30B-A3B config.json files against the published figures, the saved bytes of
// a MoE layer in closed form from its shapes, the experts' gemm shapes, routing,
// dense layers, validation and the refused MoE families.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/hf_config.h"
#include "models/moe_config.h"
#include "models/tests/trace_stats.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

std::string HfDir(const std::string& model) {
  return std::string(ConfiguredSourceDir()) + "/models/tests/hf/" + model;
}

ModelConfig Load(const std::string& model) {
  Result<ModelConfig> c = LoadModelConfig(HfDir(model));
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

int64_t Total(const ModelConfig& c) {
  const Result<int64_t> p = ParameterCount(c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : 0;
}

int64_t Active(const ModelConfig& c) {
  const Result<int64_t> p = ActiveParameterCount(c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : 0;
}

void ExpectNear(int64_t params, double published) {
  EXPECT_LT(std::abs(static_cast<double>(params) - published), 0.005 * published)
      << params << " vs published " << published;
}

// Mixtral-8x7B: 46.7 B total, 12.9 B active (Mistral AI, "Mixtral of experts", 2023;
// Jiang et al., arXiv 2401.04088 §2: "47B parameters ... 13B active"). Per layer
// QKV 6144·4096 + proj 4096² + two norms 2·4096 + router 8·4096 + 8 experts of
// 3·4096·14336 = 1,451,270,144; 32 layers, untied 32000·4096 embedding and output,
// final norm 4096: 46,702,792,704. Active: less 32 layers × 6 experts × 176,160,768.
TEST(MoeParameters, Mixtral8x7BHasItsPublishedTotalAndActiveCounts) {
  const ModelConfig c = Load("mixtral-8x7b-v0.1");
  EXPECT_EQ(c.experts, 8);
  EXPECT_EQ(c.experts_per_token, 2);
  EXPECT_EQ(Total(c), 46702792704);
  EXPECT_EQ(Active(c), 46702792704 - 32LL * 6 * 176160768);
  ExpectNear(Total(c), 46.7e9);
  ExpectNear(Active(c), 12.9e9);
}

// Qwen3-30B-A3B: 30.5 B total, 3.3 B activated (Qwen, model card of Qwen/Qwen3-30B-A3B).
// Per layer QKV (32 + 2·4)·128·2048 + proj 2048·4096 + q/k norms 2·128 + norms 2·2048
// + router 128·2048 + 128 experts of 3·2048·768 = 623,120,640; 48 layers, untied
// 151936·2048 embedding and output, final norm: 30,532,122,624. Active: less
// 48 × 120 × 4,718,592 = 3,353,032,704. That is 1.6% above the card's 3.3 B: the card
// gives it to two figures (3.35 B truncated), so the test checks those two figures;
// the 0.5% bound holds for the total.
TEST(MoeParameters, Qwen3MoeHasItsPublishedTotalAndActiveCounts) {
  const ModelConfig c = Load("qwen3-30b-a3b");
  EXPECT_EQ(c.experts, 128);
  EXPECT_EQ(c.experts_per_token, 8);
  EXPECT_EQ(c.expert_ffn_hidden, 768);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(Total(c), 30532122624);
  ExpectNear(Total(c), 30.5e9);
  EXPECT_EQ(Active(c), 3353032704);
  EXPECT_EQ(static_cast<int64_t>(std::floor(static_cast<double>(Active(c)) / 1e8)), 33);
}

// configs/models/mixtral-8x7b.json describes the same model as the real file: the
// same parameters, and at the same training settings the same saved bytes per layer.
TEST(MoeParameters, MixtralPresetTracesLikeTheRealFile) {
  Result<ModelConfig> preset =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/mixtral-8x7b.json");
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  ModelConfig file = Load("mixtral-8x7b-v0.1");
  EXPECT_EQ(Total(*preset), Total(file));
  EXPECT_EQ(Active(*preset), Active(file));
  preset->seq_len = file.seq_len = 256;
  preset->tp = preset->pp = 1;
  preset->sequence_parallel = false;
  preset->attention = file.attention;
  const Result<traces::Trace> a = BuildTrace(*preset);
  const Result<traces::Trace> b = BuildTrace(file);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int layer : {0, 31}) {
    EXPECT_EQ(testing::StatsOf(*a, layer).saved_bytes, testing::StatsOf(*b, layer).saved_bytes);
  }
}

// tiny-moe, the model the CPU demo replays: 7.5 M parameters, 4.0 M of them active.
TEST(MoeParameters, TinyMoeIsAFewMillionParameters) {
  Result<ModelConfig> c =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/tiny-moe.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(MoeLayerCount(*c), 3);
  EXPECT_GT(Total(*c), 5'000'000);
  EXPECT_LT(Total(*c), 8'000'000);
  EXPECT_EQ(Total(*c) - Active(*c), 3 * 6 * 3 * 256 * 256);
}

// A small MoE model: h 64, 4 heads (2 kv), fp16, s 32, b 2 (T = 64 tokens), 4
// experts of width 96, top-2; layer 0 dense (ffn 128), layer 1 MoE.
ModelConfig SmallMoe() {
  ModelConfig c;
  c.name = "small-moe";
  c.family = "llama";
  c.hidden = 64;
  c.heads = 4;
  c.kv_heads = 2;
  c.layers = 2;
  c.ffn_hidden = 128;
  c.vocab = 256;
  c.seq_len = 32;
  c.micro_batch = 2;
  c.dtype = "fp16";
  c.experts = 4;
  c.experts_per_token = 2;
  c.expert_ffn_hidden = 96;
  c.first_dense_layers = 1;
  return c;
}

traces::Trace Build(const ModelConfig& c) {
  Result<traces::Trace> t = BuildTrace(c);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  const Status v = traces::Validate(*t, c.name);
  EXPECT_TRUE(v.ok()) << v.ToString();
  return *t;
}

// Saved bytes (keep) of the routed MLP less the dense MLP, from the shapes, with
// a = 2 bytes, T tokens, R routed rows, per expert t_e rows of width f:
// both save the norm's input and output (2·T·h·a); the dense MLP fc1 [T, 2f_d] and
// the SwiGLU output [T, f_d]; the routed one the fp32 scores [T, E], the weights
// [T, k] (a) and int64 indices [T, k], the permuted rows [R, h] and their int64 row
// map [R], and the grouped experts' fc1 [R, 2f], SwiGLU [R, f] and fc2 [R, h] (the
// combine reads it for the weights' gradient).
int64_t RoutedLessDense(const ModelConfig& c, int64_t routed_rows) {
  const int64_t a = 2, h = c.hidden, t = c.seq_len * c.micro_batch, e = c.experts;
  const int64_t k = c.experts_per_token, f = c.expert_ffn_hidden, fd = c.ffn_hidden;
  const int64_t routed =
      4 * t * e + t * k * (a + 8) + routed_rows * (h * a + 8) + routed_rows * (3 * f + h) * a;
  const int64_t dense = 3 * t * fd * a;
  return routed - dense;
}

TEST(MoeSavedBytes, RoutedLayerSavesItsClosedFormUnderKeep) {
  const ModelConfig c = SmallMoe();
  const traces::Trace t = Build(c);
  const int64_t dense = testing::StatsOf(t, 0).saved_bytes;
  const int64_t moe = testing::StatsOf(t, 1).saved_bytes;
  // Balanced: 64 tokens × 2 = 128 rows, 32 per expert.
  EXPECT_EQ(moe - dense, RoutedLessDense(c, 128));
}

TEST(MoeSavedBytes, CapacityFactorBoundsTheRowsEachExpertSaves) {
  ModelConfig c = SmallMoe();
  c.capacity_factor = 0.5;  // ceil(0.5 · 128 / 4) = 16 rows per expert
  EXPECT_EQ(ExpertTokens(c, 0), 16);
  const traces::Trace t = Build(c);
  EXPECT_EQ(testing::StatsOf(t, 1).saved_bytes - testing::StatsOf(t, 0).saved_bytes,
            RoutedLessDense(c, 64));
}

// The gated shared expert adds fc1 [T, 2f_s], its SwiGLU [T, f_s], its output [T, h]
// (the gate's backward reads it) and the gate [T, 1], each of a bytes.
TEST(MoeSavedBytes, GatedSharedExpertAddsItsOwnActivations) {
  ModelConfig c = SmallMoe();
  c.shared_expert_ffn_hidden = 80;
  c.shared_expert_gate = true;
  const traces::Trace t = Build(c);
  const int64_t tokens = 64, a = 2;
  EXPECT_EQ(testing::StatsOf(t, 1).saved_bytes - testing::StatsOf(t, 0).saved_bytes,
            RoutedLessDense(c, 128) + tokens * (3 * 80 + 64 + 1) * a);
}

const traces::Op* FindOp(const traces::Trace& t, const std::string& name) {
  for (const traces::Op& op : t.ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

const traces::Tensor* FindTensor(const traces::Trace& t, const std::string& name) {
  for (const traces::Tensor& x : t.tensors) {
    if (x.name == name) return &x;
  }
  return nullptr;
}

// 64 tokens × top-3 = 192 rows over 5 experts: 39, 39, 38, 38, 38. The
// experts run as grouped GEMMs (Megatron-Core's GroupedMLP): one per
// projection, batch 5 of the most rows an expert gets (39), the FLOPs the
// rows' exact sum; each projection's weight holds the 5 experts'.
TEST(MoeTrace, GroupedExpertGemmsHaveTheRowsTheyReceive) {
  ModelConfig c = SmallMoe();
  c.experts = 5;
  c.experts_per_token = 3;
  const traces::Trace t = Build(c);
  const int64_t rows[] = {39, 39, 38, 38, 38};
  int64_t sum = 0;
  for (int e = 0; e < 5; ++e) {
    EXPECT_EQ(ExpertTokens(c, e), rows[e]) << e;
    sum += rows[e];
  }
  EXPECT_EQ(sum, 64 * 3);
  const int64_t f = 96, h = 64;
  const traces::Op* fc1 = FindOp(t, "L1.experts.fc1");
  ASSERT_NE(fc1, nullptr);
  ASSERT_TRUE(fc1->gemm);
  EXPECT_EQ(*fc1->gemm, (traces::GemmDims{.m = 39, .n = 2 * f, .k = h, .batch = 5}));
  EXPECT_EQ(fc1->flops, 2 * sum * 2 * f * h);
  const traces::Op* dgrad = FindOp(t, "L1.experts.fc1.dgrad");
  ASSERT_NE(dgrad, nullptr);
  EXPECT_EQ(*dgrad->gemm, (traces::GemmDims{.m = 39, .n = h, .k = 2 * f, .batch = 5}));
  EXPECT_EQ(dgrad->flops, 2 * sum * h * 2 * f);
  const traces::Op* wgrad = FindOp(t, "L1.experts.fc2.wgrad");
  ASSERT_NE(wgrad, nullptr);
  EXPECT_EQ(*wgrad->gemm, (traces::GemmDims{.m = h, .n = f, .k = 39, .batch = 5}));
  EXPECT_EQ(wgrad->flops, 2 * h * f * sum);
  const traces::Tensor* w1 = FindTensor(t, "L1.experts.fc1.weight");
  const traces::Tensor* w2 = FindTensor(t, "L1.experts.fc2.weight");
  ASSERT_NE(w1, nullptr);
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{5, 2 * f, h}));
  EXPECT_EQ(w2->shape, (std::vector<int64_t>{5, h, f}));
  // One fc1 per MoE layer and direction, whatever the experts.
  int fc1s = 0;
  for (const traces::Op& op : t.ops) fc1s += op.name == "L1.experts.fc1" ? 1 : 0;
  EXPECT_EQ(fc1s, 1);
  const traces::Op* router = FindOp(t, "L1.router");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->gemm->m, 64);
  EXPECT_EQ(router->gemm->n, 5);
  EXPECT_EQ(FindOp(t, "L0.experts.fc1"), nullptr);  // layer 0 is dense
  EXPECT_NE(FindOp(t, "L0.fc1"), nullptr);
}

TEST(MoeTrace, TensorAndPipelineParallelTracesValidate) {
  ModelConfig c = SmallMoe();
  c.layers = 4;
  c.tp = 2;
  c.pp = 2;
  for (bool sp : {false, true}) {
    c.sequence_parallel = sp;
    for (int64_t stage = 0; stage < 2; ++stage) {
      SCOPED_TRACE(std::to_string(sp) + " stage " + std::to_string(stage));
      Result<traces::Trace> t = BuildTrace(c, stage);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_TRUE(traces::Validate(*t, c.name).ok());
      // Experts split over tp: fc1 projects to 2 · 96 / 2 per rank.
      const std::string expert = "L" + std::to_string(2 * stage + 1) + ".experts.fc1";
      const traces::Op* fc1 = FindOp(*t, expert);
      ASSERT_NE(fc1, nullptr);
      EXPECT_EQ(fc1->gemm->n, 96);
    }
  }
}

TEST(MoeLayers, StepAndDenseListChooseTheDenseLayers) {
  ModelConfig c = SmallMoe();
  c.layers = 6;
  c.first_dense_layers = 0;
  c.moe_layer_step = 2;  // layers 1, 3, 5
  c.dense_layers = {3};
  EXPECT_FALSE(IsMoeLayer(c, 0));
  EXPECT_TRUE(IsMoeLayer(c, 1));
  EXPECT_FALSE(IsMoeLayer(c, 3));
  EXPECT_TRUE(IsMoeLayer(c, 5));
  EXPECT_EQ(MoeLayerCount(c), 2);
}

TEST(MoeConfig, JsonRoundTripKeepsTheMoeFields) {
  ModelConfig c = SmallMoe();
  c.shared_expert_ffn_hidden = 80;
  c.shared_expert_gate = true;
  c.capacity_factor = 1.25;
  c.dense_layers = {0};
  const Result<ModelConfig> back = ModelConfigFromJson(ToJson(c), "round-trip");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), ToJson(c));
  ModelConfig dense = SmallMoe();
  dense.experts = 0;
  dense.experts_per_token = 0;
  dense.expert_ffn_hidden = 0;
  dense.first_dense_layers = 0;
  EXPECT_FALSE(ToJson(dense).contains("experts"));
}

std::string Invalid(const ModelConfig& c) {
  const Status s = ValidateConfig(c, "m.json");
  EXPECT_FALSE(s.ok());
  return s.message();
}

TEST(MoeConfig, BadMoeFieldsNameTheField) {
  ModelConfig c = SmallMoe();
  c.experts_per_token = 5;
  EXPECT_EQ(Invalid(c), "m.json: experts_per_token: expected 1 to experts (4), got 5");
  c = SmallMoe();
  c.family = "gpt";
  c.kv_heads = 0;
  EXPECT_EQ(Invalid(c),
            "m.json: experts: mixture of experts is only modelled for the llama family, not gpt");
  c = SmallMoe();
  c.seq_len = 1;
  c.micro_batch = 1;
  c.experts_per_token = 1;
  EXPECT_EQ(Invalid(c),
            "m.json: experts: 4 experts receive no token from seq_len 1 x micro_batch 1 x "
            "experts_per_token 1 (expected at least one token per expert)");
  c = SmallMoe();
  c.tp = 2;
  c.expert_ffn_hidden = 95;
  EXPECT_EQ(Invalid(c), "m.json: tp: 2 does not divide expert_ffn_hidden 95");
  c = SmallMoe();
  c.experts = 0;
  EXPECT_EQ(Invalid(c),
            "m.json: experts_per_token: is a mixture-of-experts field and needs experts > 0");
}

}  // namespace
}  // namespace ssdtrain::models

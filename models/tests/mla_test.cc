// Multi-head latent attention and multi-token prediction (models/mla_config.h):
// DeepSeek-V3 and Kimi K2 read from their genuine config.json files with
// their published parameter counts, MTP's extra parameters, MLA's saved bytes
// per token per layer in closed form, with and without the up-projection's
// recompute, and the fields refused with their names.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/build_trace.h"
#include "models/hf_config.h"
#include "models/mla_config.h"
#include "models/moe_config.h"
#include "models/tests/hf_test_files.h"
#include "models/tests/trace_stats.h"
#include "traces/op_scope.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

using testing::HfDir;
ModelConfig Load(const std::string& path) { return testing::LoadOk(path); }

// ParameterCount builds the whole model's trace (DeepSeek-V3: 256 experts in
// each of 58 layers): each config is counted once for the whole file.
int64_t Params(const ModelConfig& c) {
  static std::map<std::string, int64_t> counted;
  const std::string key = ToJson(c).dump();
  if (const auto it = counted.find(key); it != counted.end()) return it->second;
  const Result<int64_t> p = ParameterCount(c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return counted[key] = p.ok() ? *p : 0;
}

double RelativeError(double got, double published) { return std::abs(got / published - 1.0); }

// One MLA block's attention weights, by hand from the config's widths:
// q_down, q_norm, q_up, kv_down (latent and rotary key), kv_norm, kv_up, proj.
int64_t MlaAttentionParams(const ModelConfig& c) {
  const int64_t h = c.hidden, n = c.heads, rq = c.q_lora_rank, rkv = c.kv_lora_rank;
  const int64_t dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim, dv = c.v_head_dim;
  return h * rq + rq + rq * n * (dn + dr) + h * (rkv + dr) + rkv + rkv * n * (dn + dv) + n * dv * h;
}

// A DeepSeek-V3-style model by hand: embedding, head and final norm; per block
// two norms, the MLA weights and a dense SwiGLU or the router, E experts and the
// shared expert.
int64_t DeepseekParams(const ModelConfig& c, int64_t layers) {
  const int64_t h = c.hidden;
  int64_t total = 2 * c.vocab * h + h;
  for (int64_t l = 0; l < layers; ++l) {
    total += 2 * h + MlaAttentionParams(c);
    if (IsMoeLayer(c, l)) {
      total += c.experts * h + (c.experts + 1) * 3 * h * c.expert_ffn_hidden;
    } else {
      total += 3 * h * c.ffn_hidden;
    }
  }
  return total;
}

ModelConfig Deepseek() { return Load(HfDir("deepseek-v3")); }

TEST(Mla, DeepseekV3ReadsItsLatentAttentionExpertsAndMtp) {
  const ModelConfig c = Deepseek();
  EXPECT_EQ(c.family, "llama");
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.experts, 256);
  EXPECT_EQ(c.experts_per_token, 8);
  EXPECT_EQ(c.expert_ffn_hidden, 2048);
  EXPECT_EQ(c.shared_expert_ffn_hidden, 2048);
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_EQ(c.first_dense_layers, 3);
  EXPECT_EQ(c.router_score, "sigmoid");
  EXPECT_EQ(c.mtp_layers, 1);
  EXPECT_EQ(HeadDim(c), 192);
  EXPECT_EQ(ValueHeadDim(c), 128);
}

// DeepSeek-V3's README_WEIGHTS.md: "671B of the Main Model weights". The
// count is the hand count to the parameter (the router's score-correction
// bias, 256 per MoE layer, is a buffer here: 14,848 fewer than the checkpoint).
TEST(Mla, DeepseekV3HasItsPublishedTotalParameterCount) {
  ModelConfig main = Deepseek();
  main.mtp_layers = 0;
  const int64_t params = Params(main);
  EXPECT_EQ(params, DeepseekParams(main, main.layers));
  EXPECT_EQ(params, 671'026'404'352);
  EXPECT_LT(RelativeError(static_cast<double>(params), 671e9), 0.005) << params;
}

// Activated per token: the parameters a token passes through, the 248 experts
// of each MoE layer it is not routed to left out. DeepSeek's corrected
// README_WEIGHTS.md (Hugging Face, "fix the calculation of act params":
// "36.6B (including 0.9B for the output Head)") does not count the input
// embedding, a lookup: the same count less the word table.
TEST(Mla, DeepseekV3HasItsPublishedActiveParameterCount) {
  ModelConfig main = Deepseek();
  main.mtp_layers = 0;
  const Result<int64_t> active = ActiveParameterCount(main);
  ASSERT_TRUE(active.ok()) << active.status().ToString();
  const int64_t unrouted = MoeLayerCount(main) * (main.experts - main.experts_per_token) * 3 *
                           main.hidden * main.expert_ffn_hidden;
  EXPECT_EQ(*active, Params(main) - unrouted);
  const int64_t word_table = main.vocab * main.hidden;
  EXPECT_LT(RelativeError(static_cast<double>(*active - word_table), 36.6e9), 0.005) << *active;
}

// MTP's extra parameters: enorm, hnorm, eh_proj [h, 2h], one block built as
// the last one (an MoE block) and its final norm; the embedding and the
// output layer are shared with the main model. DeepSeek states 11.5B
// "unique" MTP parameters; this count is 11.61B (0.96% more), and 11.507B
// without eh_proj, which suggests DeepSeek's tally left it out.
TEST(Mla, MtpAddsTwoNormsEhProjOneBlockAndAFinalNorm) {
  const ModelConfig c = Deepseek();
  ModelConfig main = c;
  main.mtp_layers = 0;
  const int64_t h = c.hidden;
  const int64_t block =
      2 * h + MlaAttentionParams(c) + c.experts * h + (c.experts + 1) * 3 * h * c.expert_ffn_hidden;
  const int64_t mtp = Params(c) - Params(main);
  EXPECT_EQ(mtp, 2 * h + 2 * h * h + block + h);
  EXPECT_EQ(mtp, 11'610'067'968);
  // Two depths add twice as much.
  ModelConfig two = c;
  two.mtp_layers = 2;
  EXPECT_EQ(Params(two) - Params(main), 2 * mtp);
}

// Kimi K2 (model_type kimi_k2, DeepSeek-V3's architecture): 384 experts, 64
// heads, one dense layer, no MTP. Its checkpoint's count on the Hugging Face
// hub is 1026.5B (the FP8 weights' scale tensors included, about 0.06B);
// Moonshot's card rounds it to 1T and its report to 1.04T.
TEST(Mla, KimiK2HasItsPublishedTotalParameterCount) {
  const ModelConfig c = Load(HfDir("kimi-k2"));
  EXPECT_EQ(c.experts, 384);
  EXPECT_EQ(c.heads, 64);
  EXPECT_EQ(c.first_dense_layers, 1);
  EXPECT_EQ(c.mtp_layers, 0);
  const int64_t params = Params(c);
  EXPECT_EQ(params, DeepseekParams(c, c.layers));
  EXPECT_LT(RelativeError(static_cast<double>(params), 1026.5e9), 0.005) << params;
}

// A reduced DeepSeek-V3 (the genuine widths, 4 blocks, 8 experts) for the trace tests.
ModelConfig SmallDeepseek(int64_t tp = 1, bool sp = false) {
  ModelConfig c = Deepseek();
  c.layers = 4;
  c.first_dense_layers = 2;
  c.experts = 8;
  c.experts_per_token = 2;
  c.seq_len = 1024;
  c.attention = "flash";
  c.tp = tp;
  c.sequence_parallel = sp;
  c.dp = 1;
  return c;
}

traces::Trace Build(const ModelConfig& c) {
  const Result<traces::Trace> t = BuildTrace(c);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return traces::Trace{};
  const Status v = traces::Validate(*t, c.name);
  EXPECT_TRUE(v.ok()) << v.ToString();
  return *t;
}

// Saved bytes of one dense MLA block per token, bf16, tp 1, flash attention:
// the two residual-stream outputs (the next norms' inputs), the first norm's
// output (both down projections read it), the query latent before and after
// its norm, the key/value projection's whole output (the latent the norm reads
// and the rotary key are views of it), the normed latent, the query, key and
// value the attention reads, the context and its fp32 lse, and the SwiGLU's
// norm output, fc1 output and activation. mla_up_proj's recompute drops the
// query, key and value: 131,072 of the attention's 187,008 bytes at DeepSeek-V3's
// widths.
TEST(Mla, SavedBytesPerTokenPerLayerInClosedForm) {
  const ModelConfig c = SmallDeepseek();
  const traces::Trace t = Build(c);
  const int64_t B = 2, h = c.hidden, n = c.heads, f = c.ffn_hidden;
  const int64_t rq = c.q_lora_rank, rkv = c.kv_lora_rank;
  const int64_t dqk = c.qk_nope_head_dim + c.qk_rope_head_dim, dv = c.v_head_dim;
  const int64_t qkv = B * (2 * n * dqk + n * dv);
  const int64_t attention =
      B * (h + 2 * rq + (rkv + c.qk_rope_head_dim) + rkv + n * dv) + qkv + 4 * n;
  const int64_t mlp = B * (h + 2 * f + f);
  const int64_t residuals = B * 2 * h;
  EXPECT_EQ(attention, 187'008);
  EXPECT_EQ(qkv, 131'072);
  const int64_t tokens = c.seq_len * c.micro_batch;
  const testing::LayerStats layer1 = testing::StatsOf(t, 1);
  EXPECT_EQ(layer1.saved_bytes, tokens * (residuals + attention + mlp));
  // What the mla_up scope's ops produce is exactly query, key and value.
  int64_t scoped = 0;
  for (const traces::Tensor& x : t.tensors) {
    if (x.layer != 1 || !x.saved_for_backward || x.alias_of || x.producer == traces::kNoOp) {
      continue;
    }
    if (traces::InScope(t.op(x.producer), traces::kMlaUpScope)) scoped += x.bytes;
  }
  EXPECT_EQ(scoped, tokens * qkv);
}

// Flash attention's FLOPs at qk width 192 and value width 128: QKᵀ and P·V
// forward, QKᵀ again, dQ, dK, dP and dV backward (no causal halving).
TEST(Mla, AttentionFlopsUseTheQkAndValueWidths) {
  const ModelConfig c = SmallDeepseek();
  const traces::Trace t = Build(c);
  const int64_t s = c.seq_len, n = c.heads, dqk = 192, dv = 128;
  const testing::LayerStats layer1 = testing::StatsOf(t, 1);
  EXPECT_EQ(layer1.attention_forward_flops, 2 * n * s * s * (dqk + dv));
  EXPECT_EQ(layer1.attention_backward_flops, 2 * n * s * s * (3 * dqk + 2 * dv));
}

// Under tensor parallelism the up projections and the output projection are
// split over tp, the down projections replicated; with sequence parallelism
// the rotary key is gathered; the MTP block is on the last stage only.
TEST(Mla, TracesValidateUnderTensorSequenceAndPipelineParallelism) {
  for (const auto& [tp, sp] : {std::pair{1, false}, {2, false}, {4, true}}) {
    ModelConfig c = SmallDeepseek(tp, sp);
    c.pp = 2;
    for (int64_t stage = 0; stage < 2; ++stage) {
      const Result<traces::Trace> t = BuildTrace(c, stage);
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      EXPECT_TRUE(traces::Validate(*t, c.name).ok());
      bool has_mtp = false;
      for (const traces::Op& op : t->ops) has_mtp = has_mtp || op.layer == c.layers;
      EXPECT_EQ(has_mtp, stage == 1) << "tp " << tp << " stage " << stage;
    }
  }
}

// An uneven pipeline split (Megatron-Core's --decoder-first/last-pipeline-
// num-layers, traces/layout.h), as DeepSeek-V3's 61 layers need: 5 blocks at
// pp 3 as 1 | 3 | 1. Each stage builds exactly its blocks, MTP on the last,
// and the stages' weights add up to the even split's: the same model.
TEST(Mla, UnevenPipelineStagesHoldTheirBlocksAndMtpTheLast) {
  ModelConfig c = SmallDeepseek();
  c.layers = 5;
  c.pp = 3;
  c.pp_first_layers = 1;
  c.pp_last_layers = 1;
  const std::vector<std::pair<int64_t, int64_t>> blocks = {{0, 1}, {1, 3}, {4, 1}};
  int64_t weights = 0;
  for (int64_t stage = 0; stage < c.pp; ++stage) {
    const Result<traces::Trace> t = BuildTrace(c, stage);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE(traces::Validate(*t, c.name).ok());
    EXPECT_EQ(t->header.first_layer, blocks[stage].first);
    EXPECT_EQ(t->header.stage_layers, blocks[stage].second);
    EXPECT_EQ(t->header.pp_first_layers, 1);
    std::set<int64_t> layers;
    for (const traces::Op& op : t->ops) {
      if (op.layer >= 0) layers.insert(op.layer);
    }
    std::set<int64_t> expected;
    for (int64_t l = 0; l < blocks[stage].second; ++l) expected.insert(blocks[stage].first + l);
    if (stage == c.pp - 1) expected.insert(c.layers);  // MTP's block
    EXPECT_EQ(layers, expected) << "stage " << stage;
    for (const traces::Tensor& x : t->tensors) {
      if (x.kind == traces::TensorKind::kWeight && !x.alias_of) weights += x.bytes;
    }
  }
  // The same blocks over pp 5, one each, hold the same weights in all.
  ModelConfig even = c;
  even.pp = 5;
  even.pp_first_layers = even.pp_last_layers = 0;
  int64_t even_weights = 0;
  for (int64_t stage = 0; stage < even.pp; ++stage) {
    const Result<traces::Trace> t = BuildTrace(even, stage);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    for (const traces::Tensor& x : t->tensors) {
      if (x.kind == traces::TensorKind::kWeight && !x.alias_of) even_weights += x.bytes;
    }
  }
  EXPECT_EQ(weights, even_weights);
  // A split that does not add up is refused naming the field.
  c.pp_last_layers = 4;
  EXPECT_EQ(ValidateConfig(c, "ds.json").message(),
            "ds.json: pp_last_layers: first 1, last 4 of 5 layers over pp 3 leaves 0 blocks for 1 "
            "stage (each needs at least one)");
}

// The trace's tensor-parallel ranks hold 1/tp of the up projections and the
// output projection, and the whole down projections.
TEST(Mla, DownProjectionsAreReplicatedOverTp) {
  const traces::Trace t1 = Build(SmallDeepseek(1));
  const traces::Trace t4 = Build(SmallDeepseek(4, true));
  auto weight = [](const traces::Trace& t, const std::string& name) {
    for (const traces::Tensor& x : t.tensors) {
      if (x.name == name) return x.bytes;
    }
    return int64_t{-1};
  };
  for (const char* w : {"L1.q_down.weight", "L1.kv_down.weight", "L1.q_norm.weight"}) {
    EXPECT_EQ(weight(t4, w), weight(t1, w)) << w;
  }
  for (const char* w : {"L1.q_up.weight", "L1.kv_up.weight", "L1.proj.weight"}) {
    EXPECT_EQ(4 * weight(t4, w), weight(t1, w)) << w;
  }
}

using MlaFields = testing::HfFileTest;

TEST_F(MlaFields, OwnConfigFieldsAreValidatedWithTheirNames) {
  ModelConfig c = SmallDeepseek();
  c.head_dim = 64;
  EXPECT_NE(ValidateConfig(c, "x").message().find("x: head_dim: is unused with multi-head"),
            std::string::npos);
  c = SmallDeepseek();
  c.v_head_dim = 0;
  EXPECT_NE(ValidateConfig(c, "x").message().find("x: v_head_dim: expected a positive width"),
            std::string::npos);
  c = SmallDeepseek();
  c.cp = 2;
  EXPECT_NE(ValidateConfig(c, "x").message().find("multi-head latent attention"),
            std::string::npos);
  ModelConfig dense;
  dense.name = "d";
  dense.family = "gpt";
  dense.hidden = 64;
  dense.heads = 4;
  dense.layers = 2;
  dense.vocab = 128;
  dense.seq_len = 16;
  dense.qk_rope_head_dim = 64;
  EXPECT_EQ(ValidateConfig(dense, "x").message(),
            "x: qk_rope_head_dim: is a multi-head latent attention field and needs "
            "kv_lora_rank > 0");
  dense.qk_rope_head_dim = 0;
  dense.mtp_layers = 1;
  EXPECT_EQ(ValidateConfig(dense, "x").message(),
            "x: mtp_layers: multi-token prediction is only modelled for the llama family, not gpt");
}

TEST_F(MlaFields, HfFieldsAreRefusedWithTheirNames) {
  const std::string base =
      R"("model_type": "deepseek_v3", "hidden_size": 256, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000,
         "max_position_embeddings": 4096, "kv_lora_rank": 64, "q_lora_rank": 96,
         "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
         "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 128)";
  EXPECT_EQ(Message(base + R"(, "num_key_value_heads": 2)"),
            File() +
                ": num_key_value_heads: 2 differs from num_attention_heads 4 (multi-head "
                "latent attention gives every head its own key and value)");
  EXPECT_EQ(Message(base + R"(, "moe_layer_freq": 2)"),
            File() + ": moe_layer_freq: 2 (MoE every 2 layers) is not modelled (supported: 1)");
  EXPECT_EQ(Message(base + R"(, "scoring_func": "softplus")"),
            File() + ": scoring_func: \"softplus\" is not modelled (supported: softmax, sigmoid)");
  Write(base);
  const Result<ModelConfig> ok = LoadModelConfig(File());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->mtp_layers, 0);
  EXPECT_EQ(ok->router_score, "softmax");
}

}  // namespace
}  // namespace ssdtrain::models

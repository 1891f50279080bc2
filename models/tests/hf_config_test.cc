// Hugging Face config.json files (models/tests/hf/, sources in its README.md):
// each real file's parameter count against the published figure, the Llama-3-8B
// file against our own llama-3-8b config, and malformed files refused with one
// line naming the file and the field (those in hf_config_errors_test.cc).
#include "models/hf_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/tests/trace_stats.h"
#include "traces/summary.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

std::string HfDir(const std::string& model) {
  return std::string(ConfiguredSourceDir()) + "/models/tests/hf/" + model;
}

// Loads models/tests/hf/<model>/config.json and returns its parameter count.
int64_t Params(const std::string& model) {
  const Result<ModelConfig> c = LoadModelConfig(HfDir(model) + "/config.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return 0;
  const Result<int64_t> p = ParameterCount(*c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : 0;
}

// Within 0.5% of the published count.
void ExpectNear(int64_t params, double published) {
  EXPECT_LT(std::abs(static_cast<double>(params) - published), 0.005 * published)
      << params << " vs published " << published;
}

// Llama 2 7B: 6.74 B (Hugging Face hub, meta-llama/Llama-2-7b-hf, "6.74B params").
// 2 x 32000 x 4096 untied embeddings + 32 x (4·4096² + 3·4096·11008 + 2·4096) + 4096
// = 6,738,415,616 exactly (32000 is already a multiple of 128).
TEST(HfConfig, Llama2SevenBHasItsPublishedParameterCount) {
  EXPECT_EQ(Params("llama-2-7b-chat-hf"), 6738415616);
  ExpectNear(Params("llama-2-7b-chat-hf"), 6.74e9);
}

// Llama 3 8B: 8.03 B (Hugging Face hub, meta-llama/Meta-Llama-3-8B, "8.03B params").
TEST(HfConfig, Llama3EightBHasItsPublishedParameterCount) {
  ExpectNear(Params("meta-llama-3-8b-instruct"), 8.03e9);
}

// Mistral NeMo 12B: 12.2 B (Hugging Face hub, mistralai/Mistral-Nemo-Base-2407,
// "12.2B params"). Its head_dim 128 is not hidden_size / heads (160).
TEST(HfConfig, MistralNemoHasItsPublishedParameterCountWithItsExplicitHeadDim) {
  ExpectNear(Params("mistral-nemo-base-2407"), 12.2e9);
  const Result<ModelConfig> c = LoadModelConfig(HfDir("mistral-nemo-base-2407"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(HeadDim(*c), 128);
  EXPECT_EQ(KvHeads(*c), 8);
}

// Qwen2.5-7B: 7.61 B (its Hugging Face model card, "Number of Parameters: 7.61B").
// 2 x 152064 x 3584 untied embeddings + 28 x (3584 x 4608 q/k/v + 4608 q/k/v biases
// + 3584² out + 3 x 3584 x 18944 + 2 x 3584) + 3584 = 7,615,616,512.
TEST(HfConfig, Qwen25SevenBHasItsPublishedParameterCountWithItsQkvBiases) {
  EXPECT_EQ(Params("qwen2.5-7b"), 7615616512);
  ExpectNear(Params("qwen2.5-7b"), 7.61e9);
}

// Qwen3-8B: 8.2 B (its Hugging Face model card, Qwen/Qwen3-8B, "Number of Parameters:
// 8.2B"). head_dim 128 is explicit, 8 kv heads, and each layer normalises q and k per
// head: 2 x 151936 x 4096 + 36 x (4096 x 6144 + 2 x 128 + 4096 x 4096 + 3 x 4096 x 12288
// + 2 x 4096) + 4096 = 8,190,735,360.
TEST(HfConfig, Qwen3EightBHasItsPublishedParameterCountWithItsQkNorms) {
  EXPECT_EQ(Params("qwen3-8b"), 8190735360);
  ExpectNear(Params("qwen3-8b"), 8.2e9);
  const Result<ModelConfig> c = LoadModelConfig(HfDir("qwen3-8b"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(HeadDim(*c), 128);
  EXPECT_EQ(c->dtype, "fp32");  // its "dtype": "float32"
}

// T5-small: 60.5 M (Hugging Face hub, google-t5/t5-small, "60.5M params"; Raffel et al.
// 2020 give "60 million"). Tied 32128 x 512 embeddings, 6 encoder and 6 decoder blocks
// with d_kv 64 x 8 heads, d_ff 2048, ReLU: 16,449,536 + 6 x 3,146,752 + 6 x 4,195,840
// + 2 x 512 final norms + 2 x 32 x 8 bias tables = 60,506,624.
TEST(HfConfig, T5SmallHasItsPublishedParameterCount) {
  EXPECT_EQ(Params("t5-small"), 60506624);
  ExpectNear(Params("t5-small"), 60.5e6);
  const Result<ModelConfig> c = LoadModelConfig(HfDir("t5-small"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, "t5");
  EXPECT_EQ(c->encoder_layers, 6);
  EXPECT_EQ(c->layers, 12);
  EXPECT_EQ(c->seq_len, 512);  // n_positions 512
}

// GPT-2 small: 124 M (Hugging Face hub, openai-community/gpt2, "124M params"); the
// vocabulary is padded 50257 -> 50304 as the trace pads it (+36,096).
TEST(HfConfig, Gpt2HasItsPublishedParameterCount) { ExpectNear(Params("gpt2"), 124e6); }

// BERT-base: 110 M (Devlin et al. 2019, §3: "BERT-BASE ... Total Parameters=110M").
// 30592 (30522 padded) x 768 words + 512 x 768 positions + 2 x 768 token types + the
// embedding LayerNorm 2 x 768 + 12 x 7,087,872 + the MLM head: final LayerNorm, dense
// 768² + 768, LayerNorm, and the output bias of 30592 on the tied logits (HF's
// cls.predictions.bias) = 109,569,664 (transformers' BertForMaskedLM: 109,514,298,
// 30522 rows, post-LN with no final LayerNorm).
TEST(HfConfig, BertBaseHasItsPublishedParameterCount) {
  EXPECT_EQ(Params("bert-base-uncased"), 109569664);
  ExpectNear(Params("bert-base-uncased"), 110e6);
}

// Flan-T5-large: 783 M (Hugging Face hub, google/flan-t5-large, "783M params"). Its
// GeGLU feed-forward has three matrices and its output layer its own weight:
// 2 x 32128 x 1024 + 24 x (4 x 1024² + 3 x 1024 x 2816 + 2 x 1024) + 24 x (8 x 1024²
// + 3 x 1024 x 2816 + 3 x 1024) + 2 x 1024 + 2 x 32 x 16 = 783,150,080.
TEST(HfConfig, FlanT5LargeHasItsPublishedParameterCountWithItsGatedMlp) {
  EXPECT_EQ(Params("flan-t5-large"), 783150080);
  ExpectNear(Params("flan-t5-large"), 783e6);
  const Result<ModelConfig> c = LoadModelConfig(HfDir("flan-t5-large"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->gated_mlp);
  EXPECT_TRUE(c->untied_output);
  EXPECT_EQ(c->layers, 48);
}

// Phi-2: 2.78 B (Hugging Face hub, microsoft/phi-2, "2.78B params"; Microsoft's
// announcement rounds it to "2.7 billion"). A parallel block: one LayerNorm feeds
// attention and MLP. 51200 x 2560 embeddings + lm_head 51200 x 2560 with a bias
// + 32 x (3 x 2560² + 3 x 2560 q/k/v + 2560² + 2560 dense + 2 x 2560 x 10240 + 10240 + 2560
// fc1/fc2 + 2 x 2560 LayerNorm) + 2 x 2560 final LayerNorm = 2,779,683,840.
TEST(HfConfig, Phi2HasItsPublishedParameterCountWithOneNormPerBlock) {
  EXPECT_EQ(Params("phi-2"), 2779683840);
  ExpectNear(Params("phi-2"), 2.78e9);
  const Result<ModelConfig> c = LoadModelConfig(HfDir("phi-2"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, "phi");
  EXPECT_TRUE(c->parallel_block);
  EXPECT_EQ(c->dtype, "fp16");
}

// RoBERTa-base: 125 M (Hugging Face hub, FacebookAI/roberta-base, "125M params"; Liu
// et al. 2019 train BERT-base's architecture). BERT's block with one token type and
// positions from pad_token_id + 1 (514 - 2 = 512 usable): 50304 (50265 padded) x 768
// + 512 x 768 + 1 x 768 + 2 x 768 + 12 x 7,087,872 + the MLM head's 594,432 (final
// LayerNorm, dense, LayerNorm) + its output bias 50304 = 124,727,424.
TEST(HfConfig, RobertaBaseHasItsPublishedParameterCount) {
  EXPECT_EQ(Params("roberta-base"), 124727424);
  ExpectNear(Params("roberta-base"), 125e6);
  const Result<ModelConfig> c = LoadModelConfig(HfDir("roberta-base"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, "bert");
  EXPECT_EQ(c->token_types, 1);
  EXPECT_EQ(c->seq_len, 512);  // max_position_embeddings 514 - (pad_token_id 1 + 1)
}

// OPT-1.3B: 1.32 B (Hugging Face hub, facebook/opt-1.3b, "1.32B params"; Zhang et al.
// 2022, Table 1, name it 1.3B). GPT's pre-LayerNorm block with ReLU and ffn_dim 8192:
// 50304 (50272 padded) x 2048 tied + 2048 x 2048 positions + 24 x 50,356,224 + 2 x 2048
// = 1,315,819,520 (transformers' 1,315,758,080 has 50272 rows and OPT's 2050 positions).
TEST(HfConfig, Opt13BHasItsPublishedParameterCount) {
  EXPECT_EQ(Params("opt-1.3b"), 1315819520);
  ExpectNear(Params("opt-1.3b"), 1.32e9);
  const Result<ModelConfig> c = LoadModelConfig(HfDir("opt-1.3b"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->family, "opt");
  EXPECT_EQ(FfnHidden(*c), 8192);
}

// GPT-J-6B: 6,053,381,344 (its model card, EleutherAI/gpt-j-6b, "n_parameters"). A
// parallel block; q/k/v/out without biases, fc_in/fc_out and lm_head with them; n_inner
// null -> 4 x 4096: 2 x 50432 (50400 padded) x 4096 + 50432 + 28 x (4 x 4096² + 2 x 4096
// x 16384 + 16384 + 4096 + 2 x 4096) + 2 x 4096 = 6,051,144,960.
TEST(HfConfig, GptJSixBHasItsPublishedParameterCount) {
  EXPECT_EQ(Params("gpt-j-6b"), 6051144960);
  ExpectNear(Params("gpt-j-6b"), 6053381344.0);
  const Result<ModelConfig> c = LoadModelConfig(HfDir("gpt-j-6b"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->parallel_block);
  EXPECT_EQ(FfnHidden(*c), 16384);
}

// Korthikanti's per-layer saved bytes where the formula applies: GPT-2's real file at
// fp16 (its default seq_len 1024, micro-batch 1, standard attention) saves exactly
// s·b·h·(34 + 5·a·s/h) = 1024 x 768 x (34 + 5 x 12 x 1024 / 768) = 89,653,248 bytes
// in every block.
TEST(HfConfig, Gpt2FileSavesKorthikantisBytesPerLayer) {
  Result<ModelConfig> c = LoadModelConfig(HfDir("gpt2"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  c->dtype = "fp16";
  ASSERT_EQ(c->seq_len, 1024);
  const Result<traces::Trace> t = BuildTrace(*c);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (int l = 0; l < 12; ++l) EXPECT_EQ(testing::StatsOf(*t, l).saved_bytes, 89653248) << l;
}

// The Llama-3-8B config.json and configs/models/llama-3-8b.json describe one model:
// at the same training settings their traces agree on weights and saved bytes.
TEST(HfConfig, Llama3FileTracesLikeOurLlama3Config) {
  const Result<ModelConfig> ours =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/llama-3-8b.json");
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  Result<ModelConfig> hf = LoadModelConfig(HfDir("meta-llama-3-8b-instruct"));
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ModelConfig theirs = *hf;
  theirs.seq_len = ours->seq_len;
  theirs.tp = ours->tp;
  theirs.sequence_parallel = ours->sequence_parallel;
  theirs.attention = ours->attention;
  theirs.name = ours->name;
  EXPECT_EQ(ToJson(theirs), ToJson(*ours));
  const Result<traces::Trace> a = BuildTrace(*ours), b = BuildTrace(theirs);
  ASSERT_TRUE(a.ok() && b.ok());
  const traces::TraceSummary sa = traces::Summarize(*a), sb = traces::Summarize(*b);
  EXPECT_EQ(sa.weight_bytes, sb.weight_bytes);
  EXPECT_EQ(sa.total.saved_bytes, sb.total.saved_bytes);
  EXPECT_EQ(ParameterCount(*ours).value(), ParameterCount(theirs).value());
}

TEST(HfConfig, FolderIsReadAsItsConfigJsonAndNamedAfterTheFolder) {
  HfReport report;
  const Result<ModelConfig> c = LoadModelConfig(HfDir("meta-llama-3-8b-instruct"), &report);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->name, "meta-llama-3-8b-instruct");
  EXPECT_EQ(c->family, "llama");
  // max_position_embeddings 8192 -> min(8192, 4096); torch_dtype bfloat16.
  EXPECT_EQ(c->seq_len, 4096);
  EXPECT_EQ(c->dtype, "bf16");
  EXPECT_EQ(c->micro_batch, 1);
  EXPECT_EQ(report.model_type, "llama");
  EXPECT_NE(std::find(report.read.begin(), report.read.end(), "num_key_value_heads 8 -> kv_heads"),
            report.read.end());
  EXPECT_NE(std::find(report.ignored.begin(), report.ignored.end(), "rope_theta"),
            report.ignored.end());
  EXPECT_FALSE(report.assumed.empty());
}

TEST(HfConfig, EveryRealDenseFileTracesAndValidates) {
  for (const char* model :
       {"llama-2-7b-chat-hf", "meta-llama-3-8b-instruct", "mistral-nemo-base-2407", "qwen2.5-7b",
        "qwen3-8b", "gpt2", "bert-base-uncased", "roberta-base", "t5-small", "flan-t5-large",
        "phi-2", "opt-1.3b", "gpt-j-6b"}) {
    SCOPED_TRACE(model);
    Result<ModelConfig> c = LoadModelConfig(HfDir(model));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c->seq_len = 128;  // small: the structure, not the size, is under test
    const Result<traces::Trace> t = BuildTrace(*c);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE(traces::Validate(*t, model).ok());
  }
}

// Without n_positions (as Flan-T5's file has none) seq_len is T5's pre-training 512.
TEST(HfConfig, T5WithoutPositionsAssumesItsPretrainingLength) {
  nlohmann::json j = {
      {"model_type", "t5"}, {"d_model", 512}, {"num_layers", 6},     {"num_heads", 8},
      {"d_kv", 32},         {"d_ff", 2048},   {"vocab_size", 32128}, {"num_decoder_layers", 2}};
  const Result<ModelConfig> c = ModelConfigFromHfJson(j, "t.json", "t", nullptr);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->seq_len, 512);
  EXPECT_EQ(c->layers, 8);     // 6 encoder + 2 decoder
  EXPECT_EQ(HeadDim(*c), 32);  // d_kv, not d_model / num_heads (64)
}

// Flan-T5-small's shapes (d_kv 64 x 6 heads = 384, not d_model 512): GeGLU, untied.
// 2 x 32128 x 512 + 8 x (2 x 512 x 384 q/o + 2 x 512 x 384 k/v + 3 x 512 x 1024 + 2 x 512)
// + 8 x (4 x 512 x 384 + 4 x 512 x 384 cross + 3 x 512 x 1024 + 3 x 512) + 2 x 512
// + 2 x 32 x 6 = 76,961,152; Hugging Face hub, google/flan-t5-small: "77M params".
TEST(HfConfig, GatedT5WithDkvOtherThanWidthOverHeads) {
  nlohmann::json j = {{"model_type", "t5"},
                      {"d_model", 512},
                      {"num_layers", 8},
                      {"num_decoder_layers", 8},
                      {"num_heads", 6},
                      {"d_kv", 64},
                      {"d_ff", 1024},
                      {"vocab_size", 32128},
                      {"feed_forward_proj", "gated-gelu"},
                      {"tie_word_embeddings", false}};
  const Result<ModelConfig> c = ModelConfigFromHfJson(j, "t.json", "t", nullptr);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(HeadDim(*c), 64);
  EXPECT_EQ(ParameterCount(*c).value(), 76961152);
  ExpectNear(ParameterCount(*c).value(), 77e6);
}

// Our own configs reject qk_norm and qkv_bias outside the llama family.
TEST(HfConfig, QkNormOutsideLlamaIsRejected) {
  Result<ModelConfig> c = LoadModelConfig(HfDir("gpt2"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  c->qk_norm = true;
  EXPECT_EQ(ValidateConfig(*c, "g.json").message(),
            "g.json: qk_norm: is only modelled for the llama family, not gpt");
}

TEST(HfConfig, ParallelBlockIsRejectedForT5) {
  Result<ModelConfig> c = LoadModelConfig(HfDir("t5-small"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  c->parallel_block = true;
  EXPECT_EQ(ValidateConfig(*c, "t.json").message(),
            "t.json: parallel_block: is not modelled for t5 (its decoder blocks have "
            "cross-attention)");
}

}  // namespace
}  // namespace ssdtrain::models

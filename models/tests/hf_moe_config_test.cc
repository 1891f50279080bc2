// Hugging Face configs of mixture-of-experts models: what the readers take from
// each family's fields, and the MoE families refused naming the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/hf_config.h"
#include "models/moe_config.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

namespace fs = std::filesystem;

class HfMoe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-hf-moe-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  Result<ModelConfig> Load(const std::string& fields, HfReport* report = nullptr) {
    std::ofstream(File()) << "{" << fields << "}";
    return LoadModelConfig(File(), report);
  }
  std::string Message(const std::string& fields) {
    const Status s = Load(fields).status();
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
    return s.message();
  }
  std::string File() const { return (dir_ / "config.json").string(); }
  fs::path dir_;
};

// Qwen1.5-MoE-A2.7B's shapes (Qwen/Qwen1.5-MoE-A2.7B config.json): 60 experts of
// 1408, top-4, a shared expert of 5632 behind a gate, every layer sparse.
constexpr const char* kQwen2Moe = R"("model_type": "qwen2_moe", "hidden_size": 2048,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "intermediate_size": 5632, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": false,
    "vocab_size": 151936, "max_position_embeddings": 8192, "tie_word_embeddings": false,
    "use_sliding_window": false, "sliding_window": 32768, "torch_dtype": "bfloat16")";

// Qwen1.5-MoE-A2.7B: 14.3 B total, 2.7 B activated (its model card). Per layer QKV
// 3·2048² + biases 3·2048, proj 2048², norms 2·2048, router 60·2048, 60 experts of
// 3·2048·1408, shared expert 3·2048·5632 and its gate 2048; 24 layers; untied
// 151936·2048 embedding and output.
TEST_F(HfMoe, Qwen2MoeReadsItsSharedExpertAndGate) {
  HfReport report;
  const Result<ModelConfig> c = Load(kQwen2Moe, &report);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->experts, 60);
  EXPECT_EQ(c->experts_per_token, 4);
  EXPECT_EQ(c->expert_ffn_hidden, 1408);
  EXPECT_EQ(c->shared_expert_ffn_hidden, 5632);
  EXPECT_TRUE(c->shared_expert_gate);
  EXPECT_TRUE(c->qkv_bias);
  const int64_t layer = 3 * 2048 * 2048 + 3 * 2048 + 2048 * 2048 + 2 * 2048 + 60 * 2048 +
                        60 * 3 * 2048 * 1408 + 3 * 2048 * 5632 + 2048;
  const int64_t total = 24 * layer + 2 * 151936LL * 2048 + 2048;
  EXPECT_EQ(*ParameterCount(*c), total);
  EXPECT_LT(std::abs(static_cast<double>(total) - 14.3e9), 0.005 * 14.3e9);
  const int64_t active = total - 24LL * 56 * 3 * 2048 * 1408;
  EXPECT_EQ(*ActiveParameterCount(*c), active);
  EXPECT_LT(std::abs(static_cast<double>(active) - 2.7e9), 0.05 * 2.7e9);
  EXPECT_NE(std::find(report.read.begin(), report.read.end(), "num_experts 60 -> experts"),
            report.read.end());
}

TEST_F(HfMoe, Qwen2MoeDenseLayersFollowStepAndList) {
  const Result<ModelConfig> c =
      Load(std::string(kQwen2Moe) + R"(, "decoder_sparse_step": 2, "mlp_only_layers": [5])");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(IsMoeLayer(*c, 0));
  EXPECT_TRUE(IsMoeLayer(*c, 1));
  EXPECT_FALSE(IsMoeLayer(*c, 5));
  EXPECT_EQ(MoeLayerCount(*c), 11);
  ModelConfig small = *c;
  small.seq_len = 64;
  small.layers = 6;
  const Result<traces::Trace> t = BuildTrace(small);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(traces::Validate(*t, "qwen2_moe").ok());
}

TEST_F(HfMoe, MlpOnlyLayerOutsideTheModelNamesTheField) {
  EXPECT_EQ(Message(std::string(kQwen2Moe) + R"(, "mlp_only_layers": [24])"),
            File() + ": mlp_only_layers: layer 24 is outside [0, num_hidden_layers 24)");
}

TEST_F(HfMoe, MoreExpertsPerTokenThanExpertsNamesTheField) {
  EXPECT_EQ(Message(std::string(kQwen2Moe) + R"(, "num_experts_per_tok": 61)"),
            File() + ": num_experts_per_tok: 61 exceeds num_experts 60");
}

TEST_F(HfMoe, MixtralRouterJitterIsNotModelled) {
  EXPECT_EQ(Message(R"("model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
      "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
      "max_position_embeddings": 32768, "router_jitter_noise": 0.1)"),
            File() +
                ": router_jitter_noise: 0.1 (noise on the router input) is not modelled "
                "(supported: 0.0)");
}

// DeepSeek's reader (hf_deepseek_config.cc) names its missing fields as any other.
TEST_F(HfMoe, DeepSeekWithoutItsLatentRankNamesTheField) {
  EXPECT_EQ(Message(R"("model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
      "num_attention_heads": 128, "intermediate_size": 18432, "vocab_size": 129280,
      "max_position_embeddings": 4096)"),
            File() + ": kv_lora_rank: missing required field");
}

TEST_F(HfMoe, OtherMoeFamiliesNameTheSupportedOnes) {
  EXPECT_EQ(Message(R"("model_type": "olmoe", "hidden_size": 2048)"),
            File() +
                ": model_type: the mixture-of-experts model \"olmoe\" is not modelled "
                "(supported: mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2, "
                "gpt_oss)");
}

TEST(HfMoeFiles, RealMoeFilesTraceAndValidate) {
  // Today's files at 4 of their blocks (a dense and an MoE one among them, with
  // DeepSeek-V3's MTP depth): their whole traces cost seconds under the sanitizers.
  const std::pair<const char*, int64_t> files[] = {{"mixtral-8x7b-v0.1", 0}, {"qwen3-30b-a3b", 0},
                                                   {"deepseek-v3", 4},       {"kimi-k2", 4},
                                                   {"gpt-oss-20b", 4},       {"gpt-oss-120b", 4}};
  for (const auto& [model, layers] : files) {
    SCOPED_TRACE(model);
    Result<ModelConfig> c =
        LoadModelConfig(std::string(ConfiguredSourceDir()) + "/models/tests/hf/" + model);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c->seq_len = 64;  // 64 tokens x 8 reach each of Kimi K2's 384 experts
    if (layers > 0) c->layers = layers;
    const Result<traces::Trace> t = BuildTrace(*c);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE(traces::Validate(*t, model).ok());
  }
}

}  // namespace
}  // namespace ssdtrain::models

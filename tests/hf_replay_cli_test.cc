// End to end: Hugging Face config.json files (models/tests/hf/) traced at a small
// sequence length and replayed with --verify on the CPU backend, every saved
// offloadable activation through the SSD path (--policy offload-ssd).
//
// A file whose model is too big for a CI machine (Qwen3-8B: 8.2 B parameters, 33 GB
// of fp32 weights) is replayed as a reduced copy: the real file with only its size
// fields rewritten (widths, depth, heads, vocabulary), so every other field, and so
// the family mapping under test, is the file's own. Small published models (T5-small)
// are replayed whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/cli_util.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;
using testing::SourceDir;

// Short enough for a CPU replay of a whole small model in seconds.
constexpr int kSeqLen = 16;

class HfReplayCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-hf-replay-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "offload");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }

  // models/tests/hf/<model>/config.json with `sizes` written over its fields, saved
  // as <dir>/<model>-reduced/config.json; returns that folder.
  std::string Reduced(const std::string& model, const nlohmann::json& sizes) const {
    std::ifstream in(SourceDir() + "/models/tests/hf/" + model + "/config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& [key, value] : sizes.items()) {
      EXPECT_TRUE(j.contains(key)) << model << " has no " << key << " to reduce";
      j[key] = value;
    }
    const fs::path folder = dir_ / (model + "-reduced");
    fs::create_directories(folder);
    std::ofstream(folder / "config.json") << j.dump(2);
    return folder.string();
  }

  // The reduction of the grouped-query files (Qwen3, Gemma, Gemma 2): 2 layers of
  // width 256, 8 heads of 64 (head_dim explicit) over 2 kv heads, FFN 2048.
  // Mistral-7B-v0.1's file at GQA sizes, its window a quarter of the sequence (its
  // file has no head_dim to reduce).
  static nlohmann::json MistralWindowSizes() {
    return {{"hidden_size", 256},           {"num_hidden_layers", 2},    {"num_attention_heads", 4},
            {"num_key_value_heads", 2},     {"intermediate_size", 2048}, {"vocab_size", 1024},
            {"sliding_window", kSeqLen / 4}};
  }

  static nlohmann::json GroupedQuerySizes() {
    return {{"hidden_size", 256},       {"num_hidden_layers", 2}, {"num_attention_heads", 8},
            {"num_key_value_heads", 2}, {"head_dim", 64},         {"intermediate_size", 2048},
            {"vocab_size", 1024}};
  }

  // Traces `model` (a config folder) at kSeqLen, replays it with --verify and
  // expects a verified run that wrote to the SSD and left no file behind.
  void ExpectVerifiedReplay(const std::string& model, const std::string& trace_flags = "") {
    testing::CliResult traced =
        RunSsdtrain("trace --model " + model + " --seq-len " + std::to_string(kSeqLen) +
                    trace_flags + " -o " + File("t.json"));
    ASSERT_EQ(traced.exit_code, 0) << traced.output;
    testing::CliResult run = RunSsdtrain(
        "replay --trace " + File("t.json") + " --policy offload-ssd --backend cpu --dir " +
        File("offload") + " --steps 1 --verify -o " + File("run.json"));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    auto report = traces::ReadStepReport(File("run.json"));
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    ASSERT_TRUE(report->verified.has_value());
    EXPECT_TRUE(*report->verified);
    // Every storage the plan offloads had its write started, or dropped: a
    // storage backward needs while its write is still queued (a loaded machine,
    // a forward of milliseconds) is served from memory instead. Which of the two
    // follows this machine's timing; their sum does not.
    const nlohmann::json& cache = report->extra.at("cache");
    const int64_t offloaded = report->extra.at("plan_offloaded_bytes").get<int64_t>();
    EXPECT_GT(offloaded, 0);
    EXPECT_EQ(
        cache.at("bytes_written").get<int64_t>() + cache.at("bytes_write_dropped").get<int64_t>(),
        offloaded)
        << cache.dump();
    EXPECT_TRUE(fs::is_empty(File("offload"))) << "offload files left";
  }
  fs::path dir_;
};

// T5-small whole (60.5 M parameters): encoder, decoder with cross-attention, the
// relative position bias, tied embeddings.
TEST_F(HfReplayCli, T5SmallReplaysVerified) {
  ExpectVerifiedReplay(SourceDir() + "/models/tests/hf/t5-small");
}

// Flan-T5-large's file reduced to 2 + 2 blocks of width 128 with d_kv 48 (4 heads x 48
// = 192, not 128): the GeGLU feed-forward, the untied output layer, T5's cross-attention.
TEST_F(HfReplayCli, FlanT5ReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("flan-t5-large", {{"d_model", 128},
                                                 {"num_layers", 2},
                                                 {"num_decoder_layers", 2},
                                                 {"num_heads", 4},
                                                 {"d_kv", 48},
                                                 {"d_ff", 1024},
                                                 {"vocab_size", 1024}}));
}

// RoBERTa-base's file reduced to 2 layers: one token type, positions after the pad
// token, the MLM head.
TEST_F(HfReplayCli, RobertaReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("roberta-base", {{"hidden_size", 256},
                                                {"num_hidden_layers", 2},
                                                {"num_attention_heads", 4},
                                                {"intermediate_size", 1024},
                                                {"vocab_size", 1024}}));
}

// OPT-1.3B's file reduced: learned positions, the ReLU MLP, biases, residual-only dropout.
TEST_F(HfReplayCli, OptReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("opt-1.3b", {{"hidden_size", 256},
                                            {"num_hidden_layers", 2},
                                            {"num_attention_heads", 4},
                                            {"ffn_dim", 2048},
                                            {"vocab_size", 1024},
                                            {"word_embed_proj_dim", 256}}));
}

// GPT-J-6B's file reduced: the parallel block with biases on the MLP only and no
// dropout (fc_out's bias added in the residual add), the lm_head bias.
TEST_F(HfReplayCli, GptJReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("gpt-j-6b", {{"n_embd", 256},
                                            {"n_layer", 2},
                                            {"n_head", 4},
                                            {"rotary_dim", 16},
                                            {"n_inner", 2048},
                                            {"vocab_size", 1024}}));
}

// Qwen3-8B's file reduced to 2 layers of width 256 (FFN 2048, so that its SwiGLU
// input is offloadable at the 64 KiB floor): q/k norms, explicit head_dim
// (64, not 256 / 8), grouped-query attention with 2 kv heads, SwiGLU, untied output.
TEST_F(HfReplayCli, Qwen3ReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("qwen3-8b", GroupedQuerySizes()));
}

// Qwen2.5-7B's file reduced the same way: the q/k/v biases.
TEST_F(HfReplayCli, Qwen25ReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("qwen2.5-7b", {{"hidden_size", 256},
                                              {"num_hidden_layers", 2},
                                              {"num_attention_heads", 4},
                                              {"num_key_value_heads", 2},
                                              {"intermediate_size", 2048},
                                              {"vocab_size", 1024}}));
}

// Phi-2's file reduced the same way: the parallel block (one LayerNorm feeding
// attention and MLP, their gradients summed), rotary, biases, the lm_head bias.
TEST_F(HfReplayCli, Phi2ReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("phi-2", {{"hidden_size", 256},
                                         {"num_hidden_layers", 2},
                                         {"num_attention_heads", 4},
                                         {"num_key_value_heads", 4},
                                         {"intermediate_size", 2048},
                                         {"vocab_size", 1024}}));
}

// Mixtral-8x7B's file reduced the same way (4 of its 8 experts): the router, the
// permute, the experts' gemms at 8 rows each (16 tokens x top-2 over 4), the
// unpermute weighted by the router.
TEST_F(HfReplayCli, MixtralReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("mixtral-8x7b-v0.1", {{"hidden_size", 256},
                                                     {"num_hidden_layers", 2},
                                                     {"num_attention_heads", 8},
                                                     {"num_key_value_heads", 2},
                                                     {"intermediate_size", 2048},
                                                     {"num_local_experts", 4},
                                                     {"vocab_size", 1024}}));
}

// Qwen3-30B-A3B's file reduced the same way (16 experts, its top-8): q/k norms and
// routed experts of moe_intermediate_size.
// gpt-oss-20b's file reduced the same way (4 experts, its top-4 cut to 2): attention
// sinks and biases, a window on every other layer shorter than the sequence, biased
// experts with the clamped SwiGLU; 16 sequences a micro-batch, so that flash
// attention's tensors reach the 64 KiB a tensor needs to be offloadable.
TEST_F(HfReplayCli, GptOss20bReducedReplaysVerified) {
  ExpectVerifiedReplay(
      Reduced("gpt-oss-20b", {{"hidden_size", 256},
                              {"num_hidden_layers", 2},
                              {"layer_types", {"sliding_attention", "full_attention"}},
                              {"num_attention_heads", 8},
                              {"num_key_value_heads", 2},
                              {"head_dim", 32},
                              {"intermediate_size", 512},
                              {"num_local_experts", 4},
                              {"num_experts_per_tok", 2},
                              {"experts_per_token", 2},
                              {"sliding_window", kSeqLen / 4},
                              {"vocab_size", 1024}}),
      " --attention flash --micro-batch 16");
}

// DeepSeek-V3's file reduced the same way (8 experts, its top-8 cut to 2): multi-head
// latent attention, a dense first layer, sigmoid-routed experts with a shared expert
// and one multi-token-prediction depth, every offloadable activation through the SSD.
TEST_F(HfReplayCli, DeepseekV3ReducedWithMtpReplaysVerified) {
  ExpectVerifiedReplay(Reduced("deepseek-v3", {{"hidden_size", 256},
                                               {"num_hidden_layers", 2},
                                               {"num_attention_heads", 8},
                                               {"num_key_value_heads", 8},
                                               {"q_lora_rank", 128},
                                               {"kv_lora_rank", 64},
                                               {"qk_nope_head_dim", 32},
                                               {"qk_rope_head_dim", 16},
                                               {"v_head_dim", 32},
                                               {"intermediate_size", 1024},
                                               {"moe_intermediate_size", 256},
                                               {"n_routed_experts", 8},
                                               {"num_experts_per_tok", 2},
                                               {"first_k_dense_replace", 1},
                                               {"vocab_size", 1024}}));
}

TEST_F(HfReplayCli, Qwen3MoeReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("qwen3-30b-a3b", {{"hidden_size", 256},
                                                 {"num_hidden_layers", 2},
                                                 {"num_attention_heads", 8},
                                                 {"num_key_value_heads", 2},
                                                 {"head_dim", 64},
                                                 {"intermediate_size", 1024},
                                                 {"moe_intermediate_size", 1024},
                                                 {"num_experts", 16},
                                                 {"vocab_size", 1024}}));
}

// Pythia-6.9B's file reduced the same way: GPT-NeoX's parallel block with a
// LayerNorm per branch (the two norm backwards chained), rotary over a quarter of
// each head, biases on every linear, the untied embed_out.
TEST_F(HfReplayCli, PythiaReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("pythia-6.9b-deduped", {{"hidden_size", 256},
                                                       {"num_hidden_layers", 2},
                                                       {"num_attention_heads", 4},
                                                       {"intermediate_size", 2048},
                                                       {"vocab_size", 1024}}));
}

// Gemma-7B's file reduced the same way: explicit head_dim (64, not 256 / 8), two kv
// heads, the GeGLU MLP, RMSNorm, the output layer tied to the embeddings.
TEST_F(HfReplayCli, GemmaReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("gemma-7b", GroupedQuerySizes()));
}

// Gemma-2-9B's file reduced the same way: Gemma's block with the soft-capped scores
// and logits, four RMSNorms per block, its sliding window (4096) longer than the
// sequence.
TEST_F(HfReplayCli, Gemma2ReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("gemma-2-9b", GroupedQuerySizes()));
}

// Mistral-7B-v0.1's file reduced the same way, its window cut to a quarter of the
// sequence: FlashAttention over the keys inside it on every layer.
TEST_F(HfReplayCli, MistralReducedWithAWindowShorterThanTheSequenceReplaysVerified) {
  ExpectVerifiedReplay(Reduced("mistral-7b-v0.1", MistralWindowSizes()), " --attention flash");
}

// The same reduced Mistral planned with --attention flash against its file's
// standard attention: the plan records it, a replay from the model builds its trace
// with it (verified), and a trace of the other attention is refused naming the flag.
TEST_F(HfReplayCli, PlanAttentionIsRecordedAndReplayedFromTheModel) {
  const std::string model = Reduced("mistral-7b-v0.1", MistralWindowSizes());
  const std::string hardware = SourceDir() + "/configs/hardware/cpu-local.json";
  testing::CliResult planned = RunSsdtrain(
      "plan --model " + model + " --hardware " + hardware + " --seq-len " +
      std::to_string(kSeqLen) + " --attention flash --policy offload-ssd -o " + File("plan.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find(" --attention flash"), std::string::npos) << planned.output;
  std::ifstream in(File("plan.json"));
  EXPECT_EQ(nlohmann::json::parse(in).value("attention", ""), "flash");
  testing::CliResult run = RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") +
                                       " --backend cpu --dir " + File("offload") +
                                       " --steps 1 --verify -o " + File("run.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto report = traces::ReadStepReport(File("run.json"));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(report->verified.has_value());
  EXPECT_TRUE(*report->verified);
  testing::CliResult traced = RunSsdtrain("trace --model " + model + " --seq-len " +
                                          std::to_string(kSeqLen) + " -o " + File("std.json"));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  testing::CliResult contradicted =
      RunSsdtrain("plan --trace " + File("std.json") + " --hardware " + hardware +
                  " --attention flash -o " + File("plan2.json"));
  EXPECT_NE(contradicted.exit_code, 0);
  EXPECT_NE(contradicted.output.find("--attention flash contradicts the trace " + File("std.json") +
                                     " (built with standard attention: header.attention)"),
            std::string::npos)
      << contradicted.output;
}

// Qwen2.5-0.5B's file reduced the same way: one word table for the embeddings and
// the logits (tie_word_embeddings).
TEST_F(HfReplayCli, Qwen25HalfBReducedWithItsTiedTableReplaysVerified) {
  ExpectVerifiedReplay(Reduced("qwen2.5-0.5b", {{"hidden_size", 256},
                                                {"num_hidden_layers", 2},
                                                {"num_attention_heads", 4},
                                                {"num_key_value_heads", 2},
                                                {"intermediate_size", 2048},
                                                {"vocab_size", 1024}}));
}

// Phi-3.5-mini's file reduced the same way: Llama's block as phi3 (its longrope
// scaling ignored: it changes no tensor).
TEST_F(HfReplayCli, Phi35ReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced("phi-3.5-mini-instruct", {{"hidden_size", 256},
                                                         {"num_hidden_layers", 2},
                                                         {"num_attention_heads", 4},
                                                         {"num_key_value_heads", 4},
                                                         {"intermediate_size", 2048},
                                                         {"vocab_size", 1024}}));
}

// Falcon-7B's genuine file (RWConfig's names) reduced the same way: multi-query
// attention (one kv head), the parallel block on one LayerNorm, no biases, the tied
// output layer; width 512, so that the GELU input (4 x 512 wide, bf16) reaches the
// 64 KiB offload floor.
TEST_F(HfReplayCli, Falcon7BReducedReplaysVerified) {
  ExpectVerifiedReplay(Reduced(
      "falcon-7b", {{"hidden_size", 512}, {"n_head", 8}, {"n_layer", 2}, {"vocab_size", 1024}}));
}

}  // namespace
}  // namespace ssdtrain

// Config parsing and validation: each class of bad input gets a message naming
// the file, the field and what was expected.
#include "models/model_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace ssdtrain::models {
namespace {

namespace fs = std::filesystem;

const char* kValid = R"({
  "name": "x", "family": "gpt", "hidden": 1024, "heads": 16, "layers": 4,
  "vocab": 1000, "seq_len": 512
})";

// Writes `text` to <tmp>/<stem>.json and returns the path.
std::string WriteConfig(const std::string& stem, const std::string& text) {
  const fs::path dir = fs::path(::testing::TempDir()) / "models_config_test";
  fs::create_directories(dir);
  const fs::path p = dir / (stem + ".json");
  std::ofstream(p) << text;
  return p.string();
}

// Parses kValid with one field replaced (or removed when `value` is empty).
Status WithField(const std::string& field, const std::string& value) {
  nlohmann::json j = nlohmann::json::parse(kValid);
  if (value.empty()) {
    j.erase(field);
  } else {
    j[field] = nlohmann::json::parse(value);
  }
  return ModelConfigFromJson(j, "configs/models/x.json").status();
}

TEST(ModelConfig, ValidConfigGetsDefaults) {
  const Result<ModelConfig> c = LoadModelConfig(WriteConfig("x", kValid));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->micro_batch, 1);
  EXPECT_EQ(c->tp, 1);
  EXPECT_EQ(c->pp, 1);
  EXPECT_EQ(c->attention, "standard");
  EXPECT_EQ(c->dtype, "fp16");
  EXPECT_EQ(KvHeads(*c), 16);
  EXPECT_EQ(HeadDim(*c), 64);
  EXPECT_EQ(FfnHidden(*c), 4096);
  EXPECT_EQ(PaddedVocab(*c), 1024);  // 1000 rounded up to a multiple of 128·tp
  // Today's static memory: Adam with fp32 master weights, unsharded.
  EXPECT_EQ(c->optimizer, "adam");
  EXPECT_EQ(c->precision, "mixed");
  EXPECT_EQ(c->zero_stage, 0);
  EXPECT_EQ(c->dp, 1);
}

TEST(ModelConfig, ToJsonReadsBackEqual) {
  const Result<ModelConfig> c = ModelConfigFromJson(nlohmann::json::parse(kValid), "x.json");
  ASSERT_TRUE(c.ok());
  const Result<ModelConfig> again = ModelConfigFromJson(ToJson(*c), "x.json");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(ToJson(*again), ToJson(*c));
}

TEST(ModelConfig, NotJsonNamesTheFile) {
  const std::string path = WriteConfig("broken", "{ \"name\": ");
  const Status s = LoadModelConfig(path).status();
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message().rfind(path + ": not valid JSON", 0), 0u) << s.message();
}

TEST(ModelConfig, MissingFileIsNotFound) {
  const Status s = LoadModelConfig("/nonexistent/dir/x.json").status();
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_EQ(s.message(), "/nonexistent/dir/x.json: no such file");
}

TEST(ModelConfig, NotAnObject) {
  EXPECT_EQ(ModelConfigFromJson(nlohmann::json::array(), "x.json").status().message(),
            "x.json: expected an object, got array");
}

TEST(ModelConfig, MissingField) {
  EXPECT_EQ(WithField("hidden", "").message(),
            "configs/models/x.json: hidden: missing required field");
}

TEST(ModelConfig, WrongType) {
  EXPECT_EQ(WithField("hidden", "\"big\"").message(),
            "configs/models/x.json: hidden: expected an integer, got string");
  EXPECT_EQ(WithField("seq_len", "512.5").message(),
            "configs/models/x.json: seq_len: expected an integer, got number");
  EXPECT_EQ(WithField("sequence_parallel", "1").message(),
            "configs/models/x.json: sequence_parallel: expected true or false, got integer");
  EXPECT_EQ(WithField("family", "3").message(),
            "configs/models/x.json: family: expected a string, got integer");
}

TEST(ModelConfig, ZeroOrNegativeSizes) {
  EXPECT_EQ(WithField("hidden", "0").message(),
            "configs/models/x.json: hidden: expected a positive integer, got 0");
  EXPECT_EQ(WithField("micro_batch", "-2").message(),
            "configs/models/x.json: micro_batch: expected a positive integer, got -2");
  EXPECT_EQ(WithField("ffn_hidden", "-1").message(),
            "configs/models/x.json: ffn_hidden: expected a non-negative integer (0 means the "
            "default), got -1");
}

TEST(ModelConfig, HeadsMustDivideHidden) {
  nlohmann::json j = nlohmann::json::parse(kValid);
  j["hidden"] = 1000;
  j["heads"] = 12;
  EXPECT_EQ(ModelConfigFromJson(j, "configs/models/x.json").status().message(),
            "configs/models/x.json: heads: 12 does not divide hidden 1000");
  // An explicit head_dim lifts the rule (T5-11B: 128 heads of 128 on hidden 1024).
  j["head_dim"] = 80;
  EXPECT_TRUE(ModelConfigFromJson(j, "x.json").ok());
}

TEST(ModelConfig, TpMustDivideHeadsAndKvHeads) {
  EXPECT_EQ(WithField("tp", "3").message(),
            "configs/models/x.json: tp: 3 does not divide heads 16");
  nlohmann::json j = nlohmann::json::parse(kValid);
  j["family"] = "llama";
  j["kv_heads"] = 2;
  j["tp"] = 4;
  EXPECT_EQ(ModelConfigFromJson(j, "x.json").status().message(),
            "x.json: tp: 4 does not divide kv_heads 2");
  j["kv_heads"] = 3;
  j["tp"] = 1;
  EXPECT_EQ(ModelConfigFromJson(j, "x.json").status().message(),
            "x.json: kv_heads: 3 does not divide heads 16");
}

// The one rule the config's validation and the planner's search ask
// (TensorParallelRefusal): at tp 1, 2 the kv_heads-2 config runs; at 4 and 8
// its key/value heads refuse it; at 32 its heads already do.
TEST(ModelConfig, TensorParallelRefusalIsTheValidationsRule) {
  nlohmann::json j = nlohmann::json::parse(kValid);
  j["family"] = "llama";
  j["kv_heads"] = 2;
  const Result<ModelConfig> c = ModelConfigFromJson(j, "x.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(TensorParallelRefusal(*c, 1), "");
  EXPECT_EQ(TensorParallelRefusal(*c, 2), "");
  EXPECT_EQ(TensorParallelRefusal(*c, 4), "4 does not divide kv_heads 2");
  EXPECT_EQ(TensorParallelRefusal(*c, 8), "8 does not divide kv_heads 2");
  EXPECT_EQ(TensorParallelRefusal(*c, 32), "32 does not divide heads 16");
  EXPECT_EQ(TensorParallelRefusal(*c, 0), "expected a positive integer, got 0");
}

TEST(ModelConfig, GroupedQueryAttentionIsLlamaFalconAndGemmaOnly) {
  EXPECT_EQ(WithField("kv_heads", "4").message(),
            "configs/models/x.json: kv_heads: grouped-query attention (kv_heads 4 != heads 16) "
            "is only modelled for the llama, falcon, gemma or gemma2 families, not gpt");
}

// A sliding window is read, written back and kept past the sequence: any causal
// decoder may have one (sliding_window_test.cc checks what it changes), and a
// longer --seq-len makes it mask.
TEST(ModelConfig, SlidingWindowIsWrittenBackAndMasksOnlyPastIt) {
  nlohmann::json j = nlohmann::json::parse(kValid);
  j["sliding_window"] = j["seq_len"].get<int64_t>();
  const Result<ModelConfig> c = ModelConfigFromJson(j, "x.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(ToJson(*c)["sliding_window"], j["seq_len"]);
  EXPECT_EQ(AttentionWindow(*c, 0), 0);  // it masks nothing
  ConfigOverrides longer;
  longer.seq_len = c->sliding_window * 2;
  const Result<ModelConfig> l = ApplyOverrides(*c, longer, "x.json");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(AttentionWindow(*l, 0), c->sliding_window);
}

TEST(ModelConfig, LayersMustBeDivisibleByPpUnlessTheSplitIsSet) {
  EXPECT_EQ(WithField("pp", "3").message(),
            "configs/models/x.json: pp: layers 4 are not divisible by pp 3 (each stage holds "
            "layers / pp blocks unless the first and last stages' blocks are set)");
}

TEST(ModelConfig, SequenceParallelNeedsSeqLenDivisibleByTp) {
  nlohmann::json j = nlohmann::json::parse(kValid);
  j["tp"] = 4;
  j["sequence_parallel"] = true;
  j["seq_len"] = 510;
  EXPECT_EQ(ModelConfigFromJson(j, "x.json").status().message(),
            "x.json: seq_len: 510 is not divisible by tp 4 (sequence parallelism splits the "
            "sequence across tensor-parallel ranks)");
}

TEST(ModelConfig, UnknownEnumValues) {
  EXPECT_EQ(WithField("family", "\"mamba\"").message(),
            "configs/models/x.json: family: unknown family \"mamba\", expected gpt, bert, t5, "
            "llama, phi, opt, gptj, neox, falcon, gemma or gemma2");
  EXPECT_EQ(WithField("attention", "\"sparse\"").message(),
            "configs/models/x.json: attention: unknown attention \"sparse\", expected standard "
            "or flash");
  EXPECT_EQ(WithField("dtype", "\"fp8\"").message(),
            "configs/models/x.json: dtype: unknown dtype \"fp8\", expected fp16, bf16 or fp32");
}

TEST(ModelConfig, BadOptimizerPrecisionOrZeroStageNameFileAndField) {
  EXPECT_EQ(WithField("optimizer", "\"lamb\"").message(),
            "configs/models/x.json: optimizer: unknown optimizer \"lamb\", expected adam or sgd");
  EXPECT_EQ(WithField("precision", "\"fp8\"").message(),
            "configs/models/x.json: precision: unknown precision \"fp8\", expected mixed or pure "
            "(mixed: fp32 master weights; pure: none)");
  EXPECT_EQ(WithField("zero_stage", "4").message(),
            "configs/models/x.json: zero_stage: expected 0, 1, 2 or 3 (1: the optimizer state "
            "sharded over dp; 2: the gradients too; 3: the weights too), got 4");
  EXPECT_EQ(WithField("dp", "0").message(),
            "configs/models/x.json: dp: expected a positive integer, got 0");
}

// The gradients' dtype (models/README.md, "Gradient dtype"): left out, fp32
// for bf16 with fp32 master weights (Megatron-LM's forced
// accumulate_allreduce_grads_in_fp32, FSDP2's reduce_dtype in torchtitan),
// else the dtype; set, as given (NeMo's grad_sync_dtype bf16). Written back
// only where set; anything but a dtype is refused naming the field.
TEST(ModelConfig, GradDTypeDefaultsToFp32ForBf16WithMasterWeightsOnly) {
  auto resolved = [](const std::string& dtype, const std::string& precision,
                     const std::string& grad_dtype) {
    nlohmann::json j = nlohmann::json::parse(kValid);
    j["dtype"] = dtype;
    j["precision"] = precision;
    if (!grad_dtype.empty()) j["grad_dtype"] = grad_dtype;
    const Result<ModelConfig> c = ModelConfigFromJson(j, "x.json");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return std::string();
    const Result<ModelConfig> again = ModelConfigFromJson(ToJson(*c), "x.json");
    EXPECT_TRUE(again.ok());
    EXPECT_EQ(again->grad_dtype, grad_dtype);
    EXPECT_EQ(ToJson(*c).contains("grad_dtype"), !grad_dtype.empty());
    return GradDType(*c);
  };
  EXPECT_EQ(resolved("bf16", "mixed", ""), "fp32");
  EXPECT_EQ(resolved("fp16", "mixed", ""), "fp16");
  EXPECT_EQ(resolved("fp32", "mixed", ""), "fp32");
  EXPECT_EQ(resolved("bf16", "pure", ""), "bf16");
  EXPECT_EQ(resolved("bf16", "mixed", "bf16"), "bf16");
  EXPECT_EQ(resolved("fp16", "mixed", "fp32"), "fp32");
  EXPECT_EQ(WithField("grad_dtype", "\"fp8\"").message(),
            "configs/models/x.json: grad_dtype: unknown dtype \"fp8\", expected fp16, bf16 or "
            "fp32 (or leave it out: fp32 for bf16 with fp32 master weights, else the dtype)");
  EXPECT_EQ(WithField("grad_dtype", "32").message(),
            "configs/models/x.json: grad_dtype: expected a string, got integer");
}

TEST(ModelConfig, UnknownFieldIsRejectedByName) {
  EXPECT_EQ(WithField("hiden", "1024").message(), "configs/models/x.json: hiden: unknown field");
}

TEST(ModelConfig, T5NeedsEncoderLayersAndOthersMustNotHaveThem) {
  EXPECT_EQ(WithField("family", "\"t5\"").message(),
            "configs/models/x.json: encoder_layers: t5 needs 0 < encoder_layers < layers (4), "
            "got 0");
  EXPECT_EQ(WithField("encoder_layers", "2").message(),
            "configs/models/x.json: encoder_layers: only the t5 family has encoder_layers, got 2 "
            "for gpt");
}

TEST(ModelConfig, NameMustMatchTheFileStem) {
  const std::string path = WriteConfig("y", kValid);
  EXPECT_EQ(LoadModelConfig(path).status().message(),
            path + ": name: \"x\" does not match the file name (expected \"y\")");
}

TEST(ModelConfig, OverridesApplyAndAreValidated) {
  const Result<ModelConfig> c = ModelConfigFromJson(nlohmann::json::parse(kValid), "x.json");
  ASSERT_TRUE(c.ok());
  ConfigOverrides o;
  o.micro_batch = 8;
  o.tp = 4;
  o.sequence_parallel = true;
  o.attention = "flash";
  o.dtype = "bf16";
  const Result<ModelConfig> r = ApplyOverrides(*c, o, "x.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->micro_batch, 8);
  EXPECT_EQ(r->tp, 4);
  EXPECT_TRUE(r->sequence_parallel);
  EXPECT_EQ(r->attention, "flash");
  EXPECT_EQ(r->dtype, "bf16");
  EXPECT_EQ(r->seq_len, 512);  // not overridden
  ConfigOverrides bad;
  bad.pp = 3;
  // The message names the file and the flags: the field at fault came from one.
  EXPECT_EQ(ApplyOverrides(*c, bad, "x.json").status().message(),
            "x.json with --pp 3: pp: layers 4 are not divisible by pp 3 (each stage holds layers "
            "/ pp blocks unless the first and last stages' blocks are set)");
  // The split set, pp 3 holds them as 1 | 2 | 1 (traces::BlocksOfStage).
  bad.pp_first_layers = 1;
  bad.pp_last_layers = 1;
  const Result<ModelConfig> split = ApplyOverrides(*c, bad, "x.json");
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  EXPECT_EQ(split->pp_first_layers, 1);
  EXPECT_EQ(ToJson(*split).at("pp_last_layers"), 1);
}

TEST(ModelConfig, OverridesSetTheShardingOfTheOptimizerState) {
  const Result<ModelConfig> c = ModelConfigFromJson(nlohmann::json::parse(kValid), "x.json");
  ASSERT_TRUE(c.ok());
  ConfigOverrides o;
  o.dp = 8;
  o.zero_stage = 1;
  const Result<ModelConfig> r = ApplyOverrides(*c, o, "x.json");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(OptimizerStateShards(*r), 8);
  ConfigOverrides bad;
  bad.zero_stage = 4;
  EXPECT_EQ(ApplyOverrides(*c, bad, "x.json").status().message(),
            "x.json with --zero-stage 4: zero_stage: expected 0, 1, 2 or 3 (1: the optimizer state "
            "sharded over dp; 2: the gradients too; 3: the weights too), got 4");
  ConfigOverrides hsdp;
  hsdp.dp = 8;
  hsdp.zero_stage = 3;
  hsdp.dp_shard = 3;
  EXPECT_EQ(ApplyOverrides(*c, hsdp, "x.json").status().message(),
            "x.json with --dp 8, --zero-stage 3, --dp-shard 3: dp_shard: 3 does not divide dp 8 "
            "(HSDP shards inside groups of dp_shard ranks and replicates across dp / dp_shard)");
}

}  // namespace
}  // namespace ssdtrain::models

namespace ssdtrain::models {
namespace {

// Stage 1 stands for every stage between the first and the last
// (sim/stage_plans.h): only where they hold the same kinds of blocks.
TEST(ModelConfig, MiddleStagesMustHoldTheSameKindsOfBlocks) {
  ModelConfig t5;
  t5.family = "t5";
  t5.layers = 48;
  t5.encoder_layers = 24;
  // pp 4: stage 1 holds encoder blocks 12-23, stage 2 decoder blocks 24-35.
  EXPECT_EQ(PipelineStagesRefusal(t5, traces::Layout{.pp = 4}),
            "stage 2 (blocks 24-35) holds other blocks than stage 1 (blocks 12-23) (encoder or "
            "decoder, MoE or dense, windowed or full attention), which stands for every stage "
            "between the first and the last");
  EXPECT_EQ(PipelineStagesRefusal(t5, traces::Layout{.pp = 3}), "");  // one middle stage
  EXPECT_EQ(PipelineStagesRefusal(t5, traces::Layout{.pp = 2}), "");
  // Interleaved at any pp: the encoder's relative position bias and output
  // reach chunks past the next (a search that built such a trace failed).
  for (int64_t pp : {2, 3, 4}) {
    EXPECT_EQ(PipelineStagesRefusal(t5, traces::Layout{.pp = pp, .vp = 2})
                  .rfind("an encoder-decoder model does not interleave", 0),
              0u)
        << pp;
  }
  // A MoE model whose dense first layers reach past stage 0.
  ModelConfig moe;
  moe.family = "llama";
  moe.layers = 61;
  moe.experts = 8;
  moe.experts_per_token = 2;
  moe.first_dense_layers = 3;
  // DeepSeek-V3's split at pp 16, 3 | 4 x 14 | 2: the dense blocks on stage 0 alone.
  EXPECT_EQ(PipelineStagesRefusal(
                moe, traces::Layout{.pp = 16, .pp_first_layers = 3, .pp_last_layers = 2}),
            "");
  EXPECT_NE(PipelineStagesRefusal(
                moe, traces::Layout{.pp = 16, .pp_first_layers = 1, .pp_last_layers = 4})
                .find("stage 2 (blocks 5-8) holds other blocks than stage 1 (blocks 1-4)"),
            std::string::npos);
  // Alternating windows over middle stages of an odd block count.
  ModelConfig windows;
  windows.family = "llama";
  windows.layers = 12;
  windows.seq_len = 8192;
  windows.sliding_window = 1024;
  windows.sliding_window_period = 2;
  EXPECT_NE(PipelineStagesRefusal(windows, traces::Layout{.pp = 4}), "");  // 3 blocks a stage
  EXPECT_EQ(PipelineStagesRefusal(windows, traces::Layout{.pp = 6}), "");  // 2 blocks a stage
  // Interleaved over each stage's chunks: pp 4 vp 3 of 1 block each, stage 1
  // blocks 1, 5, 9 (full attention), stage 2 blocks 2, 6, 10 (windowed).
  EXPECT_EQ(PipelineStagesRefusal(windows, traces::Layout{.pp = 4, .vp = 3}),
            "stage 2 (blocks 2-2, 6-6, 10-10) holds other blocks than stage 1 (blocks 1-1, 5-5, "
            "9-9) (encoder or decoder, MoE or dense, windowed or full attention), which stands "
            "for every stage between the first and the last");
  EXPECT_EQ(PipelineStagesRefusal(windows, traces::Layout{.pp = 3, .vp = 2}), "");
}

}  // namespace
}  // namespace ssdtrain::models

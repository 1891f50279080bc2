// Every shipped config in configs/models/ loads, traces (every pipeline stage) and
// validates.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> ConfigFiles() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(ConfiguredSourceDir()) / "configs/models")) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ConfigFiles, EveryShippedConfigLoadsTracesEveryStageAndValidates) {
  const std::vector<fs::path> files = ConfigFiles();
  // 4 GPT, BERT-large, 2 T5, 3 Llama (2-7B, 3-8B, 3.1-405B), 9 SSDTrain paper models, tiny and
  // small GPT, Mixtral-8x7B and tiny-moe, 10 Megatron-LM SC21 Table 1 models
  // (configs/published/megatron-sc21-table1.json), 3 NeMo GPT-3 models
  // (configs/published/nemo-24.07-dgx-h100.json), 2 Megatron-LM MLSys 2023 models
  // (configs/published/megatron-mlsys23-table5.json).
  EXPECT_EQ(files.size(), 41u);
  for (const fs::path& path : files) {
    SCOPED_TRACE(path.string());
    const Result<ModelConfig> c = LoadModelConfig(path.string());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (int64_t stage = 0; stage < c->pp; ++stage) {
      const Result<traces::Trace> tr = BuildTrace(*c, stage);
      ASSERT_TRUE(tr.ok()) << tr.status().ToString();
      const Status v = traces::Validate(*tr, path.string());
      EXPECT_TRUE(v.ok()) << v.ToString();
      EXPECT_EQ(tr->header.model, c->name);
    }
  }
}

TEST(ConfigFiles, ShipsTheRequiredModels) {
  for (const char* name : {"gpt-1.3b",
                           "gpt-6.7b",
                           "gpt-13b",
                           "gpt-175b",
                           "bert-large",
                           "t5-large",
                           "t5-11b",
                           "llama-2-7b",
                           "llama-3-8b",
                           "tiny-gpt",
                           "mixtral-8x7b",
                           "tiny-moe",
                           "small-gpt",
                           "ssdtrain-gpt-h8192-l4",
                           "ssdtrain-gpt-h12288-l3",
                           "ssdtrain-gpt-h16384-l2",
                           "ssdtrain-bert-h8192-l4",
                           "ssdtrain-bert-h12288-l3",
                           "ssdtrain-bert-h16384-l2",
                           "ssdtrain-t5-h8192-l4",
                           "ssdtrain-t5-h12288-l3",
                           "ssdtrain-t5-h16384-l2"}) {
    const fs::path p =
        fs::path(ConfiguredSourceDir()) / "configs/models" / (std::string(name) + ".json");
    EXPECT_TRUE(fs::exists(p)) << p;
  }
}

// Llama 3.1 405B (the search-time benchmark's model, bench/sim_bench.cc): its
// published 405 B parameters within 0.5%.
TEST(ConfigFiles, Llama405bHasItsPublishedParameterCount) {
  const Result<ModelConfig> c =
      LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/llama-3.1-405b.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Result<int64_t> params = ParameterCount(*c);
  ASSERT_TRUE(params.ok()) << params.status().ToString();
  EXPECT_NEAR(static_cast<double>(*params), 405e9, 0.005 * 405e9);
}

// The Llamas of torchtitan's published FSDP runs (scripts/published.sh): their
// published sizes within 0.5% (Llama 2: 13.0 B and 69.0 B, Touvron et al.
// 2023, and their Hugging Face model cards; Llama 3 70B: 70.6 B, its model
// card).
TEST(ConfigFiles, TorchtitanLlamasHaveTheirPublishedParameterCounts) {
  for (const auto& [name, published] :
       {std::pair{"llama-2-13b", 13.0e9}, std::pair{"llama-2-70b", 69.0e9},
        std::pair{"llama-3-70b", 70.6e9}}) {
    SCOPED_TRACE(name);
    const Result<ModelConfig> c =
        LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/" + name + ".json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const Result<int64_t> params = ParameterCount(*c);
    ASSERT_TRUE(params.ok()) << params.status().ToString();
    EXPECT_NEAR(static_cast<double>(*params), published, 0.005 * published);
  }
}

TEST(ConfigFiles, SmallGptHasFourToEightTimesTinyGptsCompute) {
  auto flops = [](const char* name) {
    const Result<ModelConfig> c =
        LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/" + name + ".json");
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    const Result<traces::Trace> tr = BuildTrace(*c, 0);
    EXPECT_TRUE(tr.ok());
    double total = 0;
    for (const traces::Op& op : tr->ops) total += static_cast<double>(op.flops);
    return total;
  };
  // tiny: 4 blocks of (24·4·256·256² + 4·4·256²·256) ≈ 1.9 GFLOP forward; small:
  // 6 blocks at h 512 ≈ 7 GFLOP each, plus a 2× larger vocabulary: ≈ 5.4×.
  const double ratio = flops("small-gpt") / flops("tiny-gpt");
  EXPECT_GE(ratio, 4.0);
  EXPECT_LE(ratio, 8.0);
}

TEST(ConfigFiles, SsdtrainT5ModelsSplitLayersAsThePaperSays) {
  // arXiv 2408.10013 v3 §IV-A: a T5 of L layers has floor(L/2) decoder layers and
  // the rest in the encoder: 4 -> 2 + 2, 3 -> 2 + 1, 2 -> 1 + 1. Heads of 128.
  for (const auto& [name, layers, encoder] :
       {std::tuple{"ssdtrain-t5-h8192-l4", 4, 2}, std::tuple{"ssdtrain-t5-h12288-l3", 3, 2},
        std::tuple{"ssdtrain-t5-h16384-l2", 2, 1}}) {
    const Result<ModelConfig> c =
        LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/" + name + ".json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->layers, layers) << name;
    EXPECT_EQ(c->encoder_layers, encoder) << name;
    EXPECT_EQ(HeadDim(*c), 128) << name;
  }
}

// The paper's setup (§IV-A): pure FP16 (no fp32 master weights) and SGD, to fit 40 GB.
TEST(ConfigFiles, SsdtrainModelsRunPureFp16Sgd) {
  for (const char* family : {"gpt", "bert", "t5"}) {
    for (const char* size : {"h8192-l4", "h12288-l3", "h16384-l2"}) {
      const std::string name = std::string("ssdtrain-") + family + "-" + size;
      const Result<ModelConfig> c =
          LoadModelConfig(std::string(ConfiguredSourceDir()) + "/configs/models/" + name + ".json");
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      EXPECT_EQ(c->precision, "pure") << name;
      EXPECT_EQ(c->optimizer, "sgd") << name;
      EXPECT_EQ(c->attention, "flash") << name;
      EXPECT_EQ(c->tp, 2) << name;
      EXPECT_EQ(c->seq_len, 1024) << name;
    }
  }
}

}  // namespace
}  // namespace ssdtrain::models

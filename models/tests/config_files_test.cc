// Every shipped config in configs/models/ loads, traces (every pipeline stage) and
// validates.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "models/build_trace.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> ConfigFiles() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(SSDTRAIN_SOURCE_DIR) / "configs/models")) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ConfigFiles, EveryShippedConfigLoadsTracesEveryStageAndValidates) {
  const std::vector<fs::path> files = ConfigFiles();
  // 4 GPT, BERT-large, 2 T5, 2 Llama, 9 SSDTrain paper models, tiny and small GPT.
  EXPECT_EQ(files.size(), 20u);
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
        fs::path(SSDTRAIN_SOURCE_DIR) / "configs/models" / (std::string(name) + ".json");
    EXPECT_TRUE(fs::exists(p)) << p;
  }
}

TEST(ConfigFiles, SmallGptHasFourToEightTimesTinyGptsCompute) {
  auto flops = [](const char* name) {
    const Result<ModelConfig> c =
        LoadModelConfig(std::string(SSDTRAIN_SOURCE_DIR) + "/configs/models/" + name + ".json");
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

TEST(ConfigFiles, SsdtrainT5ModelsCountEncoderAndDecoderBlocks) {
  // The paper's "4 layers" is Megatron's --num-layers 4 --decoder-num-layers 4.
  const Result<ModelConfig> c = LoadModelConfig(std::string(SSDTRAIN_SOURCE_DIR) +
                                                "/configs/models/ssdtrain-t5-h8192-l4.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->encoder_layers, 4);
  EXPECT_EQ(c->layers, 8);
  EXPECT_EQ(c->heads, 8192 / 128);
}

}  // namespace
}  // namespace ssdtrain::models

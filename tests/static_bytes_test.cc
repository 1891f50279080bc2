// The planner skips building the traces of a shape that is over the budget at
// another micro-batch (sim/detail/planner_layouts.h, BoundLayouts): its weights,
// optimizer state and weight gradients (StaticBytes) do not depend on the
// micro-batch. Held here for every model config (ours and the Hugging Face
// ones the tests read) under ZeRO 0 to 3 and, for a MoE model, expert
// parallelism, in bf16 and in FP8, each at 4 blocks (the property is per
// tensor, not per depth).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "app/model_provider.h"
#include "cmake/build_paths.h"
#include "models/model_config.h"
#include "sim/detail/planner_layouts.h"

namespace ssdtrain::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> ModelConfigs() {
  const std::string root = ConfiguredSourceDir();
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root + "/configs/models")) {
    if (e.path().extension() == ".json") out.push_back(e.path().string());
  }
  for (const auto& e : fs::directory_iterator(root + "/models/tests/hf")) {
    if (fs::exists(e.path() / "config.json")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(StaticBytes, DoNotDependOnTheMicroBatch) {
  int checked = 0;
  for (const std::string& path : ModelConfigs()) {
    SCOPED_TRACE(path);
    Result<models::ModelConfig> loaded = models::LoadModelConfig(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    models::ModelConfig c = *loaded;
    c.layers = std::min<int64_t>(c.layers, 4);
    if (c.family == "t5") c.encoder_layers = c.layers / 2;
    c.first_dense_layers = std::min<int64_t>(c.first_dense_layers, 1);
    const int before = checked;
    std::string refusal;
    // bf16 and FP8 (its weights' FP8 copies; where the config refuses FP8, bf16 alone).
    for (const char* fp8 : {"", "delayed"}) {
      c.fp8 = fp8;
      if (c.dtype == "fp32" && c.fp8 == "delayed") c.dtype = "bf16";
      const sim::TraceProvider provider = app::ModelTraceProvider(c, path);
      for (int64_t zero = 0; zero <= 3; ++zero) {
        for (int64_t ep : {int64_t{1}, int64_t{2}}) {
          if (ep > 1 && c.experts % ep != 0) continue;
          sim::TraceShape shape;
          shape.dp = 4;
          shape.zero_stage = zero;
          shape.ep = ep;
          shape.micro_batch = 1;
          Result<traces::Trace> one = provider(shape);
          if (!one.ok()) {  // a layout the config refuses (FP8 with ZeRO-3, say)
            refusal = one.status().ToString();
            continue;
          }
          shape.micro_batch = 2;
          Result<traces::Trace> two = provider(shape);
          ASSERT_TRUE(two.ok()) << two.status().ToString();
          EXPECT_EQ(sim::detail::StaticBytes(*one), sim::detail::StaticBytes(*two))
              << "ZeRO-" << zero << " ep " << ep;
          ++checked;
        }
      }
    }
    EXPECT_GE(checked - before, 3) << refusal;  // ZeRO 0-3 at least, but for one refusal
  }
  EXPECT_GT(checked, 400);
}

}  // namespace
}  // namespace ssdtrain::testing

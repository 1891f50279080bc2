// Sliding-window attention and tied output layers (ModelConfig::sliding_window,
// tied_output): Mistral-7B and Qwen2.5-0.5B read from their genuine config.json
// files with their published parameter counts, a window's attention FLOPs per
// layer where windows alternate, saved bytes a window does not change, and the
// fields refused with their names.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/hf_config.h"
#include "models/tests/trace_stats.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

std::string HfDir(const std::string& model) {
  return std::string(ConfiguredSourceDir()) + "/models/tests/hf/" + model;
}

ModelConfig Load(const std::string& path, HfReport* report = nullptr) {
  const Result<ModelConfig> c = LoadModelConfig(path, report);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

int64_t Params(const ModelConfig& c) {
  const Result<int64_t> p = ParameterCount(c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : 0;
}

traces::Trace Build(const ModelConfig& c) {
  const Result<traces::Trace> t = BuildTrace(c);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return traces::Trace{};
  EXPECT_TRUE(traces::Validate(*t, c.name).ok());
  return *t;
}

// The forward and backward flash-attention FLOPs of one layer (the kAttention ops).
struct AttentionFlops {
  int64_t forward = 0, backward = 0;
};
AttentionFlops FlashFlops(const traces::Trace& t, int layer) {
  AttentionFlops f;
  for (const traces::Op& op : t.ops) {
    if (op.layer != layer || op.kind != traces::OpKind::kAttention) continue;
    (op.phase == traces::Phase::kForward ? f.forward : f.backward) += op.flops;
  }
  return f;
}

// A window's FLOPs, closed form: the full-attention count (all s² pairs: the trace
// does not halve for causal masking) times the window's (query, key) pairs over
// the causal ones, (w·s − w(w−1)/2) / (s(s+1)/2).
int64_t WindowedClosedForm(int64_t full, int64_t s, int64_t w) {
  const __int128 pairs = static_cast<__int128>(w) * s - static_cast<__int128>(w) * (w - 1) / 2;
  const __int128 causal = static_cast<__int128>(s) * (s + 1) / 2;
  return static_cast<int64_t>(full * pairs / causal);
}

bool Contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const std::string& l : lines) {
    if (l.find(part) != std::string::npos) return true;
  }
  return false;
}

// Mistral-7B-v0.1: 7,241,732,096 (the Hugging Face hub's count of its weights,
// "7.24B params"): 2 x 32000 x 4096 untied + 32 x (4096² x 2 + 2 x 4096 x 1024 +
// 3 x 4096 x 14336 + 2 x 4096) + 4096. Its window of 4096 covers every layer and
// masks nothing at the default seq_len 4096 (min(max_position_embeddings, 4096)).
TEST(SlidingWindow, Mistral7BReadsItsWindowOnEveryLayerWithItsPublishedCount) {
  HfReport report;
  const ModelConfig c = Load(HfDir("mistral-7b-v0.1"), &report);
  EXPECT_EQ(Params(c), 7241732096);
  EXPECT_LT(std::abs(static_cast<double>(Params(c)) - 7.24e9), 0.005 * 7.24e9);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.sliding_window_period, 1);
  EXPECT_EQ(c.sliding_window_first_layer, 0);
  EXPECT_FALSE(c.tied_output);
  EXPECT_EQ(c.seq_len, 4096);
  EXPECT_EQ(AttentionWindow(c, 0), 0);  // the window masks nothing at seq_len 4096
  EXPECT_TRUE(Contains(report.assumed, "sliding_window 4096 on every layer"));
  ModelConfig longer = c;
  longer.seq_len = 16384;
  for (int64_t l : {0, 17, 31}) EXPECT_EQ(AttentionWindow(longer, l), 4096) << l;
}

// Mistral's shapes cut to two layers, flash, at a sequence four windows long: each
// layer's flash FLOPs are the full count scaled by the window's pairs; the saved
// bytes are those of full attention (flash saves q, k, v, ctx and lse either way);
// standard attention computes and saves the full scores, window or not.
TEST(SlidingWindow, AWindowScalesFlashFlopsAndLeavesSavedBytesAlone) {
  ModelConfig c = Load(HfDir("mistral-7b-v0.1"));
  c.layers = 2;
  c.seq_len = 2048;
  c.sliding_window = 512;
  c.attention = "flash";
  ModelConfig full = c;
  full.sliding_window = 0;
  const traces::Trace windowed = Build(c), whole = Build(full);
  for (int layer : {0, 1}) {
    SCOPED_TRACE(layer);
    const AttentionFlops w = FlashFlops(windowed, layer), f = FlashFlops(whole, layer);
    ASSERT_GT(f.forward, 0);
    EXPECT_EQ(w.forward, WindowedClosedForm(f.forward, 2048, 512));
    EXPECT_EQ(w.backward, WindowedClosedForm(f.backward, 2048, 512));
    // (512·2048 − 512·511/2) / (2048·2049/2) = 917,760 / 2,098,176: 43.7% of the pairs.
    EXPECT_NEAR(static_cast<double>(w.forward) / static_cast<double>(f.forward), 0.437408, 1e-6);
    EXPECT_EQ(testing::StatsOf(windowed, layer).saved_bytes,
              testing::StatsOf(whole, layer).saved_bytes);
  }
  c.attention = full.attention = "standard";
  const traces::Trace masked = Build(c), unmasked = Build(full);
  for (int layer : {0, 1}) {
    EXPECT_EQ(testing::StatsOf(masked, layer).forward_all_flops,
              testing::StatsOf(unmasked, layer).forward_all_flops);
    EXPECT_EQ(testing::StatsOf(masked, layer).saved_bytes,
              testing::StatsOf(unmasked, layer).saved_bytes);
  }
}

// Gemma 2 windows every other block (0, 2, ...): at seq_len 8192 past its window of
// 4096, those layers' flash FLOPs shrink and the others' stay the full count.
TEST(SlidingWindow, Gemma2WindowsAlternateLayers) {
  ModelConfig c = Load(HfDir("gemma-2-9b"));
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.sliding_window_period, 2);
  c.layers = 4;
  c.seq_len = 8192;
  c.attention = "flash";
  ModelConfig full = c;
  full.sliding_window = 0;
  full.sliding_window_period = 1;
  const traces::Trace windowed = Build(c), whole = Build(full);
  for (int layer = 0; layer < 4; ++layer) {
    SCOPED_TRACE(layer);
    EXPECT_EQ(AttentionWindow(c, layer), layer % 2 == 0 ? 4096 : 0);
    const int64_t f = FlashFlops(whole, layer).forward;
    EXPECT_EQ(FlashFlops(windowed, layer).forward,
              layer % 2 == 0 ? WindowedClosedForm(f, 8192, 4096) : f);
  }
}

// Qwen2 windows the layers from max_window_layers on, and only where
// use_sliding_window is true.
TEST(SlidingWindow, Qwen2WindowsTheLayersFromMaxWindowLayers) {
  const nlohmann::json base = {{"model_type", "qwen2"},     {"hidden_size", 256},
                               {"num_hidden_layers", 4},    {"num_attention_heads", 4},
                               {"num_key_value_heads", 2},  {"intermediate_size", 512},
                               {"vocab_size", 1024},        {"max_position_embeddings", 4096},
                               {"sliding_window", 1024},    {"max_window_layers", 2},
                               {"use_sliding_window", true}};
  const Result<ModelConfig> c = ModelConfigFromHfJson(base, "q/config.json", "q", nullptr);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->sliding_window_first_layer, 2);
  for (int l = 0; l < 4; ++l) EXPECT_EQ(AttentionWindow(*c, l), l >= 2 ? 1024 : 0) << l;
  nlohmann::json off = base;
  off["use_sliding_window"] = false;
  const Result<ModelConfig> unused = ModelConfigFromHfJson(off, "q/config.json", "q", nullptr);
  ASSERT_TRUE(unused.ok()) << unused.status().ToString();
  EXPECT_EQ(unused->sliding_window, 0);
  nlohmann::json past = base;
  past["max_window_layers"] = 4;  // no layer at or past it
  const Result<ModelConfig> none = ModelConfigFromHfJson(past, "q/config.json", "q", nullptr);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->sliding_window, 0);
}

// Qwen2.5-0.5B: 494,032,768 (the Hugging Face hub's count of its weights, "494M
// params"; its model card rounds to "Number of Parameters: 0.49B"): one
// 151936 x 896 table serves as embeddings and output layer, + 24 x (896² x 2 + 2 x
// 896 x 128 + 1152 q/k/v biases + 3 x 896 x 4864 + 2 x 896) + 896. Its window is
// unused (use_sliding_window false).
TEST(TiedOutput, Qwen25HalfBHasOneWordTableAndItsPublishedCount) {
  const ModelConfig c = Load(HfDir("qwen2.5-0.5b"));
  EXPECT_TRUE(c.tied_output);
  EXPECT_TRUE(TiedOutput(c));
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(Params(c), 494032768);
  EXPECT_LT(std::abs(static_cast<double>(Params(c)) - 494e6), 0.005 * 494e6);
  ModelConfig untied = c;
  untied.tied_output = false;
  EXPECT_EQ(Params(untied), 494032768 + 151936 * 896);  // a second table
  // The tied table: one weight of [vocab, hidden], read by the embedding and by the
  // logits. Its gradient is the logits' part, then the running sum that the
  // embedding's backward adds to it ("<weight>.grad+1", TraceBuilder::WeightGrad).
  ModelConfig small = c;
  small.layers = 2;
  small.seq_len = 256;
  const traces::Trace t = Build(small);
  std::vector<std::string> tables, table_grads;
  for (const traces::Tensor& x : t.tensors) {
    const bool table_shape = x.shape == std::vector<int64_t>{151936, 896};
    if (!table_shape || x.alias_of) continue;
    if (x.kind == traces::TensorKind::kWeight) tables.push_back(x.name);
    if (x.kind == traces::TensorKind::kGradient) table_grads.push_back(x.name);
  }
  ASSERT_EQ(tables.size(), 1u);
  EXPECT_EQ(table_grads, (std::vector<std::string>{tables[0] + ".grad", tables[0] + ".grad+1"}));
}

TEST(SlidingWindow, FieldsAreCheckedAndWrittenBack) {
  ModelConfig c = Load(HfDir("mistral-7b-v0.1"));
  c.sliding_window_period = 3;
  c.sliding_window_first_layer = 1;
  const Result<ModelConfig> back = ModelConfigFromJson(ToJson(c), "m.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->sliding_window, 4096);
  EXPECT_EQ(back->sliding_window_period, 3);
  EXPECT_EQ(back->sliding_window_first_layer, 1);
  ModelConfig q = Load(HfDir("qwen2.5-0.5b"));
  const Result<ModelConfig> tied = ModelConfigFromJson(ToJson(q), "q.json");
  ASSERT_TRUE(tied.ok()) << tied.status().ToString();
  EXPECT_TRUE(tied->tied_output);

  auto message = [](const ModelConfig& m) {
    const Status s = ValidateConfig(m, "m.json");
    return s.ok() ? std::string("ok") : s.message();
  };
  ModelConfig bad = c;
  bad.sliding_window_period = 0;
  EXPECT_EQ(message(bad),
            "m.json: sliding_window_period: expected >= 1 (1: every layer, 2: every "
            "other), got 0");
  bad = c;
  bad.sliding_window_first_layer = 32;
  EXPECT_EQ(message(bad),
            "m.json: sliding_window_first_layer: expected 0 <= first layer < layers (32), got 32");
  bad = c;
  bad.sliding_window = 0;
  EXPECT_EQ(message(bad),
            "m.json: sliding_window_period: is set but sliding_window is 0 (no window)");
  ModelConfig bert = Load(HfDir("bert-base-uncased"));
  bert.sliding_window = 64;
  EXPECT_EQ(message(bert),
            "m.json: sliding_window: is only modelled for causal decoders, not the "
            "bert family (its attention is bidirectional)");
  ModelConfig gpt = Load(HfDir("gpt2"));
  gpt.tied_output = true;
  EXPECT_EQ(message(gpt), "m.json: tied_output: is only modelled for the llama family, not gpt");
  // A ring that skips the steps outside a window is not built: cp needs the window
  // to cover the sequence.
  ModelConfig ring = Load(HfDir("mistral-7b-v0.1"));
  ring.attention = "flash";
  ring.seq_len = 8192;
  ring.cp = 2;
  EXPECT_EQ(message(ring),
            "m.json: cp: 2: context parallelism is not modelled with a sliding window (4096) "
            "shorter than the sequence (8192): a ring that skips the steps outside the window is "
            "not built");
  ring.seq_len = 4096;
  EXPECT_EQ(message(ring), "ok");
}

}  // namespace
}  // namespace ssdtrain::models

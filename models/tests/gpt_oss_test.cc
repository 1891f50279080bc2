// gpt-oss (model_type gpt_oss): gpt-oss-20b and gpt-oss-120b read from their
// genuine config.json files with their published parameter counts, the sinks,
// attention biases and alternate windows of their attention, the biases and
// clamped SwiGLU of their experts, and the fields refused with their names.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/build_trace.h"
#include "models/hf_config.h"
#include "models/moe_config.h"
#include "models/tests/hf_test_files.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

using testing::HfDir;
ModelConfig Load(const std::string& path) { return testing::LoadOk(path); }

double RelativeError(double got, double published) { return std::abs(got / published - 1.0); }

// One gpt-oss block by hand: two norms; q, k, v and o with their biases and the
// sinks; the router with its bias; `experts` experts of three matrices and two
// biases each.
int64_t BlockParams(const ModelConfig& c, int64_t experts) {
  const int64_t h = c.hidden, n = c.heads, kv = c.kv_heads, hd = c.head_dim;
  const int64_t f = c.expert_ffn_hidden;
  const int64_t attention = (h + 1) * n * hd + 2 * (h + 1) * kv * hd + n * hd * h + h + n;
  const int64_t router = c.experts * h + c.experts;
  return 2 * h + attention + router + experts * (3 * h * f + 2 * f + h);
}

struct Published {
  const char* model;
  int64_t layers, experts;
  double total, active;  // OpenAI's gpt-oss model card (arXiv 2508.10925), Table 1
};

// The card's active count leaves out the input embedding (a lookup) and keeps
// the unembedding, as DeepSeek's corrected count does (mla_test.cc).
TEST(GptOss, FilesHaveTheirPublishedParameterCounts) {
  for (const Published& p : {Published{"gpt-oss-20b", 24, 32, 20.91e9, 3.61e9},
                             Published{"gpt-oss-120b", 36, 128, 116.83e9, 5.13e9}}) {
    SCOPED_TRACE(p.model);
    const ModelConfig c = Load(HfDir(p.model));
    EXPECT_EQ(c.layers, p.layers);
    EXPECT_EQ(c.experts, p.experts);
    EXPECT_EQ(c.experts_per_token, 4);
    EXPECT_TRUE(c.attention_bias);
    EXPECT_TRUE(c.attention_sinks);
    EXPECT_TRUE(c.expert_bias);
    EXPECT_EQ(c.swiglu_limit, 7.0);
    EXPECT_EQ(c.sliding_window, 128);
    EXPECT_EQ(c.sliding_window_period, 2);
    EXPECT_EQ(c.sliding_window_first_layer, 0);
    const Result<int64_t> total = ParameterCount(c);
    ASSERT_TRUE(total.ok()) << total.status().ToString();
    const int64_t table = c.vocab * c.hidden;  // 201088 is a multiple of 128: no padding
    EXPECT_EQ(*total, 2 * table + c.hidden + c.layers * BlockParams(c, c.experts));
    EXPECT_LT(RelativeError(static_cast<double>(*total), p.total), 0.005) << *total;
    const Result<int64_t> active = ActiveParameterCount(c);
    ASSERT_TRUE(active.ok());
    EXPECT_EQ(*active, 2 * table + c.hidden + c.layers * BlockParams(c, c.experts_per_token));
    EXPECT_LT(RelativeError(static_cast<double>(*active - table), p.active), 0.005) << *active;
  }
}

ModelConfig Small() {
  ModelConfig c = Load(HfDir("gpt-oss-20b"));
  c.layers = 2;
  c.experts = 4;
  c.experts_per_token = 2;
  c.seq_len = 512;
  c.attention = "flash";
  return c;
}

int64_t Count(const traces::Trace& t, const std::string& suffix) {
  int64_t n = 0;
  for (const traces::Op& op : t.ops) n += op.name.ends_with(suffix) ? 1 : 0;
  return n;
}

// The sinks are a weight the attention kernel reads and whose gradient its
// backward writes; the experts' SwiGLU is the clamped op; the window is on layer 0.
TEST(GptOss, SinksClampAndWindowsAreInTheTrace) {
  for (const char* attention : {"flash", "standard"}) {
    SCOPED_TRACE(attention);
    ModelConfig c = Small();
    c.attention = attention;
    const Result<traces::Trace> t = BuildTrace(c);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_TRUE(traces::Validate(*t, c.name).ok());
    int sinks = 0;
    for (const traces::Tensor& x : t->tensors) {
      if (x.name != "L0.attn.sinks") continue;
      ++sinks;
      EXPECT_EQ(x.kind, traces::TensorKind::kWeight);
      EXPECT_EQ(x.shape, std::vector<int64_t>{c.heads});
      // The kernel (flash) or the softmax (standard) reads it in forward and
      // writes its gradient in backward; the optimizer's ops read it too.
      int attention_reads = 0;
      for (traces::OpId o : x.consumers) {
        const traces::Op& op = t->op(o);
        if (op.kind == traces::OpKind::kAttention || op.kind == traces::OpKind::kSoftmax) {
          ++attention_reads;
          if (op.phase == traces::Phase::kBackward) {
            EXPECT_GE(op.outputs.size(), 2u);
          }
        }
      }
      EXPECT_EQ(attention_reads, 2);
    }
    EXPECT_EQ(sinks, 1);
    // The experts grouped: one clamped SwiGLU over all their rows per layer.
    EXPECT_EQ(Count(*t, ".swiglu_clamped"), c.layers);
    EXPECT_EQ(Count(*t, ".swiglu_clamped.bwd"), c.layers);
    EXPECT_EQ(Count(*t, "experts.fc1.wgrad"), c.layers);
  }
  EXPECT_EQ(AttentionWindow(Small(), 0), 128);
  EXPECT_EQ(AttentionWindow(Small(), 1), 0);
}

using GptOssFields = testing::HfFileTest;

TEST_F(GptOssFields, FieldsAreRefusedWithTheirNames) {
  const std::string base =
      R"("model_type": "gpt_oss", "hidden_size": 256, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
         "intermediate_size": 256, "vocab_size": 1024, "max_position_embeddings": 4096,
         "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 128)";
  EXPECT_EQ(Message(base + R"(, "layer_types": ["sliding_attention", "full_attention",
      "sliding_attention", "sliding_attention"])"),
            File() +
                ": layer_types: sliding_attention other than every 2 layers from layer 0 "
                "(layer 3) is not modelled (supported: windows a fixed number of layers "
                "apart)");
  EXPECT_EQ(Message(base + R"(, "layer_types": ["sliding_attention"])"),
            File() + ": layer_types: 1 entries for num_hidden_layers 4");
  EXPECT_EQ(Message(base + R"(, "experts_per_token": 3)"),
            File() + ": experts_per_token: 3 differs from num_experts_per_tok 2");
  EXPECT_EQ(Message(base + R"(, "swiglu_limit": 0.0)"),
            File() + ": swiglu_limit: expected a positive clamp, got 0");
  Write(base);
  const Result<ModelConfig> ok = LoadModelConfig(File());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->sliding_window_period, 2);
}

}  // namespace
}  // namespace ssdtrain::models

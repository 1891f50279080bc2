// FP8 training (traces/fp8.h, models/detail/fp8.h): the saved bytes of a
// Llama block and of an MLA block under each Transformer Engine recipe
// against bf16 in closed form, the weights' FP8 copies, which GEMMs run in
// FP8, FP8 all-gathers under sequence parallelism, and the refusals.
#include "traces/fp8.h"

#include <gtest/gtest.h>

#include <string>

#include "models/build_trace.h"
#include "models/model_config.h"
#include "models/tests/hf_test_files.h"
#include "models/tests/trace_stats.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

constexpr const char* kRecipes[] = {"delayed", "current", "blockwise", "mxfp8"};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// An FP8 column-wise copy of `rows` features over `tokens`: one byte each,
// and the recipe's scales (traces/fp8.h) written out by hand: one fp32 per
// tensor (delayed, current), one fp32 per 128 tokens of each feature
// (blockwise), one byte per 32 (mxfp8).
int64_t ColumnCopy(const std::string& recipe, int64_t rows, int64_t tokens) {
  int64_t scales = 4;
  if (recipe == "blockwise") scales = rows * CeilDiv(tokens, 128) * 4;
  if (recipe == "mxfp8") scales = rows * CeilDiv(tokens, 32);
  return rows * tokens + scales;
}

// Llama-3-8B's block widths, two blocks, 1000 tokens (not a multiple of the
// scaling blocks), bf16, flash attention, tp 1.
ModelConfig Llama3() {
  ModelConfig c;
  c.name = "llama-3-8b-fp8-test";
  c.family = "llama";
  c.hidden = 4096;
  c.heads = 32;
  c.kv_heads = 8;
  c.layers = 2;
  c.ffn_hidden = 14336;
  c.vocab = 128256;
  c.seq_len = 1000;
  c.attention = "flash";
  c.dtype = "bf16";
  return c;
}

traces::Trace Build(const ModelConfig& c, int64_t stage = 0) {
  const Result<traces::Trace> t = BuildTrace(c, stage);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return traces::Trace{};
  const Status v = traces::Validate(*t, c.name);
  EXPECT_TRUE(v.ok()) << v.ToString();
  return *t;
}

ModelConfig WithFp8(ModelConfig c, const std::string& recipe) {
  c.fp8 = recipe;
  return c;
}

// Under FP8 the block saves, in place of three 16-bit tensors the weight
// gradients read (the two norm outputs the QKV and fc1 layers read, the
// SwiGLU output fc2 reads), their FP8 column-wise copies; the attention's
// output stays saved for the flash backward, and the projection reading it
// keeps it (save_original_input) except under delayed scaling, which saves
// an FP8 copy of it as well. Everything else is as in bf16.
TEST(Fp8, LlamaBlockSavesTheLinearInputsInFp8) {
  const ModelConfig bf16 = Llama3();
  const int64_t T = bf16.seq_len * bf16.micro_batch;
  const int64_t h = bf16.hidden, f = bf16.ffn_hidden, q = bf16.heads * HeadDim(bf16);
  const int64_t base = testing::StatsOf(Build(bf16), 1).saved_bytes;
  for (const std::string recipe : kRecipes) {
    const traces::Trace t = Build(WithFp8(bf16, recipe));
    int64_t expected =
        base - T * 2 * (2 * h + f) + 2 * ColumnCopy(recipe, h, T) + ColumnCopy(recipe, f, T);
    if (recipe == "delayed") expected += ColumnCopy(recipe, q, T);
    for (int layer = 0; layer < 2; ++layer) {
      EXPECT_EQ(testing::StatsOf(t, layer).saved_bytes, expected) << recipe << " layer " << layer;
    }
  }
  // At these widths FP8 saves 15% of the block's activation bytes (the SwiGLU input,
  // 2·f wide, and the attention stay 16-bit).
  const int64_t current = testing::StatsOf(Build(WithFp8(bf16, "current")), 1).saved_bytes;
  EXPECT_NEAR(static_cast<double>(current) / static_cast<double>(base), 0.85, 0.01);
}

// MLA under FP8: both down projections quantize the norm output themselves,
// each saving its own copy (two Transformer Engine Linear modules), and the
// up projections save FP8 copies of the normed latents; the MLP as Llama's.
TEST(Fp8, MlaBlockSavesTheLinearInputsInFp8) {
  ModelConfig bf16 = testing::LoadOk(testing::HfDir("deepseek-v3"));
  bf16.layers = 2;
  bf16.first_dense_layers = 2;
  bf16.mtp_layers = 0;
  bf16.seq_len = 1000;
  bf16.attention = "flash";
  bf16.dp = 1;
  const int64_t T = bf16.seq_len * bf16.micro_batch;
  const int64_t h = bf16.hidden, f = bf16.ffn_hidden;
  const int64_t rq = bf16.q_lora_rank, rkv = bf16.kv_lora_rank;
  const int64_t ctx = bf16.heads * bf16.v_head_dim;
  const int64_t base = testing::StatsOf(Build(bf16), 1).saved_bytes;
  for (const std::string recipe : kRecipes) {
    const traces::Trace t = Build(WithFp8(bf16, recipe));
    // 16-bit tensors gone: the first norm's output, the normed query and
    // key/value latents, the MLP's norm output and SwiGLU output.
    int64_t expected = base - T * 2 * (h + rq + rkv + h + f);
    expected += 2 * ColumnCopy(recipe, h, T) + ColumnCopy(recipe, rq, T) +
                ColumnCopy(recipe, rkv, T) + ColumnCopy(recipe, h, T) + ColumnCopy(recipe, f, T);
    if (recipe == "delayed") expected += ColumnCopy(recipe, ctx, T);
    EXPECT_EQ(testing::StatsOf(t, 1).saved_bytes, expected) << recipe;
  }
}

// Each block linear keeps a row-wise and a column-wise FP8 copy of its
// weight, resident all step (no producer), refreshed once a step by one
// optimizer-phase op per layer; the output layer, the embedding and the
// norms have none.
TEST(Fp8, WeightsHaveTwoFp8CopiesRefreshedByTheOptimizer) {
  const ModelConfig c = WithFp8(Llama3(), "delayed");
  const traces::Trace t = Build(c);
  const int64_t h = c.hidden, f = c.ffn_hidden, q = c.heads * HeadDim(c);
  const int64_t kv = KvHeads(c) * HeadDim(c);
  const int64_t linear = h * (q + 2 * kv) + q * h + h * 2 * f + f * h;  // per block
  for (int layer = 0; layer < 2; ++layer) {
    int64_t copies = 0, count = 0;
    for (const traces::Tensor& x : t.tensors) {
      if (x.layer != layer || x.dtype != traces::DType::kFp8 || x.alias_of ||
          x.producer != traces::kNoOp) {
        continue;
      }
      EXPECT_EQ(x.kind, traces::TensorKind::kWorkspace) << x.name;
      copies += x.bytes;
      ++count;
    }
    EXPECT_EQ(count, 8) << layer;                    // qkv, proj, fc1, fc2: two each
    EXPECT_EQ(copies, 2 * linear + 8 * 4) << layer;  // one fp32 scale per copy
  }
  int64_t refreshes = 0;
  for (const traces::Op& op : t.ops) {
    if (op.name.find("fp8_weight_quantize") == std::string::npos) continue;
    ++refreshes;
    EXPECT_EQ(op.phase, traces::Phase::kOptimizer);
    EXPECT_EQ(op.bytes_read, 2 * linear) << op.name;  // the bf16 weights once
    EXPECT_EQ(op.bytes_written, 2 * linear + 8 * 4) << op.name;
  }
  EXPECT_EQ(refreshes, 2);
}

// The block linears' forward, data-gradient and weight-gradient GEMMs run in
// FP8, nothing else does (attention, router, output layer), and FP8 moves no
// FLOPs: the GEMMs' total equals bf16's.
TEST(Fp8, OnlyTheBlockLinearsGemmsRunInFp8) {
  const traces::Trace bf16 = Build(Llama3());
  const traces::Trace fp8 = Build(WithFp8(Llama3(), "current"));
  auto gemm_flops = [](const traces::Trace& t, bool fp8_only) {
    int64_t flops = 0;
    for (const traces::Op& op : t.ops) {
      if (op.kind == traces::OpKind::kGemm && (!fp8_only || op.gemm->fp8)) flops += op.flops;
    }
    return flops;
  };
  EXPECT_EQ(gemm_flops(fp8, false), gemm_flops(bf16, false));
  int64_t fp8_gemms = 0;
  for (const traces::Op& op : fp8.ops) {
    if (op.kind != traces::OpKind::kGemm || !op.gemm->fp8) continue;
    ++fp8_gemms;
    EXPECT_NE(op.layer, traces::kNoLayer) << op.name;
    for (const traces::TensorId in : {op.inputs[0], op.inputs[1]}) {
      EXPECT_EQ(fp8.tensor(in).dtype, traces::DType::kFp8) << op.name;
    }
    // The weight gradients in the main gradients' dtype (fp32 for bf16:
    // models/README.md, "Gradient dtype"; TE's fuse_wgrad_accumulation writes
    // Megatron's main_grad), the rest in bf16.
    const traces::DType want =
        op.name.ends_with(".wgrad") ? traces::DType::kFp32 : traces::DType::kBf16;
    EXPECT_EQ(fp8.tensor(op.outputs[0]).dtype, want) << op.name;
  }
  EXPECT_EQ(fp8_gemms, 2 * 4 * 3);  // two blocks, four linears, three GEMMs each
  for (const traces::Op& op : fp8.ops) {
    if (op.name.find("lm_head") != std::string::npos && op.kind == traces::OpKind::kGemm) {
      EXPECT_FALSE(op.gemm->fp8) << op.name;
    }
  }
}

// With sequence parallelism, under the per-tensor recipes the column-parallel
// input is quantized before its all-gather, which moves FP8 with each shard's
// scale, and the FP8 shard is saved, gathered again and transposed in
// backward; blockwise and MXFP8 gather 16 bits and quantize after, the 16-bit
// shard saved, its re-gathered copy quantized column-wise in backward.
TEST(Fp8, SequenceParallelGathersFp8UnderPerTensorScaling) {
  ModelConfig c = Llama3();
  c.seq_len = 1024;
  c.tp = 4;
  c.sequence_parallel = true;
  const int64_t shard = c.seq_len / c.tp * c.hidden;  // elements of the QKV input's shard
  for (const std::string recipe : kRecipes) {
    SCOPED_TRACE(recipe);
    const bool per_tensor = recipe == "delayed" || recipe == "current";
    const traces::Trace t = Build(WithFp8(c, recipe));
    int64_t gathers = 0;
    for (const traces::Op& op : t.ops) {
      if (op.name != "L0.qkv.in_gathered.all_gather") continue;
      ++gathers;
      const traces::Tensor& in = t.tensor(op.inputs[0]);
      EXPECT_EQ(in.dtype, per_tensor ? traces::DType::kFp8 : traces::DType::kBf16);
      EXPECT_EQ(in.saved_for_backward, true);
      // Four shards' data and scales, or four 16-bit shards.
      EXPECT_EQ(op.bytes_written, per_tensor ? 4 * (shard + 4) : 4 * 2 * shard);
      if (!per_tensor) {
        const traces::Op& next = t.op(t.tensor(op.outputs[0]).consumers.front());
        EXPECT_EQ(next.name, "L0.qkv.in.quantize");
      }
    }
    EXPECT_EQ(gathers, 1);
    bool made_columnwise = false;
    for (const traces::Op& op : t.ops) {
      made_columnwise =
          made_columnwise || op.name == (per_tensor ? "L0.qkv.in_regathered.transpose"
                                                    : "L0.qkv.in_regathered.quantize_t");
    }
    EXPECT_TRUE(made_columnwise);
  }
  // MoE and MLA under tp and sp validate too (the builders' other linears).
  ModelConfig mla = testing::LoadOk(testing::HfDir("deepseek-v3"));
  mla.layers = 3;
  mla.first_dense_layers = 1;
  mla.experts = 8;
  mla.experts_per_token = 2;
  mla.seq_len = 1024;
  mla.attention = "flash";
  mla.tp = 2;
  mla.sequence_parallel = true;
  mla.pp = 1;
  mla.dp = 1;
  for (const std::string recipe : kRecipes) Build(WithFp8(mla, recipe));
}

TEST(Fp8, ConfigRefusesWhatIsNotModelled) {
  ModelConfig c = Llama3();
  c.fp8 = "e4m3";
  Status s = ValidateConfig(c, "x.json");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("x.json: fp8: unknown recipe \"e4m3\""), std::string::npos)
      << s.message();
  c.fp8 = "delayed";
  c.dtype = "fp32";
  s = ValidateConfig(c, "x.json");
  EXPECT_NE(s.message().find("fp8: FP8 training keeps"), std::string::npos) << s.message();
  c.dtype = "bf16";
  c.zero_stage = 3;
  c.dp = 8;
  s = ValidateConfig(c, "x.json");
  EXPECT_NE(s.message().find("fp8: FP8 with ZeRO-3 is not modelled"), std::string::npos)
      << s.message();
  // "off" reads as no FP8, and the config writes fp8 only where set.
  c.zero_stage = 0;
  ConfigOverrides off;
  off.fp8 = "off";
  const Result<ModelConfig> plain = ApplyOverrides(c, off, "x.json");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->fp8, "");
  EXPECT_FALSE(ToJson(*plain).contains("fp8"));
  EXPECT_EQ(ToJson(c)["fp8"], "delayed");
  const Result<ModelConfig> back = ModelConfigFromJson(ToJson(c), "x.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->fp8, "delayed");
}

}  // namespace
}  // namespace ssdtrain::models

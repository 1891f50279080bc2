// Saved activation bytes per block of the real Hugging Face files (models/tests/hf/)
// against Korthikanti et al.'s per-layer formula (arXiv 2205.05198, sbh·(34 + 5·a·s/h)
// for GPT in fp16 with standard attention and no tensor parallelism) and, where the
// block is not GPT's, its adjusted form in models/README.md ("Accounting").
//
// Korthikanti's formula applies as it stands to GPT-2 only (hf_config_test.cc checks
// it): GPT-NeoX, Falcon, Gemma, Gemma 2 and Phi-3 have no dropout (no 1-byte masks, no dropped
// probabilities: the a·s²·b term is 2, not 5, bytes per element), rotary positions
// (the rotated q and k are saved beside the fused QKV output), Falcon, Gemma and
// Phi-3 grouped-query attention (K and V are kv_heads·d wide, not h), Gemma an explicit
// head_dim (q and the projection input are heads·d wide, not h), Gemma and Phi-3 a
// gated MLP (fc1 out is 2·f wide, f its activation's output), and GPT-NeoX and Falcon
// a parallel block (fewer norm tensors), Gemma 2 two post-norms and soft-capped
// scores. The adjusted form counts each of these; with GPT's block it is the formula
// itself (checked below on GPT-2's file).
#include <gtest/gtest.h>

#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "models/tests/trace_stats.h"

namespace ssdtrain::models {
namespace {

std::string HfDir(const std::string& model) {
  return std::string(ConfiguredSourceDir()) + "/models/tests/hf/" + model;
}

// The block, as models/README.md's adjusted form counts it.
struct Block {
  // h-wide norm tensors: 4 sequential (two inputs, two outputs), 2 parallel, 3 NeoX's,
  // 6 Gemma 2's (the two post-norms' inputs besides; their outputs only feed the adds)
  int64_t norm_tensors = 4;
  bool rotary = false;     // rotated q and k saved
  int64_t mlp_widths = 2;  // f-wide tensors: 2 GELU (fc1 out, act out), 3 gated, 1 ReLU
  bool dropout = false;    // two uint8 branch masks, attention dropout (mask and output)
  bool softcap = false;    // Gemma 2: the soft-capped scores, read by the cap's backward
};

// bytes = s·b·(B·(N·h + (q + 2·kv) + rot·(q + kv) + q + m·f) + masks·h)
//       + a·s²·b·(B·(1 + softcap) + dropout·(B + 1)),
// q = heads·head_dim, kv = kv_heads·head_dim.
int64_t AdjustedKorthikanti(const ModelConfig& c, const Block& blk) {
  const int64_t bytes = c.dtype == "fp32" ? 4 : 2;
  const int64_t s = c.seq_len, b = c.micro_batch, h = c.hidden, a = c.heads;
  const int64_t q = a * HeadDim(c), kv = KvHeads(c) * HeadDim(c), f = FfnHidden(c);
  const int64_t widths =
      blk.norm_tensors * h + (q + 2 * kv) + (blk.rotary ? q + kv : 0) + q + blk.mlp_widths * f;
  const int64_t masks = blk.dropout ? 2 * h : 0;
  const int64_t per_score = bytes * (blk.softcap ? 2 : 1) + (blk.dropout ? bytes + 1 : 0);
  return s * b * (bytes * widths + masks) + a * s * s * b * per_score;
}

// `model`'s real file (at its own seq_len, micro-batch 1, its dtype, standard
// attention): the adjusted form for `blk` equals `closed_form`, and every block saves
// exactly that.
void ExpectEveryBlockSaves(const std::string& model, const Block& blk, int64_t closed_form) {
  const Result<ModelConfig> c = LoadModelConfig(HfDir(model));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(AdjustedKorthikanti(*c, blk), closed_form);
  const Result<traces::Trace> t = BuildTrace(*c);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (int l = 0; l < c->layers; ++l) {
    EXPECT_EQ(testing::StatsOf(*t, l).saved_bytes, closed_form) << model << " layer " << l;
  }
}

Block Gpt() { return {.norm_tensors = 4, .rotary = false, .mlp_widths = 2, .dropout = true}; }

// With GPT's block the adjusted form is Korthikanti's sbh·(34 + 5·a·s/h):
// 1024 x 768 x (34 + 5 x 12 x 1024 / 768) = 89,653,248 at fp16.
TEST(HfSavedBytes, AdjustedFormIsKorthikantisForGpt2) {
  Result<ModelConfig> c = LoadModelConfig(HfDir("gpt2"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  c->dtype = "fp16";
  EXPECT_EQ(AdjustedKorthikanti(*c, Gpt()), 89653248);
}

// Pythia-6.9B (bf16, s 2048, h 4096, 32 heads, f 16384): a parallel block with a
// LayerNorm per branch (block input, two outputs), rotary, GELU, no dropout:
// 2048 x 2 x (3h + 3h + 2h + h + 2f) + 32 x 2048² x 2 = 2048 x 2 x 69632 + 268,435,456.
TEST(HfSavedBytes, PythiaSavesTheAdjustedFormPerBlock) {
  ExpectEveryBlockSaves("pythia-6.9b-deduped", {.norm_tensors = 3, .rotary = true},
                        2048LL * 2 * 69632 + 268435456);
}

// Falcon-7B (bf16, s 2048, h 4544, 71 heads of 64, one kv head, f 4h): one LayerNorm
// per parallel block, rotary, GELU, no dropout:
// 2048 x 2 x (2h + (h + 128) + (h + 64) + h + 8h) + 71 x 2048² x 2 = 838,336,512.
TEST(HfSavedBytes, Falcon7BSavesTheAdjustedFormPerBlock) {
  ExpectEveryBlockSaves("falcon-7b", {.norm_tensors = 2, .rotary = true}, 838336512);
}

// Gemma-7B (bf16, s 4096, h 3072, 16 heads of 256, f 24576): sequential RMSNorms,
// rotary, q and kv 4096 wide (16 x 256, not h), GeGLU (three f-wide tensors), no
// dropout: 4096 x 2 x (4h + 3 x 4096 + 2 x 4096 + 4096 + 3f) + 16 x 4096² x 2.
TEST(HfSavedBytes, Gemma7BSavesTheAdjustedFormPerBlock) {
  ExpectEveryBlockSaves("gemma-7b", {.norm_tensors = 4, .rotary = true, .mlp_widths = 3},
                        4096LL * 2 * (4 * 3072 + 6 * 4096 + 3 * 24576) + 16LL * 4096 * 4096 * 2);
}

// Phi-3.5-mini (bf16, s 4096, h 3072, 32 heads of 96, 32 kv heads, f 8192): Llama's
// block (sequential RMSNorms, rotary, SwiGLU, no dropout):
// 4096 x 2 x (4h + 3h + 2h + h + 3f) + 32 x 4096² x 2.
TEST(HfSavedBytes, Phi35MiniSavesTheAdjustedFormPerBlock) {
  ExpectEveryBlockSaves("phi-3.5-mini-instruct",
                        {.norm_tensors = 4, .rotary = true, .mlp_widths = 3},
                        4096LL * 2 * (10 * 3072 + 3 * 8192) + 32LL * 4096 * 4096 * 2);
}

// Gemma-2-9B (bf16, s 4096, h 3584, 16 heads of 256, 8 kv heads, f 14336): Gemma's
// block with two post-norms (their inputs, the projection's and fc2's outputs, saved)
// and the soft-capped scores saved beside the probabilities:
// 4096 x 2 x (6h + (4096 + 2 x 2048) + (4096 + 2048) + 4096 + 3f) + 16 x 4096² x 2 x 2.
TEST(HfSavedBytes, Gemma2NineBSavesTheAdjustedFormPerBlock) {
  ExpectEveryBlockSaves("gemma-2-9b",
                        {.norm_tensors = 6, .rotary = true, .mlp_widths = 3, .softcap = true},
                        1753219072);
}

}  // namespace
}  // namespace ssdtrain::models

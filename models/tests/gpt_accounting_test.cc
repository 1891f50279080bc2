// Per-block saved activation bytes and FLOPs of GPT against the closed forms of
// Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
// Models" (arXiv 2205.05198): fp16 activations, uint8 dropout masks.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <sstream>

#include "models/tests/test_configs.h"
#include "models/tests/trace_stats.h"

namespace ssdtrain::models {
namespace {

using testing::Gpt;
using testing::MustBuild;
using testing::StatsOf;

constexpr double kTolerance = 0.02;

struct Shape {
  int64_t b, s, h, a, t;
};
std::ostream& operator<<(std::ostream& os, const Shape& p) {
  return os << "b" << p.b << "_s" << p.s << "_h" << p.h << "_a" << p.a << "_t" << p.t;
}

// s·b·h·(10 + 24/t + 5·a·s/(h·t)); at t = 1 this is s·b·h·(34 + 5·a·s/h).
double SavedTp(const Shape& p) {
  const double sbh = double(p.s) * p.b * p.h;
  return sbh * (10.0 + 24.0 / p.t + 5.0 * p.a * p.s / (double(p.h) * p.t));
}
// s·b·h·(34/t + 5·a·s/(h·t)).
double SavedSp(const Shape& p) {
  const double sbh = double(p.s) * p.b * p.h;
  return sbh * (34.0 / p.t + 5.0 * p.a * p.s / (double(p.h) * p.t));
}
// Flash attention drops the 5·a·s/h term.
double SavedTpFlash(const Shape& p) { return double(p.s) * p.b * p.h * (10.0 + 24.0 / p.t); }
double SavedSpFlash(const Shape& p) { return double(p.s) * p.b * p.h * 34.0 / p.t; }
// (24·b·s·h² + 4·b·s²·h) / t: 6bsh² QKV, 2bs²h QKᵀ, 2bs²h attention·V, 2bsh²
// projection, 8bsh² fc1, 8bsh² fc2.
double LinearFlops(const Shape& p) { return 24.0 * p.b * p.s * double(p.h) * p.h / p.t; }
double AttentionFlops(const Shape& p) { return 4.0 * p.b * double(p.s) * p.s * p.h / p.t; }

void ExpectNear(double actual, double expected, const std::string& what) {
  EXPECT_LE(std::abs(actual - expected), kTolerance * expected)
      << what << ": got " << actual << ", expected " << expected << " (ratio " << actual / expected
      << ")";
}

class GptAccounting : public ::testing::TestWithParam<Shape> {};

TEST_P(GptAccounting, SavedBytesPerBlockMatchKorthikanti) {
  const Shape p = GetParam();
  const traces::Trace tr = MustBuild(Gpt(p.b, p.s, p.h, p.a, p.t));
  for (int l = 0; l < 3; ++l) {
    ExpectNear(StatsOf(tr, l).saved_bytes, SavedTp(p), "layer " + std::to_string(l));
  }
}

class GptSequenceParallel : public ::testing::TestWithParam<Shape> {};

TEST_P(GptSequenceParallel, SavedBytesAreAllDividedByT) {
  const Shape p = GetParam();
  const traces::Trace tr = MustBuild(Gpt(p.b, p.s, p.h, p.a, p.t, /*sp=*/true));
  for (int l = 0; l < 3; ++l) {
    ExpectNear(StatsOf(tr, l).saved_bytes, SavedSp(p), "layer " + std::to_string(l));
  }
}

TEST_P(GptAccounting, FlashAttentionDropsTheQuadraticTerm) {
  const Shape p = GetParam();
  for (bool sp : {false, true}) {
    if (sp && p.t == 1) continue;
    const traces::Trace tr = MustBuild(Gpt(p.b, p.s, p.h, p.a, p.t, sp, "flash"));
    // Plus the fp32 log-sum-exp, 4·a·s·b/t bytes: under 2% for these shapes.
    const double expected = sp ? SavedSpFlash(p) : SavedTpFlash(p);
    for (int l = 0; l < 3; ++l) {
      ExpectNear(StatsOf(tr, l).saved_bytes, expected,
                 "flash sp=" + std::to_string(sp) + " layer " + std::to_string(l));
    }
  }
}

TEST_P(GptAccounting, ForwardFlopsMatchAndBackwardIsTwiceForward) {
  const Shape p = GetParam();
  for (bool sp : {false, true}) {
    if (sp && p.t == 1) continue;
    const traces::Trace tr = MustBuild(Gpt(p.b, p.s, p.h, p.a, p.t, sp));
    const double forward = LinearFlops(p) + AttentionFlops(p);
    for (int l = 0; l < 3; ++l) {
      const testing::LayerStats st = StatsOf(tr, l);
      ExpectNear(st.forward_flops, forward, "forward layer " + std::to_string(l));
      ExpectNear(st.backward_flops, 2 * forward, "backward layer " + std::to_string(l));
      // Each gemm's data and weight gradients cost its forward FLOPs each, exactly.
      EXPECT_EQ(st.backward_flops, 2 * st.forward_flops);
    }
  }
}

TEST_P(GptAccounting, FlashBackwardAddsTheRecomputedScores) {
  const Shape p = GetParam();
  const traces::Trace tr = MustBuild(Gpt(p.b, p.s, p.h, p.a, p.t, false, "flash"));
  // Backward = 2 × 24bsh²/t for the linear layers + 2.5 × 4bs²h/t: the kernel
  // recomputes QKᵀ (5 s×s×d products per head against the forward's 2).
  const testing::LayerStats st = StatsOf(tr, 1);
  ExpectNear(st.forward_flops, LinearFlops(p) + AttentionFlops(p), "forward");
  ExpectNear(st.backward_flops, 2 * LinearFlops(p) + 2.5 * AttentionFlops(p), "backward");
}

std::string ShapeName(const ::testing::TestParamInfo<Shape>& info) {
  std::ostringstream os;
  os << info.param;
  return os.str();
}

// A parallel block (GPT-J, Phi-2): attention and MLP read one LayerNorm of the
// block input, so the second norm's input h and its output (fc1's input), 2·s·b·h
// bytes each in fp16, are no longer saved: exactly 4·s·b·h bytes fewer per block,
// s·b·h·(30 + 5·a·s/h) at t = 1. The gemms, and so their FLOPs, are the same.
TEST_P(GptAccounting, ParallelBlockSavesTheSecondNormsInputAndOutputLess) {
  const Shape p = GetParam();
  ModelConfig parallel = Gpt(p.b, p.s, p.h, p.a, p.t);
  parallel.parallel_block = true;
  const traces::Trace seq = MustBuild(Gpt(p.b, p.s, p.h, p.a, p.t));
  const traces::Trace par = MustBuild(parallel);
  const int64_t sbh = p.s * p.b * p.h;
  for (int l = 0; l < 3; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    EXPECT_EQ(StatsOf(seq, l).saved_bytes - StatsOf(par, l).saved_bytes, 4 * sbh);
    EXPECT_EQ(StatsOf(par, l).forward_flops, StatsOf(seq, l).forward_flops);
    EXPECT_EQ(StatsOf(par, l).backward_flops, StatsOf(seq, l).backward_flops);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GptAccounting,
                         ::testing::Values(Shape{1, 2048, 2048, 16, 1}, Shape{2, 512, 1024, 16, 1},
                                           Shape{4, 256, 768, 12, 1}, Shape{1, 2048, 4096, 32, 2},
                                           Shape{2, 1024, 2048, 16, 4}, Shape{1, 512, 1024, 16, 8}),
                         ShapeName);
INSTANTIATE_TEST_SUITE_P(Shapes, GptSequenceParallel,
                         ::testing::Values(Shape{1, 2048, 4096, 32, 2}, Shape{2, 1024, 2048, 16, 4},
                                           Shape{1, 512, 1024, 16, 8}),
                         ShapeName);

TEST(GptFlops, MemoryBoundOpsAddUnderTwoPercentOfForwardFlops) {
  // h/a = 128 as in GPT-3: elementwise, norm, softmax and dropout ops add about
  // 7·a·s²·b + 60·s·b·h FLOPs, ~1% of 24bsh² + 4bs²h.
  const Shape p{2, 2048, 4096, 32, 1};
  const traces::Trace tr = MustBuild(Gpt(p.b, p.s, p.h, p.a, p.t));
  ExpectNear(StatsOf(tr, 1).forward_all_flops, LinearFlops(p) + AttentionFlops(p), "all ops");
}

TEST(GptFlops, GemmFlopsAreTwoMnkBatchAndRankLocal) {
  const traces::Trace tr = MustBuild(Gpt(2, 512, 1024, 16, 4));
  int gemms = 0;
  for (const traces::Op& op : tr.ops) {
    if (op.kind != traces::OpKind::kGemm) continue;
    ++gemms;
    ASSERT_TRUE(op.gemm.has_value()) << op.name;
    EXPECT_EQ(op.flops, 2 * op.gemm->m * op.gemm->n * op.gemm->k * op.gemm->batch) << op.name;
  }
  EXPECT_GT(gemms, 0);
  // The QKV gemm on one of 4 ranks: m = s·b = 1024 rows, n = 3h/t = 768, k = h = 1024.
  for (const traces::Op& op : tr.ops) {
    if (op.name == "L0.qkv") {
      EXPECT_EQ(*op.gemm, (traces::GemmDims{1024, 768, 1024, 1}));
    }
    // QKᵀ: batch b·a/t = 8 heads, s × s × (h/a = 64).
    if (op.name == "L0.attn.qk") {
      EXPECT_EQ(*op.gemm, (traces::GemmDims{512, 512, 64, 8}));
    }
  }
}

}  // namespace
}  // namespace ssdtrain::models

// GEMM efficiency by shape: the closed form of tile and wave quantization
// (sim/op_cost.h, GemmShapeEfficiency), its place in the roofline, and the
// hardware field it reads.
#include <gtest/gtest.h>

#include <string>

#include "cmake/build_paths.h"
#include "sim/hardware.h"
#include "sim/op_cost.h"

namespace ssdtrain::sim {
namespace {

using traces::GemmDims;

constexpr int kA100Sms = 108;

TEST(GemmShape, FullWavesOfWholeTilesLoseNothing) {
  // 108 tiles of 256 × 128: one full wave.
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({256, 128 * 108, 64, 1}, kA100Sms), 1.0);
  // 216 batched tiles: two full waves.
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({256, 128, 64, 216}, kA100Sms), 1.0);
}

TEST(GemmShape, ALastPartialWaveCostsAWholeOne) {
  // 109 tiles run in 2 waves of 108: 109 of 216 slots do work.
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({256, 128 * 109, 64, 1}, kA100Sms), 109.0 / 216.0);
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({256, 128, 64, 217}, kA100Sms), 217.0 / 324.0);
  // 8192³ (the A100's measured square product): 32 · 64 = 2048 tiles in 19 waves.
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({8192, 8192, 8192, 1}, kA100Sms), 2048.0 / 2052.0);
  // The weight gradient of a 2304 × 2304 projection (1.7B, tp 1): 9 · 18 = 162 tiles, 2 waves.
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({2304, 2304, 32768, 1}, kA100Sms), 162.0 / 216.0);
}

TEST(GemmShape, APartialTileAtTheEdgeCostsAWholeOne) {
  // One SM, so waves are tiles: 257 rows take two 256-row tiles (or three 128-row ones).
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({257, 128, 64, 1}, 1), 257.0 / 512.0);
}

TEST(GemmShape, TheTileTakesTheOrientationThatWastesLess) {
  // 128 × 256 is one 128 × 256 tile, or two half-empty 256 × 128 ones.
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({128, 256, 64, 1}, 1), 1.0);
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({256, 128, 64, 1}, 1), 1.0);
}

TEST(GemmShape, NoSmCountMeansNoShapeEffect) {
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({257, 128, 64, 1}, 0), 1.0);
  EXPECT_DOUBLE_EQ(GemmShapeEfficiency({0, 128, 64, 1}, kA100Sms), 1.0);
}

TEST(GemmShape, TheRooflineDividesTheFullWaveFigureByTheShapesShare) {
  HardwareOptions hw;
  hw.gpu.peak_tflops_fp16 = 100;
  hw.gpu.memory_GBps = 1000;
  traces::Op gemm;
  gemm.kind = traces::OpKind::kGemm;
  gemm.flops = 1'000'000'000;  // 10 µs at 100 TFLOP/s
  gemm.gemm = GemmDims{256, 128 * 109, 64, 1};
  EXPECT_EQ(OpCostModel(hw, 1, "fp16").OpTimeNs(gemm), 10'000);
  hw.gpu.sm_count = kA100Sms;  // 109 of 216 slots: 10 µs · 216 / 109
  EXPECT_EQ(OpCostModel(hw, 1, "fp16").OpTimeNs(gemm), 19'817);
  // A fused attention op has no GEMM dims of its own: the curve alone.
  gemm.kind = traces::OpKind::kAttention;
  EXPECT_EQ(OpCostModel(hw, 1, "fp16").OpTimeNs(gemm), 10'000);
}

TEST(GemmShape, SmCountIsOptionalAndNeverNegative) {
  auto hw = LoadHardware(std::string(ConfiguredSourceDir()) + "/configs/hardware/cpu-local.json");
  ASSERT_TRUE(hw.ok()) << hw.status().message();
  EXPECT_EQ(hw->gpu.sm_count, 0);
  auto a100 =
      LoadHardware(std::string(ConfiguredSourceDir()) + "/configs/hardware/dgx-a100-80gb.json");
  ASSERT_TRUE(a100.ok()) << a100.status().message();
  EXPECT_EQ(a100->gpu.sm_count, kA100Sms);
  nlohmann::json j = ToJson(*hw);
  j["gpu"]["sm_count"] = -1;
  auto bad = HardwareFromJson(j, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x.json: gpu.sm_count"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace ssdtrain::sim

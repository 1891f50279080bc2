// FP8 in the simulator: an FP8 GEMM (traces::GemmDims::fp8) at the preset's
// FP8 peak on its gemm_fp8 curve, MXFP8 at the MXFP8 peak, the measured
// tables kept apart, and the GPUs that cannot train in FP8 refused by name.
#include <gtest/gtest.h>

#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "sim/hardware.h"
#include "sim/op_cost.h"
#include "sim/simulate.h"
#include "traces/plan.h"

namespace ssdtrain::sim {
namespace {

std::string Config(const std::string& name) {
  return std::string(ConfiguredSourceDir()) + "/configs/hardware/" + name + ".json";
}

HardwareOptions Load(const std::string& name) {
  Result<HardwareOptions> hw = LoadHardware(Config(name));
  EXPECT_TRUE(hw.ok()) << hw.status().ToString();
  return hw.ok() ? *hw : HardwareOptions{};
}

traces::Op Gemm(bool fp8) {
  traces::Op op;
  op.kind = traces::OpKind::kGemm;
  op.flops = 2'000'000'000'000;  // 2 TFLOP: compute-bound
  op.gemm = traces::GemmDims{.m = 8192, .n = 8192, .k = 8192, .batch = 1, .fp8 = fp8};
  return op;
}

TEST(Fp8Cost, Fp8GemmsRunAtTheFp8PeakOnTheirOwnCurve) {
  HardwareOptions hw;
  hw.gpu.peak_tflops_fp16 = hw.gpu.peak_tflops_bf16 = 1000;
  hw.gpu.peak_tflops_fp8 = 2000;
  hw.gpu.peak_tflops_mxfp8 = 4000;
  hw.gpu.memory_GBps = 1000;
  hw.gpu.gemm_efficiency = {{1e9, 0.8}};
  hw.gpu.gemm_fp8_efficiency = {{1e9, 0.5}};
  // 2 TFLOP: 2.5 ms at 1000 TFLOP/s · 0.8; 2 ms at 2000 · 0.5; 1 ms at 4000 · 0.5.
  const OpCostModel bf16(hw, 1, "bf16");
  const OpCostModel delayed(hw, 1, "bf16", true, 1, 1, 1, "delayed");
  const OpCostModel mx(hw, 1, "bf16", true, 1, 1, 1, "mxfp8");
  EXPECT_EQ(bf16.OpTimeNs(Gemm(false)), 2'500'000);
  EXPECT_EQ(delayed.OpTimeNs(Gemm(false)), 2'500'000);  // a 16-bit GEMM stays one
  EXPECT_EQ(delayed.OpTimeNs(Gemm(true)), 2'000'000);
  EXPECT_EQ(mx.OpTimeNs(Gemm(true)), 1'000'000);
  // Without a gemm_fp8 curve the gemm curve applies: 2 / (2000 · 0.8) ms.
  hw.gpu.gemm_fp8_efficiency.clear();
  const OpCostModel plain(hw, 1, "bf16", true, 1, 1, 1, "current");
  EXPECT_EQ(plain.OpTimeNs(Gemm(true)), 1'250'000);
  // A measured FP8 GEMM answers for FP8 GEMMs only, a bf16 one for bf16 only.
  MeasuredOpTime m;
  m.kind = traces::OpKind::kGemm;
  m.gemm = traces::GemmDims{8192, 8192, 8192, 1};
  m.dtype = "fp8";
  m.ns = 777;
  hw.measured_op_times.push_back(m);
  const OpCostModel measured(hw, 1, "bf16", true, 1, 1, 1, "current");
  EXPECT_EQ(measured.OpTimeNs(Gemm(true)), 777);
  EXPECT_EQ(measured.OpTimeNs(Gemm(false)), 2'500'000);
}

// The Hopper presets' FP8 GEMM curve is 0.96 of the bf16 one: Transformer
// Engine's pre-quantized FP8 GEMMs at 1.92x bf16 against the 2x peak ratio
// (sim/README.md).
TEST(Fp8Cost, HopperPresetsRunFp8GemmsAt1_92TimesBf16) {
  const HardwareOptions h100 = Load("dgx-h100");
  const OpCostModel bf16(h100, 1, "bf16");
  const OpCostModel fp8(h100, 1, "bf16", true, 1, 1, 1, "delayed");
  const double ratio = static_cast<double>(bf16.OpTimeNs(Gemm(false))) /
                       static_cast<double>(fp8.OpTimeNs(Gemm(true)));
  EXPECT_NEAR(ratio, 1.92, 0.01);
}

TEST(Fp8Cost, GpusWithoutFp8AreRefusedByName) {
  const HardwareOptions a100 = Load("dgx-a100-80gb");
  EXPECT_TRUE(CheckPrecision(a100, "").ok());
  const Status s = CheckPrecision(a100, "delayed");
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("dgx-a100-80gb: gpu.peak_tflops.fp8: A100 SXM4 80GB has no FP8"),
            std::string::npos)
      << s.message();
  const HardwareOptions h100 = Load("dgx-h100");
  for (const char* recipe : {"delayed", "current", "blockwise"}) {
    EXPECT_TRUE(CheckPrecision(h100, recipe).ok()) << recipe;
  }
  const Status mx = CheckPrecision(h100, "mxfp8");
  EXPECT_NE(mx.message().find("dgx-h100: gpu.peak_tflops.mxfp8:"), std::string::npos)
      << mx.message();
  EXPECT_TRUE(CheckPrecision(Load("dgx-b200"), "mxfp8").ok());
  EXPECT_TRUE(CheckPrecision(Load("gb200-nvl72"), "mxfp8").ok());
  // A preset may not claim MXFP8 without FP8.
  nlohmann::json j = ToJson(a100);
  j["gpu"]["peak_tflops"]["mxfp8"] = 100;
  EXPECT_EQ(HardwareFromJson(j, "x.json").status().message(),
            "x.json: gpu.peak_tflops.mxfp8: needs fp8 too (a GPU with MXFP8 has FP8 tensor "
            "cores)");
}

// Simulate refuses an FP8 trace on an A100 and runs it on an H100, faster
// than the same model in bf16.
TEST(Fp8Cost, SimulateRefusesFp8OnAnA100AndSpeedsUpOnAnH100) {
  models::ModelConfig c;
  c.name = "llama-fp8-sim";
  c.family = "llama";
  c.hidden = 4096;
  c.heads = 32;
  c.kv_heads = 8;
  c.layers = 2;
  c.ffn_hidden = 14336;
  c.vocab = 32000;
  c.seq_len = 4096;
  c.attention = "flash";
  c.dtype = "bf16";
  const Result<traces::Trace> bf16 = models::BuildTrace(c);
  c.fp8 = "delayed";
  const Result<traces::Trace> fp8 = models::BuildTrace(c);
  ASSERT_TRUE(bf16.ok() && fp8.ok());
  const traces::Plan plan8 = traces::PlanTemplate(*fp8);
  const Result<Prediction> refused = Simulate(*fp8, plan8, Load("dgx-a100-80gb"));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("has no FP8 tensor cores"), std::string::npos);
  const HardwareOptions h100 = Load("dgx-h100");
  const Result<Prediction> p16 = Simulate(*bf16, traces::PlanTemplate(*bf16), h100);
  const Result<Prediction> p8 = Simulate(*fp8, plan8, h100);
  ASSERT_TRUE(p16.ok() && p8.ok());
  const double speedup = static_cast<double>(p16->metrics.step_time_ns) /
                         static_cast<double>(p8->metrics.step_time_ns);
  // The linears are most of the step; attention, norms, the output layer,
  // the optimizer and the casts are not faster (two blocks: 1.17x).
  EXPECT_GT(speedup, 1.1);
  EXPECT_LT(speedup, 1.92);
}

}  // namespace
}  // namespace ssdtrain::sim

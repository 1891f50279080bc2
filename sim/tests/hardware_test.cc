#include "sim/hardware.h"

#include <gtest/gtest.h>

#include <string>

#include "cmake/build_paths.h"
#include "sim/op_cost.h"

namespace ssdtrain::sim {
namespace {

std::string Config(const std::string& name) {
  return std::string(ConfiguredSourceDir()) + "/configs/hardware/" + name + ".json";
}

TEST(Hardware, EveryShippedConfigLoads) {
  for (const char* name :
       {"a100-pcie-ssdtrain-paper", "a100-pcie-40gb-ssdtrain-paper", "a100-pcie-40gb-4x-980pro",
        "h100-sxm-4x-gen5-nvme", "h100-sxm-8x-gen5-nvme", "h200-sxm-4x-gen5-nvme",
        "h200-sxm-8x-gen5-nvme", "dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200", "gb200-nvl72",
        "cpu-local"}) {
    auto hw = LoadHardware(Config(name));
    ASSERT_TRUE(hw.ok()) << hw.status().message();
    EXPECT_EQ(hw->name, name);
    // Round trip through ToJson.
    auto again = HardwareFromJson(ToJson(*hw), "roundtrip");
    ASSERT_TRUE(again.ok()) << again.status().message();
    EXPECT_EQ(ToJson(*again).dump(), ToJson(*hw).dump());
  }
}

TEST(Hardware, PaperSetupHasArraysOfFourAndThree) {
  auto hw = LoadHardware(Config("a100-pcie-ssdtrain-paper"));
  ASSERT_TRUE(hw.ok());
  EXPECT_EQ(ArrayFor(*hw, 0).drives, 4);
  EXPECT_EQ(ArrayFor(*hw, 1).drives, 3);
  EXPECT_EQ(SlowestArray(*hw), 1);
}

TEST(Hardware, ZeroBandwidthIsRejectedNamingFileAndField) {
  auto hw = LoadHardware(Config("a100-pcie-ssdtrain-paper"));
  ASSERT_TRUE(hw.ok());
  nlohmann::json j = ToJson(*hw);
  j["storage"]["drive"]["write_GBps"] = 0;
  auto bad = HardwareFromJson(j, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "x.json: storage.drive.write_GBps: must be > 0, got 0");
}

TEST(Hardware, IssueAheadDefaultsToOneAndMustBePositive) {
  auto hw = LoadHardware(Config("cpu-local"));
  ASSERT_TRUE(hw.ok());
  EXPECT_EQ(hw->gpu.issue_ahead_ops, 1);
  nlohmann::json j = ToJson(*hw);
  j["gpu"]["issue_ahead_ops"] = 3;
  auto three = HardwareFromJson(j, "x.json");
  ASSERT_TRUE(three.ok()) << three.status().message();
  EXPECT_EQ(three->gpu.issue_ahead_ops, 3);
  j["gpu"]["issue_ahead_ops"] = 0;
  auto bad = HardwareFromJson(j, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x.json: gpu.issue_ahead_ops"), std::string::npos)
      << bad.status().message();
}

TEST(Hardware, CalibratedRanksIsOptionalAndNeverNegative) {
  auto hw = LoadHardware(Config("cpu-local"));
  ASSERT_TRUE(hw.ok());
  EXPECT_EQ(hw->calibrated_ranks, 0);  // a shipped config: not calibrated
  EXPECT_FALSE(ToJson(*hw).contains("calibrated_ranks"));
  nlohmann::json j = ToJson(*hw);
  j["calibrated_ranks"] = 2;
  auto two = HardwareFromJson(j, "x.json");
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->calibrated_ranks, 2);
  EXPECT_EQ(ToJson(*two).at("calibrated_ranks"), 2);
  j["calibrated_ranks"] = -1;
  auto bad = HardwareFromJson(j, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x.json: calibrated_ranks"), std::string::npos)
      << bad.status().message();
}

TEST(Hardware, UnknownFieldsAndMissingSectionsAreErrors) {
  auto hw = LoadHardware(Config("cpu-local"));
  ASSERT_TRUE(hw.ok());
  nlohmann::json j = ToJson(*hw);
  j["gpu"]["memory_gib"] = 1;
  EXPECT_EQ(HardwareFromJson(j, "x.json").status().message(),
            "x.json: gpu.memory_gib: unknown field");
  j = ToJson(*hw);
  j.erase("storage");
  EXPECT_EQ(HardwareFromJson(j, "x.json").status().message(),
            "x.json: storage: missing (expected an object)");
}

TEST(Hardware, WrongTypesAndOutOfRangeValuesNameTheFieldAndWhatWasExpected) {
  auto hw = LoadHardware(Config("cpu-local"));
  ASSERT_TRUE(hw.ok());
  nlohmann::json j = ToJson(*hw);
  j["host_memory"]["GiB"] = "lots";
  EXPECT_EQ(HardwareFromJson(j, "x.json").status().message(),
            "x.json: host_memory.GiB: expected a number, got string");
  j = ToJson(*hw);
  j["host_memory"]["pinned_GiB"] = -1;
  EXPECT_EQ(HardwareFromJson(j, "x.json").status().message(),
            "x.json: host_memory.pinned_GiB: must be >= 0, got -1");
  j = ToJson(*hw);
  j["host_link"]["pcie_gen"] = 7;
  EXPECT_EQ(HardwareFromJson(j, "x.json").status().message(),
            "x.json: host_link.pcie_gen: must be <= 6, got 7");
  j = ToJson(*hw);
  j["gpu"]["efficiency"]["gemm"][0]["efficiency"] = 0;
  EXPECT_EQ(HardwareFromJson(j, "x.json").status().message(),
            "x.json: gpu.efficiency.gemm[0].efficiency: must be > 0, got 0");
  j = ToJson(*hw);
  j["storage"]["arrays"] = {1, 0};
  EXPECT_EQ(HardwareFromJson(j, "x.json").status().message(),
            "x.json: storage.arrays[1]: a drive count must be >= 1, got 0");
}

TEST(OpCost, RooflineAndMeasuredTable) {
  auto hw = LoadHardware(Config("cpu-local"));
  ASSERT_TRUE(hw.ok());
  traces::Op gemm;
  gemm.kind = traces::OpKind::kGemm;
  gemm.flops = 4'700'000'000;  // 4.7 GFLOP at 47 GFLOP/s, efficiency 1: 0.1 s + 2 µs
  gemm.gemm = traces::GemmDims{1000, 1000, 2350, 1};
  OpCostModel model(*hw, 1, "fp32");
  EXPECT_EQ(model.OpTimeNs(gemm), 100'000'000 + 2'000);
  MeasuredOpTime m;
  m.kind = traces::OpKind::kGemm;
  m.gemm = traces::GemmDims{1000, 1000, 2350, 1};
  m.ns = 12345;
  hw->measured_op_times.push_back(m);
  OpCostModel measured(*hw, 1, "fp32");
  // The measured duration replaces the roofline; the 2 µs per-op issue overhead stays on top.
  EXPECT_EQ(measured.OpTimeNs(gemm), 12345 + 2'000);
}

TEST(OpCost, LowIntensityGemmRunsAtTheMemoryCurvesBandwidth) {
  HardwareOptions hw;
  hw.gpu.peak_tflops_fp16 = 100;
  hw.gpu.memory_GBps = 1000;
  hw.gpu.memory_efficiency = {{1e9, 0.5}};
  traces::Op gemm;
  gemm.kind = traces::OpKind::kGemm;
  gemm.flops = 1'000'000'000;       // 10 µs at 100 TFLOP/s
  gemm.bytes_read = 1'000'000'000;  // 1 GB at 1000 GB/s · 0.5: 2 ms, which bounds it
  OpCostModel model(hw, 1, "fp16");
  EXPECT_EQ(model.OpTimeNs(gemm), 2'000'000);
}

TEST(Hardware, DgxPresetsLoadWithCurvesOfTheirOwn) {
  auto a100 = LoadHardware(Config("dgx-a100-80gb"));
  auto h100 = LoadHardware(Config("dgx-h100"));
  ASSERT_TRUE(a100.ok()) << a100.status().message();
  ASSERT_TRUE(h100.ok()) << h100.status().message();
  EXPECT_EQ(a100->gpus_per_node, 8);
  EXPECT_EQ(h100->gpus_per_node, 8);
  // Each GPU's efficiency comes from its own measurements (sim/README.md).
  ASSERT_FALSE(a100->gpu.gemm_efficiency.empty());
  ASSERT_FALSE(h100->gpu.gemm_efficiency.empty());
  EXPECT_NE(a100->gpu.gemm_efficiency.back().efficiency,
            h100->gpu.gemm_efficiency.back().efficiency);
  EXPECT_NE(a100->gpu.memory_efficiency.back().efficiency,
            h100->gpu.memory_efficiency.back().efficiency);
}

}  // namespace
}  // namespace ssdtrain::sim

// Folding calibration measurements into a hardware config (app/calibration.cc):
// on CUDA each dtype's GEMM peak is its own, and memory_GiB is the device's.
#include "app/calibration.h"

#include <gtest/gtest.h>

#include "app/interconnect_calibration.h"
#include "sim/collective.h"

namespace ssdtrain::app {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

exec::GemmSample Sample(const std::string& dtype, int64_t flops, int64_t ns) {
  exec::GemmSample s;
  s.dims = traces::GemmDims{1, 1, 1, 1};
  s.dtype = dtype;
  s.flops = flops;
  s.ns = ns;
  return s;
}

TEST(ApplyCalibration, CudaSetsEachDtypesPeakAndTheDevicesMemory) {
  // 2e9 FLOPs in 40 us (fp32), 4 us (fp16), 5 us (bf16): 50, 500 and 400
  // TFLOP/s, the peaks. 2e6 FLOPs in 100, 20 and 20 ns: 20, 100 and 100
  // TFLOP/s, efficiencies 0.4, 0.2 and 0.25 of each dtype's peak, whose mean
  // 0.85 / 3 is the curve's point there; at 2e9 every dtype is at its peak (1).
  exec::Calibration c;
  c.backend = "cuda";
  c.device = "cuda:0 NVIDIA H200";
  c.device_capacity_bytes = 138 * kGiB;
  c.gemm = {Sample("fp32", 2'000'000'000, 40'000), Sample("fp16", 2'000'000'000, 4'000),
            Sample("bf16", 2'000'000'000, 5'000),  Sample("fp32", 2'000'000, 100),
            Sample("fp16", 2'000'000, 20),         Sample("bf16", 2'000'000, 20)};
  sim::HardwareOptions base;
  base.gpu.peak_tflops_fp16 = 1;  // what a CPU base config would leave
  base.gpu.memory_GiB = 4;
  const sim::HardwareOptions hw = ApplyCalibration(base, c, CalibrationSettings{{"/tmp"}, "base"});
  EXPECT_DOUBLE_EQ(hw.gpu.peak_tflops_fp32, 50);
  EXPECT_DOUBLE_EQ(hw.gpu.peak_tflops_fp16, 500);
  EXPECT_DOUBLE_EQ(hw.gpu.peak_tflops_bf16, 400);
  EXPECT_DOUBLE_EQ(hw.gpu.memory_GiB, 138);
  ASSERT_EQ(hw.gpu.gemm_efficiency.size(), 2u);
  EXPECT_DOUBLE_EQ(hw.gpu.gemm_efficiency[0].size, 2e6);
  EXPECT_NEAR(hw.gpu.gemm_efficiency[0].efficiency, 0.85 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(hw.gpu.gemm_efficiency[1].size, 2e9);
  EXPECT_DOUBLE_EQ(hw.gpu.gemm_efficiency[1].efficiency, 1);
  EXPECT_EQ(hw.gpu.attention_efficiency.size(), 2u);
}

TEST(ApplyCalibration, CpuRunsEveryDtypeAtItsFp32Rate) {
  // The CPU backend times fp32 only: 2e9 FLOPs in 1 ms is 2 TFLOP/s for all
  // three dtypes. Two shapes of equal FLOPs keep the better: 2e6 in 2 us and
  // 4 us are 1 and 0.5 TFLOP/s, so the point there is 1 / 2 = 0.5.
  exec::Calibration c;
  c.backend = "cpu";
  c.device_capacity_bytes = 4 * kGiB;
  c.gemm = {Sample("fp32", 2'000'000'000, 1'000'000), Sample("fp32", 2'000'000, 2'000),
            Sample("fp32", 2'000'000, 4'000)};
  const sim::HardwareOptions hw =
      ApplyCalibration(sim::HardwareOptions{}, c, CalibrationSettings{{"/tmp"}, "base"});
  EXPECT_DOUBLE_EQ(hw.gpu.peak_tflops_fp32, 2);
  EXPECT_DOUBLE_EQ(hw.gpu.peak_tflops_fp16, 2);
  EXPECT_DOUBLE_EQ(hw.gpu.peak_tflops_bf16, 2);
  EXPECT_DOUBLE_EQ(hw.gpu.memory_GiB, 4);
  ASSERT_EQ(hw.gpu.gemm_efficiency.size(), 2u);
  EXPECT_DOUBLE_EQ(hw.gpu.gemm_efficiency[0].efficiency, 0.5);
}

TEST(MeasuredFigures, ListEveryFigureInOrderAndSetThemBack) {
  // What `mpirun -np N ssdtrain calibrate` averages: 1 GEMM, 1 memory pass,
  // the 6 link and SSD figures, 1 op, the op overhead, the SSD traffic's
  // overhead: 11 figures.
  exec::Calibration c;
  c.gemm = {Sample("fp32", 2'000'000, 100)};
  c.memory = {exec::BandwidthSample{1 << 20, 300}};
  c.d2h_GBps = 4;
  c.h2d_GBps = 5;
  c.ssd_write_GBps = 1.5;
  c.ssd_read_GBps = 1.75;
  c.ssd_write_latency_us = 90;
  c.ssd_read_latency_us = 40;
  c.ops = {exec::OpSample{traces::OpKind::kNorm, std::nullopt, "fp32", 4096, 7000}};
  c.op_overhead_us = 30.5;
  c.io_overhead_us_per_MiB = 250.25;
  const std::vector<double> figures = exec::MeasuredFigures(c);
  EXPECT_EQ(figures, (std::vector<double>{100, 300, 4, 5, 1.5, 1.75, 90, 40, 7000, 30.5, 250.25}));
  // Times stay whole nanoseconds (rounded), rates keep their fractions.
  ASSERT_TRUE(
      exec::SetMeasuredFigures({150.6, 250, 3, 6, 1.25, 2, 80, 50, 6999.4, 31, 200.5}, &c).ok());
  EXPECT_EQ(c.gemm[0].ns, 151);
  EXPECT_EQ(c.memory[0].ns, 250);
  EXPECT_DOUBLE_EQ(c.ssd_write_GBps, 1.25);
  EXPECT_EQ(c.ops[0].ns, 6999);
  EXPECT_DOUBLE_EQ(c.op_overhead_us, 31);
  EXPECT_DOUBLE_EQ(c.io_overhead_us_per_MiB, 200.5);
  // A rank that measured other shapes cannot be averaged with this one.
  const Status wrong = exec::SetMeasuredFigures({1, 2, 3}, &c);
  EXPECT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("3 given, this calibration has 11"), std::string::npos)
      << wrong.ToString();
}

TEST(ApplyCalibration, RecordsHowManyRanksMeasuredAtOnce) {
  exec::Calibration c;
  c.backend = "cpu";
  c.device_capacity_bytes = 4 * kGiB;
  CalibrationSettings settings{{"/tmp"}, "base"};
  EXPECT_EQ(ApplyCalibration(sim::HardwareOptions{}, c, settings).calibrated_ranks, 1);
  settings.ranks = 2;
  const sim::HardwareOptions hw = ApplyCalibration(sim::HardwareOptions{}, c, settings);
  EXPECT_EQ(hw.calibrated_ranks, 2);
  EXPECT_NE(hw.description.find("on 2 ranks at once"), std::string::npos) << hw.description;
}

TEST(SolveInterconnect, GivesBackTheMeasuredTimesThroughTheSimulatorsFormulas) {
  // 16 MiB: one way in 5 ms, 8 bytes in 20 us; all-reduce over 4 ranks in 12 ms.
  const int64_t bytes = int64_t{16} << 20;
  const InterconnectFigures f = SolveInterconnect(4, bytes, 20e3, 5e6, 12e6);
  EXPECT_DOUBLE_EQ(f.latency_us, 20.0);
  // A pipeline send: S / B + latency (sim/collective.h).
  EXPECT_NEAR(static_cast<double>(sim::SendNs(bytes, f.pp_GBps, f.latency_us)), 5e6, 1.0);
  // The ring all-reduce: 2(n-1)/n S / B + 2(n-1) latency (sim/collective.h).
  EXPECT_NEAR(static_cast<double>(sim::CollectiveNs(sim::CollectiveKind::kAllReduce, bytes, 4,
                                                    f.dp_GBps, f.latency_us)),
              12e6, 1.0);
  EXPECT_NEAR(f.pp_GBps, 16.0 * (1 << 20) / (5e6 - 20e3), 1e-9);
  EXPECT_NEAR(f.dp_GBps, 1.5 * 16.0 * (1 << 20) / (12e6 - 6 * 20e3), 1e-9);
}

TEST(SolveInterconnect, ATimeWithinItsLatencyPartIsAllBandwidth) {
  // The large message no slower than the small one, the all-reduce under its
  // 2(n-1) latencies: each rate is S over the whole time, never negative.
  const InterconnectFigures f = SolveInterconnect(2, 1000, 50, 50, 60);
  EXPECT_DOUBLE_EQ(f.pp_GBps, 1000.0 / 50);
  EXPECT_DOUBLE_EQ(f.dp_GBps, 1000.0 / 60);
}

TEST(ApplyCalibration, TakesTheMeasuredInterconnectOrKeepsTheBases) {
  exec::Calibration c;
  c.backend = "cpu";
  c.device_capacity_bytes = 4 * kGiB;
  sim::HardwareOptions base;
  base.interconnect = {8, {7, 0, 5}, {10, 0, 5}};
  CalibrationSettings settings{{"/tmp"}, "base"};
  settings.ranks = 2;
  EXPECT_EQ(ApplyCalibration(base, c, settings).interconnect.scale_out.GBps, 10);
  settings.interconnect = sim::InterconnectOptions{2, {2.5, 3.5, 12}, {2.5, 3.5, 12}};
  const sim::HardwareOptions hw = ApplyCalibration(base, c, settings);
  EXPECT_EQ(hw.interconnect.domain_gpus, 2);
  EXPECT_EQ(hw.interconnect.scale_up.P2pGBps(), 3.5);
  EXPECT_EQ(hw.interconnect.scale_up.GBps, 2.5);
  EXPECT_EQ(hw.interconnect.scale_up.latency_us, 12);
  EXPECT_NE(hw.description.find("interconnect measured between the ranks"), std::string::npos)
      << hw.description;
}

}  // namespace
}  // namespace ssdtrain::app

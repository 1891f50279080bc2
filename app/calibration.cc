#include "app/calibration.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <utility>
#include <vector>

#include "exec/replay.h"

namespace ssdtrain::app {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

std::string Today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

// Efficiency points (size, achieved / peak), one per distinct size, sorted.
std::vector<sim::EfficiencyPoint> Curve(std::vector<std::pair<double, double>> size_rate,
                                        double peak) {
  std::sort(size_rate.begin(), size_rate.end());
  std::vector<sim::EfficiencyPoint> out;
  for (const auto& [size, rate] : size_rate) {
    const double eff = std::clamp(rate / peak, 1e-3, 1.0);
    if (!out.empty() && out.back().size == size) {
      out.back().efficiency = std::max(out.back().efficiency, eff);
    } else {
      out.push_back(sim::EfficiencyPoint{size, eff});
    }
  }
  return out;
}

}  // namespace

sim::HardwareOptions ApplyCalibration(sim::HardwareOptions hw, const exec::Calibration& c,
                                      const CalibrationSettings& o) {
  char host[256] = "this-machine";
  ::gethostname(host, sizeof(host) - 1);
  hw.name = "calibrated";
  hw.description =
      fmt::format("Measured by `ssdtrain calibrate` on {} ({}) on {}, from {}; device: {}", host,
                  c.backend, Today(), o.base, c.device);
  if (o.ranks > 1) {
    hw.description += fmt::format(
        "; on {} ranks at once (mpirun), sharing this machine as a replay on {} ranks does: "
        "each figure is the mean of the ranks'",
        o.ranks, o.ranks);
  }
  hw.calibrated_ranks = o.ranks;
  if (o.interconnect) {
    hw.interconnect = *o.interconnect;
    hw.description += fmt::format(
        "; interconnect measured between the ranks (pipeline ping-pong, all-reduce): {:.2f} "
        "GB/s pp, {:.2f} GB/s dp, {:.1f} us",
        hw.interconnect.scale_up.P2pGBps(), hw.interconnect.scale_up.GBps,
        hw.interconnect.scale_up.latency_us);
  }
  // GEMM: each dtype's peak is its best rate seen (GFLOP/s = FLOPs per ns).
  std::map<std::string, double> peaks;
  for (const exec::GemmSample& s : c.gemm) {
    double& peak = peaks[s.dtype];
    peak = std::max(peak, static_cast<double>(s.flops) / static_cast<double>(s.ns));
  }
  // The efficiency curve is by FLOPs, each sample against its own dtype's
  // peak; shapes of equal FLOPs in one dtype keep the best, and where several
  // dtypes were timed (CUDA) a size's efficiency is their mean, since one
  // curve serves every dtype (sim/hardware.h).
  std::map<std::pair<double, std::string>, double> best;
  for (const exec::GemmSample& s : c.gemm) {
    const double rate = static_cast<double>(s.flops) / static_cast<double>(s.ns);
    double& e = best[{static_cast<double>(s.flops), s.dtype}];
    e = std::max(e, rate / peaks[s.dtype]);
  }
  std::map<double, std::pair<double, int>> by_size;  // sum of efficiencies, dtypes
  for (const auto& [key, eff] : best) {
    by_size[key.first].first += eff;
    ++by_size[key.first].second;
  }
  std::vector<std::pair<double, double>> gemm;
  for (const auto& [size, sum_n] : by_size) gemm.emplace_back(size, sum_n.first / sum_n.second);
  if (peaks["fp32"] > 0) {
    hw.gpu.peak_tflops_fp32 = peaks["fp32"] / 1e3;
    // The CPU backend runs every dtype in fp32; CUDA measured fp16 and bf16.
    hw.gpu.peak_tflops_fp16 = (peaks["fp16"] > 0 ? peaks["fp16"] : peaks["fp32"]) / 1e3;
    hw.gpu.peak_tflops_bf16 = (peaks["bf16"] > 0 ? peaks["bf16"] : peaks["fp32"]) / 1e3;
    // The executor runs an FP8 trace's GEMMs at 16 bits (CUDA) or in fp32
    // (CPU) (exec/README.md, "FP8"): on the machine a replay runs on, that is
    // the FP8 rate, MXFP8's too.
    hw.gpu.peak_tflops_fp8 = hw.gpu.peak_tflops_mxfp8 = hw.gpu.peak_tflops_bf16;
    hw.gpu.gemm_fp8_efficiency.clear();
    hw.gpu.gemm_efficiency = Curve(gemm, 1.0);
    // Both backends run attention ops as GEMMs (CUDA: of the same FLOPs).
    hw.gpu.attention_efficiency = hw.gpu.gemm_efficiency;
  }
  double mem_peak = 0;
  std::vector<std::pair<double, double>> mem;
  for (const exec::BandwidthSample& s : c.memory) {
    const double rate = static_cast<double>(s.bytes) / static_cast<double>(s.ns);  // GB/s
    mem_peak = std::max(mem_peak, rate);
    mem.emplace_back(static_cast<double>(s.bytes), rate);
  }
  if (mem_peak > 0) {
    hw.gpu.memory_GBps = mem_peak;
    hw.gpu.memory_efficiency = Curve(mem, mem_peak);
  }
  // The arena the device was made with: on CUDA by default the GPU's free
  // memory (exec/calibrate.h), so the planner plans for the memory a replay has.
  hw.gpu.memory_GiB = static_cast<double>(c.device_capacity_bytes) / kBytesPerGiB;
  hw.gpu.reserved_GiB = 0;
  // The replay's memory, as the device counts it (traces/storage_plan.h).
  hw.gpu.allocation_alignment_bytes = c.allocation_alignment_bytes;
  hw.gpu.replay_workspace = true;
  hw.gpu.replay_output_region_bytes = c.workspace_output_region_bytes;
  hw.host_link.d2h_GBps = c.d2h_GBps;
  hw.host_link.h2d_GBps = c.h2d_GBps;
  // One array of the measured directories' drives: the simulator's array
  // moves drives × a drive's rate, so each drive gets an even share of what
  // they moved together (directories on one disk share it: their sum is what
  // the replay gets).
  const int drives = std::max<int>(1, static_cast<int>(o.dirs.size()));
  hw.storage.arrays_drives = {drives};
  hw.storage.gpus_per_array = 1;
  hw.storage.gds = false;
  std::string where;
  for (const std::string& d : o.dirs) where += (where.empty() ? "" : ", ") + d;
  hw.storage.drive.model =
      fmt::format("{} ({}, {})", where, c.io_backend,
                  c.direct_io ? "O_DIRECT" : "buffered: the page cache, not the drive");
  hw.storage.drive.read_GBps = c.ssd_read_GBps / drives;
  hw.storage.drive.write_GBps = c.ssd_write_GBps / drives;
  hw.storage.drive.read_latency_us = c.ssd_read_latency_us;
  hw.storage.drive.write_latency_us = c.ssd_write_latency_us;
  hw.storage.drive.queue_depth = o.queue_depth;
  hw.storage.drive.request_KiB = static_cast<double>(o.block_size) / 1024.0;
  if (c.op_overhead_us > 0) hw.gpu.op_overhead_us = c.op_overhead_us;
  hw.gpu.io_overhead_us_per_MiB = c.io_overhead_us_per_MiB;
  // The executor issues op i when op i - max_ops_ahead has finished, and the
  // prefetches op i triggers with it.
  hw.gpu.issue_ahead_ops = exec::ReplayOptions{}.max_ops_ahead;
  hw.measured_op_times.clear();
  for (const exec::OpSample& s : c.ops) {
    hw.measured_op_times.push_back(
        sim::MeasuredOpTime{s.kind, s.gemm, s.gemm ? s.dtype : "", s.bytes, s.ns});
  }
  return hw;
}

}  // namespace ssdtrain::app

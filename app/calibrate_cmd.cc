// ssdtrain calibrate: measure this machine and write a hardware config.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <memory>

#include "app/calibration.h"
#include "app/command.h"
#include "exec/calibrate.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "traces/io.h"

namespace ssdtrain::app {
namespace {

constexpr const char* kDefaultBase = SSDTRAIN_SOURCE_DIR "/configs/hardware/cpu-local.json";
constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

struct CalibrateOptions {
  std::string dir;
  std::string backend = "auto";
  std::string base = kDefaultBase;
  std::string output;
  std::vector<std::string> models;
  std::vector<std::string> traces;
  double device_memory_GiB = 0;  // 0: CUDA the GPU's free memory, CPU 4 GiB
  int cuda_device = 0;
  int64_t block_size = int64_t{4} << 20;
  int queue_depth = 32;
  int64_t io_size = int64_t{512} << 20;
  int repeats = 3;
  bool allow_buffered_io = false;
};

int Run(const CalibrateOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  Result<sim::HardwareOptions> base = sim::LoadHardware(o.base);
  if (!base.ok()) return ReportError("calibrate", base.status());
  exec::CalibrationOptions co;
  co.dir = o.dir;
  co.backend = o.backend == "cpu"    ? exec::BackendChoice::kCpu
               : o.backend == "cuda" ? exec::BackendChoice::kCuda
                                     : exec::BackendChoice::kAuto;
  co.device.capacity_bytes = static_cast<int64_t>(o.device_memory_GiB * kBytesPerGiB);
  co.device.cuda_device_index = o.cuda_device;
  co.block_size = o.block_size;
  co.queue_depth = o.queue_depth;
  co.io_bytes = o.io_size;
  co.repeats = o.repeats;
  co.allow_buffered_io = o.allow_buffered_io;
  for (const std::string& path : o.traces) {
    Result<traces::Trace> t = traces::ReadTrace(path);
    if (!t.ok()) return ReportError("calibrate", t.status());
    co.traces.push_back(std::move(*t));
  }
  for (const std::string& path : o.models) {
    Result<models::ModelConfig> c = models::LoadModelConfig(path);
    if (!c.ok()) return ReportError("calibrate", c.status());
    Result<traces::Trace> t = models::BuildTrace(*c, 0);
    if (!t.ok()) return ReportError("calibrate", t.status());
    co.traces.push_back(std::move(*t));
  }
  co.progress = [start](const std::string& line) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cerr << fmt::format("calibrate [{:5.1f} s] {}\n", s, line);
  };
  Result<exec::Calibration> c = exec::Calibrate(co);
  if (!c.ok()) return ReportError("calibrate", c.status());
  const sim::HardwareOptions hw =
      ApplyCalibration(*base, *c, CalibrationSettings{o.dir, o.base, o.block_size, o.queue_depth});
  Status s = traces::WriteJsonFile(sim::ToJson(hw), o.output);
  if (!s.ok()) return ReportError("calibrate", s);
  std::cout << fmt::format(
      "{}: {:.1f} GiB; GEMM peak {:.1f} GFLOP/s{}, memory {:.1f} GB/s, copies {:.1f} GB/s d2h / "
      "{:.1f} GB/s h2d, SSD "
      "{:.2f} GB/s "
      "write / {:.2f} GB/s read ({:.0f} / {:.0f} us latency, {}), {} measured op shapes\nwrote "
      "{}\n",
      c->device, hw.gpu.memory_GiB, hw.gpu.peak_tflops_fp32 * 1e3,
      c->backend == "cuda"
          ? fmt::format(" fp32 (no TF32), {:.1f} fp16, {:.1f} bf16", hw.gpu.peak_tflops_fp16 * 1e3,
                        hw.gpu.peak_tflops_bf16 * 1e3)
          : "",
      hw.gpu.memory_GBps, hw.host_link.d2h_GBps, hw.host_link.h2d_GBps, hw.storage.drive.write_GBps,
      hw.storage.drive.read_GBps, hw.storage.drive.write_latency_us,
      hw.storage.drive.read_latency_us, c->io_backend, hw.measured_op_times.size(), o.output);
  if (!c->direct_io) {
    std::cout << "buffered I/O: the SSD figures are the page cache's, not the drive's\n";
  }
  return 0;
}

}  // namespace

Verb AddCalibrateCommand(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Measure this machine and write a hardware config for the simulator");
  cmd->add_option("--dir", o->dir, "Offload directory on the disk to measure (must exist)")
      ->required();
  cmd->add_option("--backend", o->backend, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Hardware config to write")->required();
  cmd->add_option("--base", o->base, "Hardware config whose unmeasured fields are kept")
      ->capture_default_str();
  cmd->add_option("--model", o->models,
                  "Model config whose ops to time at their real shapes (repeatable)");
  cmd->add_option("--trace", o->traces,
                  "Trace whose ops to time at their real shapes (repeatable)");
  cmd->add_option("--device-memory", o->device_memory_GiB,
                  "Device memory in GiB; 0: on CUDA the GPU's free memory (the config's "
                  "memory_GiB), on the CPU a 4 GiB arena")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--cuda-device", o->cuda_device,
                  "CUDA device index, in CUDA's order (CUDA_VISIBLE_DEVICES applies)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--block-size", o->block_size, "Offload engine request size in bytes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--queue-depth", o->queue_depth, "Offload engine requests in flight")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--io-size", o->io_size, "Bytes written then read for the SSD bandwidth")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--allow-buffered-io", o->allow_buffered_io,
                "Where --dir refuses O_DIRECT (tmpfs, ramfs), measure through the page cache "
                "instead of failing (the config then says so)");
  cmd->add_option("--repeats", o->repeats, "Timed runs per measurement (the median is kept)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  return Verb{cmd, [o] { return Run(*o); }};
}

}  // namespace ssdtrain::app

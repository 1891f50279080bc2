// ssdtrain calibrate: measure this machine and write a hardware config.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "app/calibration.h"
#include "app/cli_errors.h"
#include "app/command.h"
#include "app/interconnect_calibration.h"
#include "app/mpi_sync.h"
#include "app/outputs.h"
#include "app/rank_dirs.h"
#include "app/self_path.h"
#include "app/sizes.h"
#include "exec/calibrate.h"
#include "exec/offload_dir.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "traces/io.h"

namespace ssdtrain::app {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

struct CalibrateOptions {
  std::vector<std::string> dirs;
  std::string backend = "auto";
  std::string base = ConfigsDir() + "/hardware/cpu-local.json";
  std::string output;
  std::vector<std::string> models;
  std::vector<int64_t> micro_batches;  // the models' ops timed at each; empty: the config's
  std::vector<std::string> traces;
  double device_memory_GiB = 0;  // 0: CUDA the GPU's free memory, CPU 4 GiB
  int cuda_device = 0;
  int64_t block_size = int64_t{4} << 20;
  int queue_depth = 32;
  int64_t io_size = int64_t{512} << 20;
  int repeats = 3;
  bool allow_buffered_io = false;
};

// Everything calibrate needs before it measures: the base config and the
// traces whose ops to time.
Result<std::pair<sim::HardwareOptions, std::vector<traces::Trace>>> Load(
    const CalibrateOptions& o) {
  Result<sim::HardwareOptions> base = sim::LoadHardware(o.base);
  if (!base.ok()) return base.status();
  std::vector<traces::Trace> traces;
  for (const std::string& path : o.traces) {
    Result<traces::Trace> t = traces::ReadTrace(path);
    if (!t.ok()) return t.status();
    traces.push_back(std::move(*t));
  }
  for (const std::string& path : o.models) {
    Result<models::ModelConfig> c = models::LoadModelConfig(path);
    if (!c.ok()) return c.status();
    std::vector<std::optional<int64_t>> sizes(o.micro_batches.begin(), o.micro_batches.end());
    if (sizes.empty()) sizes.push_back(std::nullopt);
    for (const std::optional<int64_t>& mb : sizes) {
      models::ConfigOverrides overrides;
      overrides.micro_batch = mb;
      Result<models::ModelConfig> sized = models::ApplyOverrides(*c, overrides, path);
      if (!sized.ok()) return sized.status();
      Result<traces::Trace> t = models::BuildTrace(*sized, 0);
      if (!t.ok()) return t.status();
      traces.push_back(std::move(*t));
    }
  }
  return std::make_pair(std::move(*base), std::move(traces));
}

// Under mpirun, rank 0's calibration with every figure the mean of the ranks'
// (each rank sends its figures as raw doubles); other ranks get theirs back.
Result<exec::Calibration> MeanOverRanks(exec::Calibration mine, RankSync& ranks) {
  const std::vector<double> figures = exec::MeasuredFigures(mine);
  const std::string bytes(reinterpret_cast<const char*>(figures.data()),
                          figures.size() * sizeof(double));
  SSDTRAIN_ASSIGN_OR_RETURN(const std::vector<std::string> all, ranks.GatherAtRankZero(bytes));
  if (ranks.rank() != 0) return mine;
  std::vector<double> mean(figures.size(), 0.0);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].size() != bytes.size()) {
      return Status::Internal(
          fmt::format("rank {} measured {} figures, rank 0 {}: the ranks did not calibrate alike",
                      r, all[r].size() / sizeof(double), figures.size()));
    }
    std::vector<double> theirs(figures.size());
    std::memcpy(theirs.data(), all[r].data(), all[r].size());
    for (size_t i = 0; i < mean.size(); ++i) mean[i] += theirs[i] / static_cast<double>(all.size());
  }
  SSDTRAIN_RETURN_IF_ERROR(exec::SetMeasuredFigures(mean, &mine));
  return mine;
}

int Run(const CalibrateOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  // `mpirun -np N ssdtrain calibrate`: every rank measures at once, each in its
  // own folder DIR/rank-<r>, in step (each measurement starts when every rank
  // is ready for it), so that the figures are those of N ranks sharing this
  // machine, as `mpirun -np N ssdtrain replay` will; rank 0 writes their mean.
  auto started = StartRanksIfLaunched();
  if (!started.ok()) return ReportError("calibrate", started.status());
  const std::unique_ptr<RankSync> ranks = std::move(*started);
  const bool speaks = ranks == nullptr || ranks->rank() == 0;  // rank 0 prints for all
  auto fail = [&](const Status& st) { return speaks ? ReportError("calibrate", st) : 1; };
  // Before any measurement: rank 0's output (it writes it) and every rank's --dir.
  Outputs outputs;
  outputs.Add("-o", o.output);
  Status usable = speaks ? outputs.Check() : Status::Ok();
  for (const std::string& d : o.dirs) {
    if (usable.ok()) usable = exec::CheckOffloadDir(d, o.allow_buffered_io);
  }
  auto loaded = usable.ok() ? Load(o) : decltype(Load(o))(usable);
  RankDirs dirs;  // every directory given: calibrate measures them all as one array
  if (loaded.ok()) {
    Result<RankDirs> made = MakeRankDirs(traces::DriveLayout{}, o.dirs, ranks.get());
    if (made.ok()) {
      dirs = std::move(*made);
    } else {
      loaded = made.status();
    }
  }
  // Removes this rank's folders (the measurements removed their files).
  auto tidy = [&] { dirs.RemoveMade(); };
  if (ranks) {
    Status all = ranks->Agree(loaded.ok() ? Status::Ok() : loaded.status());
    if (!all.ok()) return tidy(), fail(all);
  }
  if (!loaded.ok()) return fail(loaded.status());
  const sim::HardwareOptions& base = loaded->first;
  exec::CalibrationOptions co;
  co.dirs = dirs.dirs;
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
  co.traces = std::move(loaded->second);
  if (speaks) {
    const int n = ranks ? ranks->size() : 1;
    co.progress = [start, n](const std::string& line) {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::cerr << fmt::format("calibrate [{:5.1f} s] {}{}\n", s, n > 1 ? "rank 0: " : "", line);
    };
  }
  // A rank that learns of another's failure in a wait has made its one
  // agreement after the failure (exec/step_sync.h); one that failed itself
  // makes it below.
  bool agreed_on_failure = false;
  if (ranks) {
    co.before_measurement = [&] {
      Status all = ranks->Agree(Status::Ok());
      agreed_on_failure = !all.ok();
      return all;
    };
  }
  Result<exec::Calibration> c = exec::Calibrate(co);
  std::optional<sim::InterconnectOptions> link;
  if (ranks) {
    Status all = agreed_on_failure ? c.status() : ranks->Agree(c.ok() ? Status::Ok() : c.status());
    tidy();
    if (!all.ok()) return fail(all);
    // The links between the ranks, as a replay on them sends and all-reduces.
    if (co.progress) {
      co.progress(
          fmt::format("interconnect: ping-pong of ranks 0 and 1, all-reduce of {}", ranks->size()));
    }
    Result<InterconnectFigures> f = MeasureInterconnect(*ranks, {.repeats = o.repeats});
    if (!f.ok()) return fail(f.status());
    // The ranks share this machine: one scale-up domain of them all, its
    // collectives at the measured ring's figure, its messages at the
    // ping-pong's; no network between them (scale_out the same figures).
    link = base.interconnect;
    link->domain_gpus = ranks->size();
    link->scale_up = sim::LinkTier{f->dp_GBps, f->pp_GBps, f->latency_us};
    link->scale_out = link->scale_up;
    c = MeanOverRanks(std::move(*c), *ranks);
    if (!c.ok()) return fail(c.status());
    if (!speaks) return 0;
  }
  if (!c.ok()) return ReportError("calibrate", c.status());
  const sim::HardwareOptions hw =
      ApplyCalibration(base, *c,
                       CalibrationSettings{o.dirs, o.base, o.block_size, o.queue_depth,
                                           ranks ? ranks->size() : 1, link});
  outputs.Set("-o", sim::ToJson(hw));
  if (Status s = outputs.Commit(); !s.ok()) return ReportError("calibrate", s);
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
      hw.gpu.memory_GBps, hw.host_link.d2h_GBps, hw.host_link.h2d_GBps, c->ssd_write_GBps,
      c->ssd_read_GBps, hw.storage.drive.write_latency_us, hw.storage.drive.read_latency_us,
      c->io_backend, hw.measured_op_times.size(), o.output);
  if (link) {
    std::cout << fmt::format(
        "interconnect between the {} ranks: {:.2f} GB/s pipeline sends, {:.2f} GB/s all-reduce, "
        "{:.1f} us latency\n",
        ranks->size(), link->scale_up.P2pGBps(), link->scale_up.GBps, link->scale_up.latency_us);
  }
  for (const exec::Calibration::DirBandwidth& d : c->ssd_dirs) {
    std::cout << fmt::format("  {} alone: {:.2f} GB/s write / {:.2f} GB/s read\n", d.dir,
                             d.write_GBps, d.read_GBps);
  }
  if (!c->ssd_dirs.empty()) {
    std::cout << fmt::format(
        "  together as above: recorded as one array of {} drives at {:.2f} GB/s write / {:.2f} "
        "GB/s read each\n",
        c->ssd_dirs.size(), hw.storage.drive.write_GBps, hw.storage.drive.read_GBps);
  }
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
  cmd->add_option("--dir", o->dirs,
                  "Offload directory on the disk to measure (must exist); repeat it for a node's "
                  "drives: each is measured alone, then all together as one array")
      ->required();
  cmd->add_option("--backend", o->backend, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "Hardware config to write")->required();
  cmd->add_option("--base", o->base, "Hardware config whose unmeasured fields are kept")
      ->capture_default_str();
  cmd->add_option("--model", o->models,
                  "Model config whose ops to time at their real shapes (repeatable)");
  cmd->add_option("--micro-batch", o->micro_batches,
                  "Time --model's ops at this micro-batch (repeatable; default: the config's). "
                  "The simulator uses a measured time only for an op of the same shape, so "
                  "give the micro-batch(es) you will plan at")
      ->check(IntAtLeast(1));
  cmd->add_option("--trace", o->traces,
                  "Trace whose ops to time at their real shapes (repeatable)");
  cmd->add_option("--device-memory", o->device_memory_GiB,
                  "Device memory in GiB; 0: on CUDA the GPU's free memory (the config's "
                  "memory_GiB), on the CPU a 4 GiB arena")
      ->check(RealAtLeast(0))
      ->capture_default_str();
  cmd->add_option("--cuda-device", o->cuda_device,
                  "CUDA device index, in CUDA's order (CUDA_VISIBLE_DEVICES applies)")
      ->check(IntAtLeast(0))
      ->capture_default_str();
  cmd->add_option("--block-size", o->block_size,
                  "Offload engine request size: a size, e.g. 4M or 4194304")
      ->transform(SizeBytes())
      ->capture_default_str();
  cmd->add_option("--queue-depth", o->queue_depth, "Offload engine requests in flight")
      ->check(IntAtLeast(1))
      ->capture_default_str();
  cmd->add_option("--io-size", o->io_size,
                  "Bytes written then read for the SSD bandwidth: a size, e.g. 512M, 1G or plain "
                  "bytes")
      ->transform(SizeBytes())
      ->capture_default_str();
  cmd->add_flag(
      "--allow-buffered-io", o->allow_buffered_io,
      "Where --dir is in memory (tmpfs, ramfs) or refuses O_DIRECT, measure through the page cache "
      "instead of failing (the config then says so)");
  cmd->add_option("--repeats", o->repeats, "Timed runs per measurement (the median is kept)")
      ->check(IntAtLeast(1))
      ->capture_default_str();
  return Verb{cmd, [o] { return Run(*o); }};
}

}  // namespace ssdtrain::app

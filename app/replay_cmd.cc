// ssdtrain replay: run a plan on a device (CPU or CUDA) with real SSD files,
// and write the measured run (and, optionally, a Chrome/Perfetto timeline).
#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "app/command.h"
#include "app/reports.h"
#include "exec/replay.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/timeline.h"

namespace ssdtrain::app {
namespace {

struct ReplayFlags {
  std::string trace, plan, policy, dir, backend = "auto", io_backend = "auto", output, timeline;
  int steps = 3;
  double ssd_bandwidth_GBps = 0;
  double device_memory_GiB = 4;
  double staging_MiB = 256;
  int cpu_threads = 1;
  int cuda_device = 0;
  bool no_cpu_pin = false;
  bool verify = false;
};

Result<exec::BackendChoice> ParseBackend(const std::string& s) {
  if (s == "auto") return exec::BackendChoice::kAuto;
  if (s == "cpu") return exec::BackendChoice::kCpu;
  if (s == "cuda") return exec::BackendChoice::kCuda;
  return Status::InvalidArgument("--backend: expected auto, cpu or cuda, got \"" + s + "\"");
}

int64_t GiB(double v) { return static_cast<int64_t>(std::llround(v * 1024.0 * 1024.0 * 1024.0)); }

int Run(const ReplayFlags& f) {
  auto backend = ParseBackend(f.backend);
  if (!backend.ok()) return ReportError("replay", backend.status());
  auto io_backend = exec::ParseBackendKind(f.io_backend);
  if (!io_backend.ok())
    return ReportError("replay", io_backend.status().WithPrefix("--io-backend"));
  if (f.plan.empty() == f.policy.empty()) {
    return ReportError(
        "replay",
        Status::InvalidArgument("give exactly one of --plan FILE or --policy keep|offload-all"));
  }
  auto trace = traces::ReadTrace(f.trace);
  if (!trace.ok()) return ReportError("replay", trace.status());
  traces::Plan plan;
  std::string plan_source = f.plan;
  if (!f.plan.empty()) {
    auto read = traces::ReadPlan(f.plan);
    if (!read.ok()) return ReportError("replay", read.status());
    plan = std::move(*read);
  } else if (f.policy == "keep") {
    plan = exec::KeepAllPlan(*trace);
    plan_source = "--policy keep";
  } else if (f.policy == "offload-all") {
    plan = exec::OffloadAllPlan(*trace);
    plan_source = "--policy offload-all";
  } else {
    return ReportError("replay",
                       Status::InvalidArgument("--policy: expected keep or offload-all, got \"" +
                                               f.policy + "\""));
  }
  exec::ReplayOptions o;
  o.dir = f.dir;
  o.backend = *backend;
  o.steps = f.steps;
  o.ssd_bandwidth_GBps = f.ssd_bandwidth_GBps;
  o.verify = f.verify;
  o.device_memory_bytes = GiB(f.device_memory_GiB);
  o.cpu_compute_threads = f.cpu_threads;
  o.cpu_pin_threads = !f.no_cpu_pin;
  o.cuda_device_index = f.cuda_device;
  o.staging_bytes = static_cast<int64_t>(std::llround(f.staging_MiB * 1024 * 1024));
  o.io_backend = *io_backend;
  o.progress = [](const std::string& line) { std::cerr << "replay: " << line << "\n"; };
  auto result = exec::Replay(*trace, plan, o, plan_source);
  if (!result.ok()) return ReportError("replay", result.status());
  Status written = traces::WriteStepReport(RunReport(*result, *trace, plan), f.output);
  if (!written.ok()) return ReportError("replay", written);
  if (!f.timeline.empty()) {
    written = traces::WriteJsonFile(
        traces::ToChromeTrace(result->timeline,
                              "replay " + trace->header.model + " (" + result->backend + ")"),
        f.timeline);
    if (!written.ok()) return ReportError("replay", written);
  }
  const auto& m = result->metrics;
  std::cout << fmt::format(
      "{} on {}: step {:.3f} ms (median of {}), peak device {:.1f} MiB, peak activations "
      "{:.1f} MiB, SSD wrote {:.1f} MiB read {:.1f} MiB{}, exposed I/O {:.3f} ms{}\n",
      trace->header.model, result->backend, m.step_time_ns / 1e6, result->steps,
      m.peak_gpu_bytes / 1048576.0, m.peak_activation_bytes / 1048576.0,
      m.ssd_bytes_written / 1048576.0, m.ssd_bytes_read / 1048576.0,
      result->cache.bytes_to_host == 0 ? ""
                                       : fmt::format(", host copies {:.1f} MiB out {:.1f} MiB back",
                                                     result->cache.bytes_to_host / 1048576.0,
                                                     result->cache.bytes_from_host / 1048576.0),
      m.exposed_io_ns / 1e6,
      result->verify ? fmt::format(", verified {} tensors", result->tensors_checked) : "");
  return 0;
}

}  // namespace

Verb AddReplayCommand(CLI::App& app) {
  auto flags = std::make_shared<ReplayFlags>();
  CLI::App* cmd = app.add_subcommand(
      "replay", "Run a plan on a device with real SSD offload files and measure it");
  cmd->add_option("--trace", flags->trace, "Operator trace (JSON or .cbor)")->required();
  cmd->add_option("--plan", flags->plan, "Plan file (from `ssdtrain plan`)");
  cmd->add_option("--policy", flags->policy,
                  "Instead of --plan: a built-in plan, keep or offload-all (every saved "
                  "offloadable activation to the SSD)");
  cmd->add_option("--dir", flags->dir, "Offload directory (on the SSD)")->required();
  cmd->add_option("--backend", flags->backend,
                  "Device: auto (CUDA when a GPU is usable), cpu, cuda")
      ->capture_default_str();
  cmd->add_option("--steps", flags->steps, "Measured steps, after one warm-up step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--ssd-bandwidth", flags->ssd_bandwidth_GBps,
                  "Cap on the SSD path in GB/s (both directions; 0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--verify", flags->verify,
                "Fill every tensor with a pattern and check each one backward reads");
  cmd->add_option("--device-memory", flags->device_memory_GiB,
                  "Device memory in GiB (CPU arena; CUDA: 0 = the GPU's free memory)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--staging-memory", flags->staging_MiB, "Pinned host staging memory in MiB")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--cpu-threads", flags->cpu_threads,
                  "Eigen threads of the CPU backend (1 leaves a core to copies and I/O)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--no-cpu-pin", flags->no_cpu_pin,
                "CPU backend: let the scheduler place the compute and copy/I/O threads "
                "(default: compute on the first CPUs, the rest on the others)");
  cmd->add_option("--cuda-device", flags->cuda_device,
                  "CUDA device index, in CUDA's order (CUDA_VISIBLE_DEVICES applies)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--io-backend", flags->io_backend, "auto, io_uring or posix")
      ->capture_default_str();
  cmd->add_option("-o,--output", flags->output, "Run file (JSON)")->required();
  cmd->add_option("--timeline", flags->timeline, "Chrome/Perfetto trace of the last step");
  return {cmd, [flags] { return Run(*flags); }};
}

}  // namespace ssdtrain::app

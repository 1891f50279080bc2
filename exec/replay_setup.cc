// Replay()'s set-up (exec/detail/replay_setup.h).
#include "exec/detail/replay_setup.h"

#include <algorithm>
#include <string>

#include "exec/detail/cpu_affinity.h"
#include "exec/detail/file_limit.h"
#include "exec/detail/format_bytes.h"
#include "traces/drives.h"
#include "traces/layout.h"

namespace ssdtrain::exec::detail {

Result<Prepared> Prepare(const traces::Trace& one_micro_batch, const traces::Plan& step_plan,
                         const ReplayOptions& options, const std::string& plan_source) {
  SSDTRAIN_RETURN_IF_ERROR(traces::ValidatePlan(step_plan, one_micro_batch, plan_source));
  Prepared out;
  SSDTRAIN_ASSIGN_OR_RETURN(out.ddp, traces::ParseDdpImpl(step_plan.ddp, plan_source + ": ddp"));
  // The stage's whole step: its micro-batches in the schedule's order
  // (traces/whole_step.h; the simulator unrolls the same way).
  SSDTRAIN_ASSIGN_OR_RETURN(out.whole, traces::UnrollStep(one_micro_batch, step_plan, plan_source));
  const traces::Trace& trace = out.whole.trace;
  const traces::Plan& plan = out.whole.plan;
  SSDTRAIN_RETURN_IF_ERROR(CheckPlanFileNames(plan, plan_source));
  // Each plan file striped over the directories opens one file in each.
  SSDTRAIN_RETURN_IF_ERROR(EnsureOpenFileLimit(
      OffloadFilesOf(plan) * static_cast<int64_t>(std::max<size_t>(1, options.dirs.size())),
      plan_source));
  for (const traces::Placement& p : plan.placements) {
    if (p.action == traces::TensorAction::kOffloadSsd && !p.file.empty()) {
      for (const std::string& dir : options.dirs) {
        SSDTRAIN_RETURN_IF_ERROR(
            CheckOffloadFileName(p.file, dir)
                .WithPrefix(plan_source + ": tensor " + std::to_string(p.tensor)));
      }
    }
  }
  if (options.steps < 1) return Status::InvalidArgument("--steps must be at least 1");
  // The ranks' layout (traces/layout.h): Megatron-LM's order.
  if (options.sync != nullptr) {
    SSDTRAIN_ASSIGN_OR_RETURN(out.place, PlaceRank(trace, plan, *options.sync, plan_source));
  }
  if (options.max_ops_ahead < 1) return Status::InvalidArgument("max_ops_ahead must be at least 1");
  // What the plan means: the one resolution the simulator uses too.
  SSDTRAIN_ASSIGN_OR_RETURN(out.storage_plan, traces::ResolvePlan(trace, plan, plan_source));
  const traces::StoragePlan& storage_plan = out.storage_plan;
  if (options.dirs.empty()) {
    return Status::InvalidArgument("no offload directory given; pass --dir DIR (one per drive)");
  }
  SSDTRAIN_RETURN_IF_ERROR(
      traces::CheckDevices(storage_plan, static_cast<int>(options.dirs.size()), plan_source));
  const traces::StaticPeaks planned = traces::ComputeStaticPeaks(trace, storage_plan);
  if (options.device_memory_bytes > 0 && planned.device_bytes > options.device_memory_bytes) {
    return Status::ResourceExhausted(
        "the plan needs at least " + FormatBytes(planned.device_bytes) + " of device memory (" +
        FormatBytes(planned.activation_bytes) + " of it activations), more than the " +
        FormatBytes(options.device_memory_bytes) + " given; raise --device-memory or offload more");
  }
  return out;
}

Result<DeviceSetup> SetUpDevice(const traces::Trace& trace, const traces::Plan& plan,
                                const traces::StoragePlan& storage_plan,
                                const ReplayOptions& options, const std::string& plan_source) {
  DeviceSetup out;
  out.device = options.device;
  if (out.device == nullptr) {
    DeviceOptions device_options;
    device_options.capacity_bytes = options.device_memory_bytes;
    device_options.cpu_compute_threads = options.cpu_compute_threads;
    device_options.cpu_pin_threads = options.cpu_pin_threads;
    device_options.cuda_device_index = options.cuda_device_index;
    std::string picked;
    SSDTRAIN_ASSIGN_OR_RETURN(out.made, MakeDevice(options.backend, device_options, &picked));
    out.device = out.made.get();
    if (options.progress) options.progress("backend " + picked);
  }
  // The GEMM workspace counts too; still no file exists.
  Device* device = out.device;
  SSDTRAIN_ASSIGN_OR_RETURN(out.workspace, device->ReserveWorkspace(trace));
  const int64_t workspace = out.workspace;
  // A borrowed device must be empty but for the workspace (whose allocation
  // the backend rounds up to its alignment, at most 4 KiB).
  if (const int64_t held = device->used_bytes() - workspace;
      options.device != nullptr && held >= 4096) {
    return Status::InvalidArgument("the device given to the replay still holds " +
                                   FormatBytes(held) + " besides its GEMM workspace");
  }
  device->ResetPeak();
  // Again, as this device rounds its allocations.
  out.planned = traces::ComputeStaticPeaks(trace, storage_plan, device->allocation_alignment());
  const traces::StaticPeaks& planned = out.planned;
  out.budget =
      options.memory_budget_bytes >= 0 ? options.memory_budget_bytes : plan.memory_budget_bytes;
  const int64_t budget = out.budget;
  if (budget > 0 && planned.device_bytes + workspace > budget) {
    return Status::ResourceExhausted(
        plan_source + ": memory_budget_bytes: the plan needs at least " +
        FormatBytes(planned.device_bytes + workspace) + " of device memory (" +
        FormatBytes(planned.activation_bytes) + " of it activations, " + FormatBytes(workspace) +
        " GEMM workspace) even with instant I/O, more than its " + FormatBytes(budget) + " budget");
  }
  if (planned.device_bytes + workspace > device->capacity_bytes()) {
    return Status::ResourceExhausted(
        "the plan needs at least " + FormatBytes(planned.device_bytes + workspace) +
        " of device memory (" + FormatBytes(planned.activation_bytes) + " of it activations, " +
        FormatBytes(workspace) + " GEMM workspace), more than the " +
        FormatBytes(device->capacity_bytes()) + " given; raise --device-memory or offload more");
  }
  return out;
}

Result<EngineSetup> StartEngine(const traces::Plan& plan, const ReplayOptions& options,
                                Device& device) {
  OffloadOptions engine_options;
  engine_options.dirs = options.dirs;
  engine_options.backend = options.io_backend;
  engine_options.block_size =
      options.block_size > 0 ? options.block_size : traces::StripeBytes(plan.storage);
  // queue_depth requests in flight per drive, as the simulator's drives keep.
  engine_options.queue_depth = options.queue_depth * static_cast<int>(options.dirs.size());
  EngineSetup out;
  SSDTRAIN_ASSIGN_OR_RETURN(
      out.storage_path, ChooseStoragePath(options.gds, device.kind() == "cuda", plan.storage.gds,
                                          options.cufile_library));
  engine_options.cufile = out.storage_path.cufile;
  // The replay brings its own pinned staging, none where cuFile moves the
  // device buffers themselves (Replayer::Direct: no SSD byte bounces then).
  engine_options.staging_bytes = 0;
  SSDTRAIN_ASSIGN_OR_RETURN(
      out.staging,
      HostStaging::Create(device, out.storage_path.cufile ? 0 : options.staging_bytes));
  engine_options.external_staging = {out.staging->base(),
                                     static_cast<size_t>(out.staging->capacity())};
  engine_options.bandwidth_cap_bytes_per_s = options.ssd_bandwidth_GBps * 1e9;
  engine_options.allow_buffered_io = options.allow_buffered_io;
  {
    // Threads made while this lives (the engine's I/O thread here, the
    // replayer's submit / complete / read threads below) inherit its mask: on
    // the CPU backend, the CPUs the compute stream does not use. This thread,
    // which issues the ops, stays where it was: it is on the critical path and
    // must not queue behind copies and checksums.
    ScopedThreadAffinity helper_affinity(device.helper_cpus());
    if (options.make_io_backend) {
      SSDTRAIN_ASSIGN_OR_RETURN(out.engine,
                                OffloadEngine::Create(engine_options, options.make_io_backend()));
    } else {
      SSDTRAIN_ASSIGN_OR_RETURN(out.engine, OffloadEngine::Create(engine_options));
    }
  }
  return out;
}

}  // namespace ssdtrain::exec::detail

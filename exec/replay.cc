// Replay(): everything that can be refused is refused before a device or a
// file exists; then the device, engine, staging and cache are set up and the
// steps run (detail::Replayer, exec/detail/replayer.h), and the step figures
// become the run's metrics.
#include "exec/replay.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "exec/cufile.h"
#include "exec/detail/cpu_affinity.h"
#include "exec/detail/file_limit.h"
#include "exec/detail/format_bytes.h"
#include "exec/detail/host_staging.h"
#include "exec/detail/rank_place.h"
#include "exec/detail/replayer.h"
#include "exec/detail/test_points.h"
#include "exec/offload_engine.h"
#include "traces/dp_buckets.h"
#include "traces/drives.h"
#include "traces/layout.h"
#include "traces/storage_plan.h"
#include "traces/whole_step.h"

namespace ssdtrain::exec {
namespace {

CacheStats operator-(const CacheStats& a, const CacheStats& b) {
  return {a.writes - b.writes,
          a.bytes_written - b.bytes_written,
          a.writes_dropped - b.writes_dropped,
          a.bytes_write_dropped - b.bytes_write_dropped,
          a.forwarded - b.forwarded,
          a.bytes_forwarded - b.bytes_forwarded,
          a.reads - b.reads,
          a.bytes_read - b.bytes_read,
          a.evictions - b.evictions,
          a.bytes_evicted - b.bytes_evicted,
          a.host_copies - b.host_copies,
          a.bytes_to_host - b.bytes_to_host,
          a.host_restores - b.host_restores,
          a.bytes_from_host - b.bytes_from_host};
}

// The bytes the engine moved in step `step` (from `io_before` to `io_after`)
// are those the cache counted (`delta`).
Status CheckStepBytes(int step, const CacheStats& delta, const OffloadStats& io_before,
                      const OffloadStats& io_after) {
  const int64_t written = io_after.bytes_written - io_before.bytes_written;
  const int64_t read = io_after.bytes_read - io_before.bytes_read;
  if (written == delta.bytes_written && read == delta.bytes_read &&
      detail::HitTestPoint(detail::TestPoint::kStepBytesChecked, step) == 0) {
    return Status::Ok();
  }
  return Status::Internal("the engine moved " + std::to_string(written) + " / " +
                          std::to_string(read) + " bytes (written / read), the cache counted " +
                          std::to_string(delta.bytes_written) + " / " +
                          std::to_string(delta.bytes_read));
}

// What the replay checks before a device or a file exists, and what it
// works out on the way: the stage's whole step, the rank's place, what the
// plan means, and the plan's static peaks.
struct Prepared {
  traces::WholeStep whole;
  traces::DdpImpl ddp{};
  detail::RankPlace place;
  traces::StoragePlan storage_plan;
};

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
  SSDTRAIN_RETURN_IF_ERROR(detail::EnsureOpenFileLimit(
      detail::OffloadFilesOf(plan) * static_cast<int64_t>(std::max<size_t>(1, options.dirs.size())),
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
    SSDTRAIN_ASSIGN_OR_RETURN(out.place,
                              detail::PlaceRank(trace, plan, *options.sync, plan_source));
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
        "the plan needs at least " + detail::FormatBytes(planned.device_bytes) +
        " of device memory (" + detail::FormatBytes(planned.activation_bytes) +
        " of it activations), more than the " + detail::FormatBytes(options.device_memory_bytes) +
        " given; raise --device-memory or offload more");
  }
  return out;
}

// The device (made, or the caller's), its GEMM workspace reserved, and the
// budget the plan must fit with it; still no file exists.
struct DeviceSetup {
  std::unique_ptr<Device> made;  // null with the caller's device
  Device* device = nullptr;
  int64_t workspace = 0;
  int64_t budget = 0;
  traces::StaticPeaks planned;  // rounded as this device allocates
};

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
                                   detail::FormatBytes(held) + " besides its GEMM workspace");
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
        detail::FormatBytes(planned.device_bytes + workspace) + " of device memory (" +
        detail::FormatBytes(planned.activation_bytes) + " of it activations, " +
        detail::FormatBytes(workspace) + " GEMM workspace) even with instant I/O, more than its " +
        detail::FormatBytes(budget) + " budget");
  }
  if (planned.device_bytes + workspace > device->capacity_bytes()) {
    return Status::ResourceExhausted(
        "the plan needs at least " + detail::FormatBytes(planned.device_bytes + workspace) +
        " of device memory (" + detail::FormatBytes(planned.activation_bytes) +
        " of it activations, " + detail::FormatBytes(workspace) +
        " GEMM workspace), more than the " + detail::FormatBytes(device->capacity_bytes()) +
        " given; raise --device-memory or offload more");
  }
  return out;
}

// The storage path (cuFile or the bounce through pinned staging), the
// staging, and the offload engine over the plan's directories. Members in
// the order they must outlive one another.
struct EngineSetup {
  StoragePath storage_path;
  std::unique_ptr<detail::HostStaging> staging;
  std::unique_ptr<OffloadEngine> engine;
};

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
      detail::HostStaging::Create(device, out.storage_path.cufile ? 0 : options.staging_bytes));
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
    detail::ScopedThreadAffinity helper_affinity(device.helper_cpus());
    if (options.make_io_backend) {
      SSDTRAIN_ASSIGN_OR_RETURN(out.engine,
                                OffloadEngine::Create(engine_options, options.make_io_backend()));
    } else {
      SSDTRAIN_ASSIGN_OR_RETURN(out.engine, OffloadEngine::Create(engine_options));
    }
  }
  return out;
}

// The progress line of one step.
std::string StepLine(int step, int steps, const detail::Replayer::StepRecord& record,
                     const CacheStats& delta) {
  char line[300];
  const std::string host = delta.bytes_to_host == 0
                               ? ""
                               : ", to host " + detail::FormatBytes(delta.bytes_to_host) +
                                     ", back " + detail::FormatBytes(delta.bytes_from_host);
  std::snprintf(line, sizeof(line),
                "step %d/%d%s: %.3f ms, wrote %s, read %s%s, forwarded %s, exposed I/O %.3f ms",
                step, steps, step == 0 ? " (warm-up)" : "", record.time_ns / 1e6,
                detail::FormatBytes(delta.bytes_written).c_str(),
                detail::FormatBytes(delta.bytes_read).c_str(), host.c_str(),
                detail::FormatBytes(delta.bytes_forwarded).c_str(), record.exposed_io_ns / 1e6);
  return line;
}

Result<ReplayResult> ReplayOnRank(const traces::Trace& one_micro_batch,
                                  const traces::Plan& step_plan, const ReplayOptions& options,
                                  const std::string& plan_source,
                                  detail::RankAgreement& agreement) {
  // Everything that can be refused is refused before a device or a file exists.
  SSDTRAIN_ASSIGN_OR_RETURN(const Prepared prepared,
                            Prepare(one_micro_batch, step_plan, options, plan_source));
  const traces::WholeStep& whole = prepared.whole;
  const traces::Trace& trace = whole.trace;
  const traces::Plan& plan = whole.plan;
  const traces::StoragePlan& storage_plan = prepared.storage_plan;
  const detail::RankPlace& place = prepared.place;
  const bool interleaved = plan.schedule == "interleaved";
  SSDTRAIN_ASSIGN_OR_RETURN(DeviceSetup on,
                            SetUpDevice(trace, plan, storage_plan, options, plan_source));
  Device* device = on.device;
  const traces::StaticPeaks& planned = on.planned;
  const int64_t budget = on.budget;
  SSDTRAIN_ASSIGN_OR_RETURN(EngineSetup io, StartEngine(plan, options, *device));
  const StoragePath& storage_path = io.storage_path;
  detail::HostStaging* staging = io.staging.get();
  OffloadEngine* engine = io.engine.get();
  TensorCache cache(storage_plan);
  // offload-host copies: one pinned region, each storage at its fixed offset.
  const int64_t host_bytes = storage_plan.host_region_bytes;
  std::unique_ptr<detail::HostStaging> host_memory;
  if (host_bytes > 0) {
    auto made = detail::HostStaging::Create(*device, host_bytes);
    if (!made.ok()) {
      return made.status().WithPrefix("host memory for the plan's offload-host tensors (" +
                                      detail::FormatBytes(host_bytes) + ")");
    }
    host_memory = std::move(*made);
  }

  ReplayResult result;
  result.backend = std::string(device->kind());
  result.device = device->Describe();
  result.io_backend = engine->BackendName();
  result.storage_path = storage_path.text;
  result.gds = engine->device_io();
  result.staging_bytes = staging->capacity();
  result.direct_io = engine->direct_io();
  result.steps = options.steps;
  result.micro_batches = plan.num_micro_batches;
  result.schedule = plan.schedule;
  result.ranks = options.sync != nullptr ? options.sync->size() : 1;
  result.stage = trace.header.stage;
  result.tp_index = place.tp_index;
  result.ep_index = place.ep_index;
  result.planned_peak_activation_bytes = planned.activation_bytes;
  result.planned_peak_device_bytes = planned.device_bytes;
  result.plan_offloaded_bytes = storage_plan.ssd_bytes;
  result.plan_host_bytes = 0;
  for (const traces::StorageInfo& info : storage_plan.storages) {
    if (info.action == traces::TensorAction::kOffloadHost) result.plan_host_bytes += info.bytes;
  }
  result.verify = options.verify;

  detail::Replayer replayer(trace, options, *device, *engine, *staging, cache, storage_plan,
                            host_memory.get(), agreement);
  replayer.set_pipeline(place.previous_rank, place.next_rank,
                        interleaved ? whole.chunk : std::vector<int64_t>{});
  replayer.set_tensor_parallel(place.tp_index, place.tp_group);
  replayer.set_expert_parallel(place.ep_index, place.ep_group);
  replayer.set_shard_group(place.shard_index, place.shard_group, place.shard_experts);
  replayer.set_expert_shard_group(place.expert_shard_index, place.expert_shard_group);
  replayer.set_context_parallel(place.cp_index, place.cp_group, place.cp_experts);
  // The buckets the simulator prices too (traces/dp_buckets.h), over the
  // layout's dense gradient group: none where it is this rank alone at ZeRO-2/3
  // (the trace reduce-scattered them), as the simulator has none.
  if (options.sync != nullptr && (place.dense_buckets || plan.zero_stage < 2)) {
    SSDTRAIN_RETURN_IF_ERROR(
        replayer
            .set_buckets(traces::GradientBuckets(trace, std::max<int64_t>(plan.dp, 1)),
                         prepared.ddp)
            .WithPrefix(plan_source));
  }
  {
    detail::ScopedThreadAffinity helper_affinity(device->helper_cpus());
    SSDTRAIN_RETURN_IF_ERROR(replayer.Init());
  }
  // Every rank set up (exec/step_sync.h).
  SSDTRAIN_RETURN_IF_ERROR(agreement.At(Status::Ok()));
  result.workspace_bytes = replayer.workspace_bytes();
  replayer.set_budget(budget);
  result.memory_budget_bytes = budget;
  std::vector<int64_t> measured, exposed, allreduce;
  int64_t total_flops = 0;
  for (const traces::Op& op : trace.ops) total_flops += op.flops;
  for (int step = 0; step <= options.steps; ++step) {
    const CacheStats before = cache.stats();
    const OffloadStats io_before = engine->Stats();
    auto record = replayer.RunStep(step);
    if (!record.ok()) return record.status();  // "step N: ..."
    const CacheStats delta = cache.stats() - before;
    // Every rank finished this step, its checks included: after the last
    // step's agreement nothing may fail on one rank alone, as the others go
    // on to their next collective (the CLI's gather of the reports).
    const std::string at_step = "step " + std::to_string(step);
    Status checked = CheckStepBytes(step, delta, io_before, engine->Stats());
    if (!checked.ok()) checked = checked.WithPrefix(at_step);
    if (Status all = agreement.At(checked); !all.ok()) {
      return checked.ok() ? all.WithPrefix(at_step) : all;
    }
    result.step_times_ns.push_back(record->time_ns);
    if (step > 0) {
      measured.push_back(record->time_ns);
      exposed.push_back(record->exposed_io_ns);
      allreduce.push_back(record->allreduce_ns);
    }
    result.cache = delta;
    if (options.dirs.size() > 1) {
      const OffloadStats io_after = engine->Stats();
      std::vector<int64_t>& per = result.metrics.ssd_bytes_written_per_drive;
      per.assign(options.dirs.size(), 0);
      for (size_t d = 0; d < per.size(); ++d) {
        per[d] = io_after.bytes_written_per_dir[d] - io_before.bytes_written_per_dir[d];
      }
    }
    result.busy = record->busy;
    for (OpTime& t : record->ops) {
      t.original_op = whole.original_op[static_cast<size_t>(t.op)];
      t.micro_batch = trace.op(t.op).micro_batch;
    }
    if (step > 0) result.measured_step_ops.push_back(record->ops);
    result.ops = std::move(record->ops);
    result.timeline = std::move(record->timeline);
    result.gradient_buckets = std::move(record->buckets);
    for (BucketRun& b : result.gradient_buckets) {
      if (b.after_op == traces::kNoOp) continue;
      b.after_original_op = whole.original_op[static_cast<size_t>(b.after_op)];
      b.micro_batch = trace.op(b.after_op).micro_batch;
    }
    result.tensors_checked = record->checked;
    result.pipeline = record->pipeline;
    result.collectives = record->collectives;
    if (options.progress) options.progress(StepLine(step, options.steps, *record, delta));
  }
  auto median = [](std::vector<int64_t> v) {  // of an even count: the mean of the middle two
    if (v.empty()) return int64_t{0};
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 == 1 ? v[h] : (v[h - 1] + v[h]) / 2;
  };
  traces::StepMetrics& m = result.metrics;
  m.step_time_ns = median(measured);
  m.exposed_io_ns = median(exposed);
  result.allreduce_ns = median(allreduce);
  const double seconds = static_cast<double>(m.step_time_ns) / 1e9;
  if (seconds > 0) {
    m.tokens_per_s = static_cast<double>(trace.header.micro_batch * trace.header.seq_len *
                                         plan.num_micro_batches) /
                     seconds;
    m.tflops_per_gpu = static_cast<double>(total_flops) / seconds / 1e12;
    // As the simulator defines it (traces::RequiredWriteGBps): the step's
    // writes over its forward compute time.
    int64_t forward_ns = 0;
    for (const OpTime& t : result.ops) {
      if (trace.op(t.op).phase == traces::Phase::kForward) forward_ns += t.end_ns - t.start_ns;
    }
    m.required_ssd_write_GBps = traces::RequiredWriteGBps(result.cache.bytes_written, forward_ns);
  }
  m.peak_gpu_bytes = device->peak_bytes();
  m.peak_activation_bytes = replayer.peak_activation_bytes();
  m.ssd_bytes_written = result.cache.bytes_written;
  m.ssd_bytes_read = result.cache.bytes_read;
  result.verified = options.verify;  // any mismatch returned an error above
  return result;
}

}  // namespace

Result<ReplayResult> Replay(const traces::Trace& trace, const traces::Plan& plan,
                            const ReplayOptions& options, const std::string& plan_source) {
  detail::RankAgreement agreement(options.sync);
  Result<ReplayResult> result = ReplayOnRank(trace, plan, options, plan_source, agreement);
  // Told after this rank's engine has removed its files.
  if (!result.ok()) {
    agreement.OnFailure(result.status());
    // Stopped by a neighbour's abort: its message, as an agreement gives it.
    if (!agreement.peer_failure().ok()) return agreement.peer_failure();
  }
  return result;
}

}  // namespace ssdtrain::exec

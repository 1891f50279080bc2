// Replay(): everything that can be refused is refused before a device or a
// file exists; then the device, engine, staging and cache are set up
// (exec/detail/replay_setup.h) and the steps run (detail::Replayer,
// exec/detail/replayer.h), and the step figures become the run's metrics.
#include "exec/replay.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "exec/detail/cpu_affinity.h"
#include "exec/detail/format_bytes.h"
#include "exec/detail/host_staging.h"
#include "exec/detail/rank_place.h"
#include "exec/detail/replay_setup.h"
#include "exec/detail/replayer.h"
#include "exec/detail/test_points.h"
#include "exec/offload_engine.h"
#include "traces/dp_buckets.h"
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

// offload-host copies: one pinned region, each storage at its fixed offset
// (none when the plan moves nothing to host memory).
Result<std::unique_ptr<detail::HostStaging>> HostRegionFor(Device& device,
                                                           const traces::StoragePlan& plan) {
  const int64_t bytes = plan.host_region_bytes;
  if (bytes <= 0) return std::unique_ptr<detail::HostStaging>();
  auto made = detail::HostStaging::Create(device, bytes);
  if (!made.ok()) {
    return made.status().WithPrefix("host memory for the plan's offload-host tensors (" +
                                    detail::FormatBytes(bytes) + ")");
  }
  return std::move(*made);
}

// What the result says before a step runs: the backends, the plan's shape and
// this rank's place, the planned peaks and offloaded bytes.
ReplayResult DescribeRun(const detail::Prepared& prepared, const detail::DeviceSetup& on,
                         const detail::EngineSetup& io, const ReplayOptions& options) {
  const traces::Plan& plan = prepared.whole.plan;
  const traces::StoragePlan& storage_plan = prepared.storage_plan;
  ReplayResult result;
  result.backend = std::string(on.device->kind());
  result.device = on.device->Describe();
  result.io_backend = io.engine->BackendName();
  result.storage_path = io.storage_path.text;
  result.gds = io.engine->device_io();
  result.staging_bytes = io.staging->capacity();
  result.direct_io = io.engine->direct_io();
  result.steps = options.steps;
  result.micro_batches = plan.num_micro_batches;
  result.schedule = plan.schedule;
  result.ranks = options.sync != nullptr ? options.sync->size() : 1;
  result.stage = prepared.whole.trace.header.stage;
  result.tp_index = prepared.place.groups.tp.index;
  result.ep_index = prepared.place.groups.ep.index;
  result.planned_peak_activation_bytes = on.planned.activation_bytes;
  result.planned_peak_device_bytes = on.planned.device_bytes;
  result.plan_offloaded_bytes = storage_plan.ssd_bytes;
  result.plan_host_bytes = 0;
  for (const traces::StorageInfo& info : storage_plan.storages) {
    if (info.action == traces::TensorAction::kOffloadHost) result.plan_host_bytes += info.bytes;
  }
  result.verify = options.verify;
  result.memory_budget_bytes = on.budget;
  return result;
}

// The replayer told this rank's place: its pipeline neighbours (and chunks
// when interleaved), its tp, ep, shard and cp groups, and the gradient
// buckets the simulator prices too (traces/dp_buckets.h), over the layout's
// dense gradient group: none where it is this rank alone at ZeRO-2/3 (the
// trace reduce-scattered them), as the simulator has none.
Status PlaceReplayer(const detail::Prepared& prepared, const ReplayOptions& options,
                     const std::string& plan_source, detail::Replayer& replayer) {
  const traces::Plan& plan = prepared.whole.plan;
  const detail::RankPlace& place = prepared.place;
  replayer.set_pipeline(
      place.previous_rank, place.next_rank,
      plan.schedule == "interleaved" ? prepared.whole.chunk : std::vector<int64_t>{});
  replayer.set_groups(place.groups);
  if (options.sync == nullptr || (!place.dense_buckets && plan.zero_stage >= 2)) {
    return Status::Ok();
  }
  return replayer
      .set_buckets(traces::GradientBuckets(prepared.whole.trace, std::max<int64_t>(plan.dp, 1)),
                   prepared.ddp)
      .WithPrefix(plan_source);
}

// The measured steps' figures (the warm-up step left out).
struct StepSamples {
  std::vector<int64_t> measured, exposed, allreduce;
};

// One step's record into the result: the last step's ops, timeline, buckets
// and cache figures are the result's; every step's time is kept.
void RecordStep(int step, detail::Replayer::StepRecord record, const CacheStats& delta,
                const OffloadStats& io_before, const OffloadEngine& engine,
                const traces::WholeStep& whole, const ReplayOptions& options, StepSamples& samples,
                ReplayResult& result) {
  result.step_times_ns.push_back(record.time_ns);
  if (step > 0) {
    samples.measured.push_back(record.time_ns);
    samples.exposed.push_back(record.exposed_io_ns);
    samples.allreduce.push_back(record.allreduce_ns);
  }
  result.cache = delta;
  if (options.dirs.size() > 1) {
    const OffloadStats io_after = engine.Stats();
    std::vector<int64_t>& per = result.metrics.ssd_bytes_written_per_drive;
    per.assign(options.dirs.size(), 0);
    for (size_t d = 0; d < per.size(); ++d) {
      per[d] = io_after.bytes_written_per_dir[d] - io_before.bytes_written_per_dir[d];
    }
  }
  result.busy = record.busy;
  for (OpTime& t : record.ops) {
    t.original_op = whole.original_op[static_cast<size_t>(t.op)];
    t.micro_batch = whole.trace.op(t.op).micro_batch;
  }
  if (step > 0) result.measured_step_ops.push_back(record.ops);
  result.ops = std::move(record.ops);
  result.timeline = std::move(record.timeline);
  result.gradient_buckets = std::move(record.buckets);
  for (BucketRun& b : result.gradient_buckets) {
    if (b.after_op == traces::kNoOp) continue;
    b.after_original_op = whole.original_op[static_cast<size_t>(b.after_op)];
    b.micro_batch = whole.trace.op(b.after_op).micro_batch;
  }
  result.tensors_checked = record.checked;
  result.pipeline = record.pipeline;
  result.collectives = record.collectives;
}

// The run's metrics: the medians of the measured steps, tokens/s and TFLOP/s
// from the median step, the peaks the device and the replayer saw.
void Summarize(const StepSamples& samples, const traces::WholeStep& whole, const Device& device,
               const detail::Replayer& replayer, ReplayResult& result) {
  const traces::Trace& trace = whole.trace;
  auto median = [](std::vector<int64_t> v) {  // of an even count: the mean of the middle two
    if (v.empty()) return int64_t{0};
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 == 1 ? v[h] : (v[h - 1] + v[h]) / 2;
  };
  traces::StepMetrics& m = result.metrics;
  m.step_time_ns = median(samples.measured);
  m.exposed_io_ns = median(samples.exposed);
  result.allreduce_ns = median(samples.allreduce);
  const double seconds = static_cast<double>(m.step_time_ns) / 1e9;
  if (seconds > 0) {
    int64_t total_flops = 0;
    for (const traces::Op& op : trace.ops) total_flops += op.flops;
    m.tokens_per_s = static_cast<double>(trace.header.micro_batch * trace.header.seq_len *
                                         whole.plan.num_micro_batches) /
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
  m.peak_gpu_bytes = device.peak_bytes();
  m.peak_activation_bytes = replayer.peak_activation_bytes();
  m.ssd_bytes_written = result.cache.bytes_written;
  m.ssd_bytes_read = result.cache.bytes_read;
  result.verified = result.verify;  // any mismatch returned an error before
}

Result<ReplayResult> ReplayOnRank(const traces::Trace& one_micro_batch,
                                  const traces::Plan& step_plan, const ReplayOptions& options,
                                  const std::string& plan_source,
                                  detail::RankAgreement& agreement) {
  // Everything that can be refused is refused before a device or a file exists.
  SSDTRAIN_ASSIGN_OR_RETURN(const detail::Prepared prepared,
                            detail::Prepare(one_micro_batch, step_plan, options, plan_source));
  const traces::WholeStep& whole = prepared.whole;
  SSDTRAIN_ASSIGN_OR_RETURN(
      detail::DeviceSetup on,
      detail::SetUpDevice(whole.trace, whole.plan, prepared.storage_plan, options, plan_source));
  Device& device = *on.device;
  SSDTRAIN_ASSIGN_OR_RETURN(detail::EngineSetup io,
                            detail::StartEngine(whole.plan, options, device));
  OffloadEngine& engine = *io.engine;
  TensorCache cache(prepared.storage_plan);
  SSDTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<detail::HostStaging> host_memory,
                            HostRegionFor(device, prepared.storage_plan));
  ReplayResult result = DescribeRun(prepared, on, io, options);
  detail::Replayer replayer(whole.trace, options, device, engine, *io.staging, cache,
                            prepared.storage_plan, host_memory.get(), agreement);
  SSDTRAIN_RETURN_IF_ERROR(PlaceReplayer(prepared, options, plan_source, replayer));
  {
    detail::ScopedThreadAffinity helper_affinity(device.helper_cpus());
    SSDTRAIN_RETURN_IF_ERROR(replayer.Init());
  }
  // Every rank set up (exec/step_sync.h).
  SSDTRAIN_RETURN_IF_ERROR(agreement.At(Status::Ok()));
  result.workspace_bytes = replayer.workspace_bytes();
  replayer.set_budget(on.budget);
  StepSamples samples;
  for (int step = 0; step <= options.steps; ++step) {
    const CacheStats before = cache.stats();
    const OffloadStats io_before = engine.Stats();
    auto record = replayer.RunStep(step);
    if (!record.ok()) return record.status();  // "step N: ..."
    const CacheStats delta = cache.stats() - before;
    // Every rank finished this step, its checks included: after the last
    // step's agreement nothing may fail on one rank alone, as the others go
    // on to their next collective (the CLI's gather of the reports).
    const std::string at_step = "step " + std::to_string(step);
    Status checked = CheckStepBytes(step, delta, io_before, engine.Stats());
    if (!checked.ok()) checked = checked.WithPrefix(at_step);
    if (Status all = agreement.At(checked); !all.ok()) {
      return checked.ok() ? all.WithPrefix(at_step) : all;
    }
    if (options.progress) options.progress(StepLine(step, options.steps, *record, delta));
    RecordStep(step, std::move(*record), delta, io_before, engine, whole, options, samples, result);
  }
  Summarize(samples, whole, device, replayer, result);
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

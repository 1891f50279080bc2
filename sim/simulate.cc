#include "sim/simulate.h"

#include <algorithm>
#include <map>
#include <optional>

#include "sim/chunk_times.h"
#include "sim/collective.h"
#include "sim/data_parallel.h"
#include "sim/detail/interleaved_peaks.h"
#include "sim/pipeline.h"
#include "sim/step_timeline.h"
#include "sim/topology.h"
#include "traces/chunks.h"
#include "traces/collective_kind.h"
#include "traces/dp_buckets.h"
#include "traces/duration.h"
#include "traces/step_peaks.h"
#include "traces/storage_plan.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::sim {
namespace {

constexpr double kGiga = 1e9;
constexpr double kTera = 1e12;

// Endurance: days = TBW[TB] / (86.4 · write rate[GB/s]); 86.4 = 86400 s/day / 1000 GB/TB.
constexpr double kSecondsPerDayOverGBPerTB = 86.4;

// The whole step as the pipeline ran it: each stage's forwards and backwards
// (compute lane), its sends and its gradient buckets (network lane).
traces::Timeline PipelineTimeline(const PipelineResult& pipe, const DataParallelStep& dp,
                                  int64_t zero_stage, int64_t optimizer_ns, int64_t v) {
  const std::vector<std::vector<BucketSpan>>& buckets = dp.buckets;
  traces::Timeline tl;
  int64_t end = 0;
  for (const PipelineTask& t : pipe.tasks) {
    traces::Span span;
    span.start_ns = t.start_ns;
    span.end_ns = t.end_ns;
    span.stage = static_cast<int>(t.stage);
    span.micro_batch = static_cast<int>(t.micro_batch);
    switch (t.kind) {
      case PipelineTask::Kind::kForward:
        span.name = "forward";
        break;
      case PipelineTask::Kind::kBackward:
        span.name = "backward";
        break;
      case PipelineTask::Kind::kSendForward:
        span.lane = traces::Lane::kNetwork;
        span.name = "send activations";
        break;
      case PipelineTask::Kind::kSendBackward:
        span.lane = traces::Lane::kNetwork;
        span.name = "send gradients";
        break;
    }
    if (v > 1) span.name += " chunk " + std::to_string(t.chunk);
    end = std::max(end, t.end_ns);
    tl.spans.push_back(std::move(span));
  }
  for (size_t s = 0; s < buckets.size(); ++s) {
    for (const BucketSpan& b : buckets[s]) {
      if (b.bytes == 0) continue;  // an expert bucket at ep = dp: not exchanged
      traces::Span span;
      span.lane = traces::Lane::kNetwork;
      span.start_ns = b.start_ns;
      span.end_ns = b.end_ns;
      span.stage = static_cast<int>(s);
      span.name = zero_stage == 1   ? "data-parallel reduce-scatter"
                  : zero_stage >= 2 ? "replica all-reduce (HSDP)"
                                    : "data-parallel all-reduce";
      span.bytes = b.bytes;
      end = std::max(end, b.end_ns);
      tl.spans.push_back(std::move(span));
    }
  }
  for (size_t s = 0; s < buckets.size(); ++s) {
    if (optimizer_ns > 0) {
      traces::Span span;
      span.start_ns = end;
      span.end_ns = end + optimizer_ns;
      span.stage = static_cast<int>(s);
      span.name = "optimizer";
      tl.spans.push_back(std::move(span));
    }
    if (dp.stage_all_gather_ns[s] > 0) {
      traces::Span span;
      span.lane = traces::Lane::kNetwork;
      span.start_ns = end + optimizer_ns;
      span.end_ns = span.start_ns + dp.stage_all_gather_ns[s];
      span.stage = static_cast<int>(s);
      span.name = "data-parallel parameter all-gather";
      tl.spans.push_back(std::move(span));
    }
  }
  return tl;
}

int64_t OffloadableBytes(const traces::Trace& trace) {
  int64_t bytes = 0;
  for (traces::TensorId t : traces::OffloadCandidates(trace)) {
    bytes += trace.tensor(trace.StorageOf(t)).bytes;
  }
  return bytes;
}

int64_t SendBytes(const traces::Trace& trace) {
  // Activations leaving a stage: the outputs of its send ops, else one
  // micro-batch's hidden state (s · b · h · 2 bytes).
  int64_t bytes = 0;
  for (const traces::Op& op : trace.ops) {
    if (op.kind == traces::OpKind::kSend) bytes += op.bytes_read;
  }
  if (bytes > 0) return bytes;
  const traces::Header& h = trace.header;
  return h.seq_len * h.micro_batch * h.hidden * 2;
}

}  // namespace

StageSimOptions SharedSsdOptions(const StageResult& alone, StageSimOptions options) {
  const double span = static_cast<double>(std::max<int64_t>(1, alone.step_ns - alone.optimizer_ns));
  auto busy = [&](traces::Lane lane) {
    auto it = alone.lane_busy_ns.find(std::string(traces::ToString(lane)));
    return it == alone.lane_busy_ns.end() ? 0.0
                                          : std::min(1.0, static_cast<double>(it->second) / span);
  };
  options.ssd_read_share = 1.0 - busy(traces::Lane::kSsdWrite) / 2.0;
  options.ssd_write_share = 1.0 - busy(traces::Lane::kSsdRead) / 2.0;
  return options;
}

int64_t HeldByOtherMicroBatches(const traces::Trace& trace, const traces::StoragePlan& plan,
                                int64_t alignment, int64_t in_flight, int64_t v) {
  if (in_flight <= v) return 0;
  return traces::HeldByOtherChunks(traces::BetweenPasses(trace, plan, alignment).device_bytes,
                                   in_flight, v);
}

Result<int64_t> HeldByOtherMicroBatches(const traces::Trace& trace, const traces::Plan& plan,
                                        const HardwareOptions& hw, int64_t in_flight, int64_t v) {
  if (in_flight <= v || plan.memory_budget_bytes <= 0) return int64_t{0};
  SSDTRAIN_ASSIGN_OR_RETURN(const traces::StoragePlan sp, traces::ResolvePlan(trace, plan, "plan"));
  return HeldByOtherMicroBatches(trace, sp, std::max<int64_t>(1, hw.gpu.allocation_alignment_bytes),
                                 in_flight, v);
}

Result<Prediction> Simulate(const std::vector<StageInput>& stages, const HardwareOptions& hw,
                            const SimulateOptions& options) {
  if (stages.empty() || !stages[0].trace || !stages[0].plan) {
    return Status::InvalidArgument("simulate: no stage to simulate");
  }
  const traces::Plan& layout = *stages[0].plan;
  const traces::Trace& first = *stages[0].trace;
  SSDTRAIN_RETURN_IF_ERROR(CheckPrecision(hw, first.header.fp8));
  SSDTRAIN_RETURN_IF_ERROR(CheckAttentionKernel(hw, first.header.attention_kernel));
  if (layout.pp < 1 || layout.dp < 1 || layout.num_micro_batches < 1) {
    return Status::InvalidArgument("plan: pp, dp and num_micro_batches must be >= 1");
  }
  if (first.header.layers > 0 && layout.pp > first.header.layers) {
    return Status::InvalidArgument("plan: pp = " + std::to_string(layout.pp) +
                                   " is more pipeline stages than the model's " +
                                   std::to_string(first.header.layers) + " layers");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(PipelineSchedule schedule, ParseSchedule(layout.schedule));
  const int64_t v = schedule == PipelineSchedule::kInterleaved ? layout.virtual_stages : 1;
  if (schedule == PipelineSchedule::kInterleaved) {
    const std::string why =
        traces::InterleavedError(layout.pp, layout.num_micro_batches, v, first.header.layers);
    if (!why.empty()) return Status::InvalidArgument("plan: virtual_stages: interleaved " + why);
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const traces::DdpImpl ddp,
                            traces::ParseDdpImpl(layout.ddp, "plan: ddp"));
  StageSimOptions so;
  so.gpu = options.gpu >= 0 ? options.gpu : SlowestArray(hw);
  // One micro-batch of one stage shows its ops and transfers; a whole step
  // shows the pipeline (PipelineTimeline) with each stage's ops and transfers
  // placed at its tasks (AddStageSpans; not for interleaved chunks, whose
  // spans stay the pipeline's, so their stages record none).
  so.record_timeline = options.record_timeline && v == 1;
  so.use_trace_measurements = options.use_trace_measurements;

  const int64_t p = layout.pp, m = layout.num_micro_batches;
  const bool whole_step = p > 1 || m > 1;
  so.record_allocations = options.caching_allocator && !whole_step;
  // stages[0] is stage 0, stages.back() the last stage, stages[1] (of three)
  // every stage in between; with fewer inputs the missing ones behave like stage 0.
  auto index_for = [&](int64_t s) -> size_t {
    if (s == p - 1) return stages.size() - 1;
    if (s > 0 && stages.size() >= 3) return 1;
    return 0;
  };
  for (const StageInput& in : stages) {
    if (!in.trace || !in.plan) return Status::InvalidArgument("simulate: missing stage input");
  }
  // Each input's options: the budget less what its stages' other micro-batches
  // (chunks, interleaved) hold (the most of any stage it stands for).
  std::vector<int64_t> most_in_flight(stages.size(), v);
  for (int64_t s = 0; s < p; ++s) {
    int64_t& k = most_in_flight[index_for(s)];
    k = std::max(k, ChunksInFlight(s, p, m, schedule, v));
  }
  so.virtual_stages = v;
  std::vector<StageSimOptions> input_options(stages.size(), so);
  for (size_t i = 0; i < stages.size(); ++i) {
    input_options[i].in_flight = most_in_flight[i];
    input_options[i].storages = stages[i].storages;
  }
  std::vector<StageResult> results;
  for (size_t i = 0; i < stages.size(); ++i) {
    SSDTRAIN_ASSIGN_OR_RETURN(
        StageResult r, SimulateStage(*stages[i].trace, *stages[i].plan, hw, input_options[i]));
    results.push_back(std::move(r));
  }
  // A stage holding k > 1 micro-batches runs one micro-batch's offload writes
  // while another's reads are in flight on the same array, which splits its
  // rate evenly between the two directions. Its micro-batch is simulated again
  // with each direction's rate cut by half the other direction's busy fraction
  // of the micro-batch (alone): rate · (1 − busy_other / (2 · micro-batch time)).
  std::vector<std::optional<StageResult>> shared(results.size());
  std::vector<bool> holds_several(static_cast<size_t>(p), false);
  for (int64_t s = 0; s < p; ++s) {
    if (ChunksInFlight(s, p, m, schedule, v) <= v) continue;
    holds_several[static_cast<size_t>(s)] = true;
    const size_t i = index_for(s);
    const StageResult& alone = results[i];
    if (shared[i] || alone.ssd_bytes_written + alone.ssd_bytes_read == 0) continue;
    SSDTRAIN_ASSIGN_OR_RETURN(StageResult r,
                              SimulateStage(*stages[i].trace, *stages[i].plan, hw,
                                            SharedSsdOptions(alone, input_options[i])));
    shared[i] = std::move(r);
  }
  auto result_for = [&](int64_t s) -> const StageResult& {
    const size_t i = index_for(s);
    return holds_several[static_cast<size_t>(s)] && shared[i] ? *shared[i] : results[i];
  };
  const ArrayFigures array = ArrayFor(hw, so.gpu);
  std::vector<StageTimes> times;
  for (int64_t s = 0; s < p; ++s) {
    const StageResult& r = result_for(s);
    const int64_t fwd = r.forward_end_ns;
    times.push_back(StageTimes{fwd, std::max<int64_t>(0, r.step_ns - fwd - r.optimizer_ns)});
    if (v > 1) {
      ChunkTimes chunks = ChunkTimesOf(*stages[index_for(s)].trace, r, v);
      times.back().chunk_forward_ns = std::move(chunks.forward_ns);
      times.back().chunk_backward_ns = std::move(chunks.backward_ns);
    }
  }
  // The layout's groups on the hardware: the pipeline's send from stage 0 to
  // stage 1 inside one NVLink domain or across (sim/topology.h).
  const traces::Layout ranks = traces::PlanLayout(layout);
  const int64_t send_ns =
      p > 1 ? MessageNs(SendBytes(first), PlaceLayout(ranks, hw).next_stage_within_domain,
                        hw.interconnect)
            : 0;
  SSDTRAIN_ASSIGN_OR_RETURN(PipelineResult pipe, SimulatePipeline(times, m, schedule, send_ns,
                                                                  options.record_timeline, v));

  Prediction out;
  out.pipeline_ns = pipe.makespan_ns;
  out.bubble_fraction = pipe.bubble_fraction;
  out.virtual_stages = v;
  out.pipeline_sends = pipe.sends;
  int64_t optimizer = 0;
  for (const StageResult& r : results) optimizer = std::max(optimizer, r.optimizer_ns);
  out.optimizer_ns = optimizer;
  // Data parallelism: each stage exchanges its gradients in buckets during its
  // last micro-batch's backward (earlier ones accumulate locally); ZeRO-1
  // all-gathers the updated parameters after the optimizer.
  std::vector<StageRun> runs;
  for (int64_t s = 0; s < p; ++s) runs.push_back({stages[index_for(s)].trace, &result_for(s)});
  const DataParallelStep exchange = SimulateDataParallel(runs, pipe, ranks, ddp, hw);
  out.ddp = std::string(traces::ToString(ddp));
  out.allreduce_busy_ns = exchange.busy_ns;
  out.bucket_sm_ns = exchange.bucket_sm_ns;
  out.allreduce_ns = exchange.gradients_done_ns - pipe.makespan_ns;  // not hidden behind backward
  out.param_all_gather_ns = exchange.param_all_gather_ns;
  traces::StepMetrics& mt = out.metrics;
  mt.step_time_ns = exchange.gradients_done_ns + optimizer + exchange.param_all_gather_ns;
  const double step_s = static_cast<double>(mt.step_time_ns) / 1e9;

  std::vector<int64_t> offloadable;
  for (const StageInput& in : stages) offloadable.push_back(OffloadableBytes(*in.trace));
  out.array_write_GBps = array.write_GBps;
  for (int64_t s = 0; s < p; ++s) {
    const StageResult& r = result_for(s);
    const int64_t k = std::max<int64_t>(v, pipe.max_in_flight[static_cast<size_t>(s)]);
    const traces::Trace& stage_trace = *stages[index_for(s)].trace;
    // v = 1: traces::WholeStepPeak, the static walk's rule; interleaved: the
    // chunks in flight's closed form.
    const bool held = traces::LaterPassesHoldGradients(stage_trace, m);
    const int64_t device =
        v > 1 ? (held ? r.peak_gpu_bytes_gradients_held : r.peak_gpu_bytes) +
                    traces::HeldByOtherChunks(r.between_passes_bytes, k, v)
              : traces::WholeStepPeak(
                    {r.peak_gpu_bytes, r.peak_gpu_bytes_gradients_held,
                     r.peak_gpu_bytes_backward_gradients_held, r.between_passes_bytes},
                    k, m, held);
    Prediction::StagePeak peak{
        s, device,
        r.peak_activation_bytes +
            traces::HeldByOtherChunks(r.between_passes_activation_bytes, k, v),
        k};
    if (v > 1 && options.unrolled_interleaved_peaks) {
      SSDTRAIN_RETURN_IF_ERROR(
          detail::InterleavedPeaks(stages[index_for(s)], s, r, layout, hw, &peak));
    }
    peak.offloadable_bytes = offloadable[index_for(s)];
    peak.forward_compute_ns = r.forward_compute_ns;
    peak.max_op_reruns = r.max_op_reruns;
    peak.required_write_GBps =
        traces::RequiredWriteGBps(peak.offloadable_bytes, r.forward_compute_ns);
    out.stage_peaks.push_back(peak);
    mt.peak_gpu_bytes = std::max(mt.peak_gpu_bytes, peak.peak_gpu_bytes);
    mt.peak_activation_bytes = std::max(mt.peak_activation_bytes, peak.peak_activation_bytes);
  }
  // Per-GPU I/O: the busiest stage.
  const StageResult* io = &result_for(0);
  for (int64_t s = 1; s < p; ++s) {
    if (result_for(s).ssd_bytes_written > io->ssd_bytes_written) io = &result_for(s);
  }
  mt.ssd_bytes_written = io->ssd_bytes_written * m;
  for (const int64_t bytes : io->ssd_bytes_written_per_drive) {
    mt.ssd_bytes_written_per_drive.push_back(bytes * m);
  }
  mt.ssd_bytes_read = io->ssd_bytes_read * m;
  mt.required_ssd_write_GBps =
      traces::RequiredWriteGBps(io->ssd_bytes_written, io->forward_compute_ns);
  int64_t exposed = 0;
  double flops = 0;
  for (int64_t s = 0; s < p; ++s) {
    exposed = std::max(exposed, result_for(s).exposed_io_ns);
    flops += static_cast<double>(result_for(s).model_flops);
  }
  mt.exposed_io_ns = exposed * m;
  const int64_t tokens = layout.micro_batch * m * layout.dp * layout.seq_len;
  if (step_s > 0) {
    mt.tokens_per_s = static_cast<double>(tokens) / step_s;
    // flops: one micro-batch over all stages of one model replica (per GPU of its tp group).
    mt.tflops_per_gpu = flops * static_cast<double>(m) / static_cast<double>(p) / step_s / kTera;
  }
  if (mt.ssd_bytes_written > 0 && step_s > 0) {
    const double write_GBps = static_cast<double>(mt.ssd_bytes_written) / step_s / kGiga;
    mt.ssd_lifetime_days = array.endurance_TBW / (kSecondsPerDayOverGBPerTB * write_GBps);
  }
  const StageResult& stage0 = result_for(0);
  out.lane_busy_ns = stage0.lane_busy_ns;
  for (auto& [lane, ns] : out.lane_busy_ns) ns *= m;
  // The optimizer runs once per step, not once per micro-batch, and so do
  // deferred reduce-scatters.
  out.lane_busy_ns[std::string(traces::ToString(traces::Lane::kCompute))] -=
      (m - 1) * stage0.optimizer_compute_ns;
  if (stage0.optimizer_collective_ns > 0) {
    out.lane_busy_ns[std::string(traces::ToString(traces::Lane::kNetwork))] -=
        (m - 1) * stage0.optimizer_collective_ns;
  }
  out.ops = stage0.ops;
  for (const traces::Op& op : first.ops) {
    if (op.kind != traces::OpKind::kCollective) continue;
    const traces::CollectiveKind kind = traces::ClassifyCollective(op);
    if (traces::CollectiveRanks(op, first.header) <= 1) continue;
    const auto i = static_cast<size_t>(op.id);
    if (i >= out.ops.size()) continue;
    Prediction::CollectiveTotal& t = out.collectives[std::string(traces::ToString(kind))];
    t.count += m;
    t.ns += m * (out.ops[i].end_ns - out.ops[i].start_ns);
  }
  out.forwarded_storages = stage0.forwarded_storages;
  out.dropped_writes = stage0.dropped_writes;
  out.recompute_ns = stage0.recompute_ns;
  out.collective_sm_ns = stage0.collective_sm_ns;
  if (so.record_allocations) {
    const AllocatorPeaks peaks = StepsOnCachingAllocator(
        stage0.allocations, stage0.persistent_allocations, GpuMemoryBytes(hw));
    out.peak_reserved_bytes = peaks.reserved_bytes;
    out.reserved_fits = peaks.fits;
  }
  out.peak_host_bytes = stage0.peak_host_bytes;
  for (const StageResult& r : results) {
    out.host_region_bytes = std::max(out.host_region_bytes, r.host_region_bytes * m);
  }
  if (!whole_step) {
    for (StageResult& r : results) {
      auto& spans = out.timeline.spans;
      spans.insert(spans.end(), r.timeline.spans.begin(), r.timeline.spans.end());
      auto& mem = out.timeline.memory;
      if (mem.empty()) mem = r.timeline.memory;
    }
  } else if (options.record_timeline) {
    out.timeline = PipelineTimeline(pipe, exchange, layout.zero_stage, optimizer, v);
    // Interleaved tasks are chunks, not whole micro-batches: their spans stay
    // the pipeline's alone.
    if (v == 1) {
      for (int64_t s = 0; s < p; ++s) AddStageSpans(out.timeline, pipe, s, result_for(s));
    }
  }
  return out;
}

Result<Prediction> Simulate(const traces::Trace& trace, const traces::Plan& plan,
                            const HardwareOptions& hw, const SimulateOptions& options) {
  return Simulate(std::vector<StageInput>{{&trace, &plan}}, hw, options);
}

}  // namespace ssdtrain::sim

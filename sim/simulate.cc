#include "sim/simulate.h"

#include <algorithm>
#include <cmath>

#include "sim/pipeline.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim {
namespace {

constexpr double kGiga = 1e9;
constexpr double kTera = 1e12;
// Endurance: days = TBW[TB] / (86.4 · write rate[GB/s]); 86.4 = 86400 s/day / 1000 GB/TB.
constexpr double kSecondsPerDayOverGBPerTB = 86.4;

int64_t GradientBytes(const traces::Trace& trace) {
  int64_t grads = 0, weights = 0;
  for (const traces::Tensor& t : trace.tensors) {
    if (t.alias_of) continue;
    if (traces::IsWeightGradient(trace, t)) grads += t.bytes;
    if (t.kind == traces::TensorKind::kWeight) weights += t.bytes;
  }
  return grads > 0 ? grads : weights;
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

Result<Prediction> Simulate(const std::vector<StageInput>& stages, const HardwareOptions& hw,
                            const SimulateOptions& options) {
  if (stages.empty() || !stages[0].trace || !stages[0].plan) {
    return Status::InvalidArgument("simulate: no stage to simulate");
  }
  const traces::Plan& layout = *stages[0].plan;
  const traces::Trace& first = *stages[0].trace;
  if (layout.pp < 1 || layout.dp < 1 || layout.num_micro_batches < 1) {
    return Status::InvalidArgument("plan: pp, dp and num_micro_batches must be >= 1");
  }
  if (first.header.layers > 0 && layout.pp > first.header.layers) {
    return Status::InvalidArgument("plan: pp = " + std::to_string(layout.pp) +
                                   " is more pipeline stages than the model's " +
                                   std::to_string(first.header.layers) + " layers");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(PipelineSchedule schedule, ParseSchedule(layout.schedule));
  StageSimOptions so;
  so.gpu = options.gpu >= 0 ? options.gpu : SlowestArray(hw);
  so.record_timeline = options.record_timeline;
  so.use_trace_measurements = options.use_trace_measurements;

  std::vector<StageResult> results;
  for (const StageInput& in : stages) {
    if (!in.trace || !in.plan) return Status::InvalidArgument("simulate: missing stage input");
    SSDTRAIN_ASSIGN_OR_RETURN(StageResult r, SimulateStage(*in.trace, *in.plan, hw, so));
    results.push_back(std::move(r));
  }
  const int64_t p = layout.pp, m = layout.num_micro_batches;
  // The last stage uses the last result; every other stage behaves like stage 0.
  auto result_for = [&](int64_t s) -> const StageResult& {
    return s == p - 1 ? results.back() : results[0];
  };
  std::vector<StageTimes> times;
  for (int64_t s = 0; s < p; ++s) {
    const StageResult& r = result_for(s);
    const int64_t fwd = r.forward_end_ns;
    times.push_back(StageTimes{fwd, std::max<int64_t>(0, r.step_ns - fwd - r.optimizer_ns)});
  }
  const int64_t send_ns =
      p > 1 ? static_cast<int64_t>(std::ceil(static_cast<double>(SendBytes(first)) /
                                                 (hw.interconnect.pp_GBps * kGiga) * 1e9 +
                                             hw.interconnect.latency_us * 1e3))
            : 0;
  SSDTRAIN_ASSIGN_OR_RETURN(PipelineResult pipe, SimulatePipeline(times, m, schedule, send_ns));

  Prediction out;
  out.pipeline_ns = pipe.makespan_ns;
  out.bubble_fraction = pipe.bubble_fraction;
  int64_t optimizer = 0, grad_bytes = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    optimizer = std::max(optimizer, results[i].optimizer_ns);
    grad_bytes = std::max(grad_bytes, GradientBytes(*stages[i].trace));
  }
  out.optimizer_ns = optimizer;
  out.allreduce_ns =
      RingAllReduceNs(grad_bytes, layout.dp, hw.interconnect.dp_GBps, hw.interconnect.latency_us);
  traces::StepMetrics& mt = out.metrics;
  mt.step_time_ns = pipe.makespan_ns + optimizer + out.allreduce_ns;
  const double step_s = static_cast<double>(mt.step_time_ns) / 1e9;

  for (int64_t s = 0; s < p; ++s) {
    const StageResult& r = result_for(s);
    const int64_t k = std::max<int64_t>(1, pipe.max_in_flight[static_cast<size_t>(s)]);
    mt.peak_gpu_bytes =
        std::max(mt.peak_gpu_bytes, r.peak_gpu_bytes + (k - 1) * r.kept_activation_bytes);
    mt.peak_activation_bytes = std::max(
        mt.peak_activation_bytes, r.peak_activation_bytes + (k - 1) * r.kept_activation_bytes);
  }
  // Per-GPU I/O: the busiest simulated stage.
  const StageResult* io = &results[0];
  for (const StageResult& r : results) {
    if (r.ssd_bytes_written > io->ssd_bytes_written) io = &r;
  }
  mt.ssd_bytes_written = io->ssd_bytes_written * m;
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
    const ArrayFigures array = ArrayFor(hw, so.gpu);
    const double write_GBps = static_cast<double>(mt.ssd_bytes_written) / step_s / kGiga;
    mt.ssd_lifetime_days = array.endurance_TBW / (kSecondsPerDayOverGBPerTB * write_GBps);
  }
  out.lane_busy_ns = results[0].lane_busy_ns;
  for (auto& [lane, ns] : out.lane_busy_ns) ns *= m;
  // The optimizer runs once per step, not once per micro-batch.
  out.lane_busy_ns["compute"] -= (m - 1) * results[0].optimizer_ns;
  out.ops = results[0].ops;
  out.forwarded_storages = results[0].forwarded_storages;
  out.dropped_writes = results[0].dropped_writes;
  out.recompute_ns = results[0].recompute_ns;
  out.peak_host_bytes = results[0].peak_host_bytes;
  for (StageResult& r : results) {
    auto& spans = out.timeline.spans;
    spans.insert(spans.end(), r.timeline.spans.begin(), r.timeline.spans.end());
    auto& mem = out.timeline.memory;
    if (mem.empty()) mem = r.timeline.memory;
  }
  return out;
}

Result<Prediction> Simulate(const traces::Trace& trace, const traces::Plan& plan,
                            const HardwareOptions& hw, const SimulateOptions& options) {
  return Simulate(std::vector<StageInput>{{&trace, &plan}}, hw, options);
}

nlohmann::json PredictionToJson(const Prediction& p) {
  nlohmann::json j = traces::ToJson(p.metrics);
  nlohmann::json lanes = nlohmann::json::object();
  for (const auto& [lane, ns] : p.lane_busy_ns) lanes[lane] = ns;
  j["lane_busy_ns"] = lanes;
  nlohmann::json ops = nlohmann::json::array();
  for (size_t i = 0; i < p.ops.size(); ++i) {
    ops.push_back({{"op", static_cast<int64_t>(i)},
                   {"start_ns", p.ops[i].start_ns},
                   {"end_ns", p.ops[i].end_ns}});
  }
  j["ops"] = ops;
  j["details"] = {{"pipeline_ns", p.pipeline_ns},
                  {"allreduce_ns", p.allreduce_ns},
                  {"optimizer_ns", p.optimizer_ns},
                  {"bubble_fraction", p.bubble_fraction},
                  {"forwarded_storages", p.forwarded_storages},
                  {"dropped_writes", p.dropped_writes},
                  {"recompute_ns_per_micro_batch", p.recompute_ns},
                  {"peak_host_bytes", p.peak_host_bytes}};
  return j;
}

traces::StepReport PredictionReport(const Prediction& p, const traces::Trace& trace,
                                    const traces::Plan& plan, const HardwareOptions& hw) {
  traces::StepReport r;
  r.kind = "prediction";
  r.model = trace.header.model;
  r.trace_fingerprint = traces::Fingerprint(trace);
  r.policy = plan.policy;
  r.source = hw.name;
  r.metrics = p.metrics;
  r.layout = traces::LayoutOf(plan);
  for (traces::Lane l : traces::kBusyLanes) {
    const std::string lane(traces::ToString(l));
    auto it = p.lane_busy_ns.find(lane);
    r.lane_busy_ns[lane] = it == p.lane_busy_ns.end() ? 0 : it->second;
  }
  for (size_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].start_ns < 0) continue;
    r.ops.push_back(
        traces::OpTiming{static_cast<traces::OpId>(i), p.ops[i].start_ns, p.ops[i].end_ns});
  }
  r.extra["details"] = PredictionToJson(p)["details"];
  return r;
}

}  // namespace ssdtrain::sim

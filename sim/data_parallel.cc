#include "sim/data_parallel.h"

#include <algorithm>
#include <map>
#include <utility>

#include "traces/storage_plan.h"

namespace ssdtrain::sim {
namespace {

// Megatron's gradient bucket: max(4e7, 1e6 · dp) parameters
// (megatron/core/distributed/distributed_data_parallel.py).
constexpr int64_t kBucketParams = 40'000'000;
constexpr int64_t kBucketParamsPerRank = 1'000'000;

int64_t GradientBytes(const traces::Trace& trace) {
  int64_t grads = 0;
  for (const traces::Tensor& t : trace.tensors) {
    if (!t.alias_of && traces::IsWeightGradient(trace, t)) grads += t.bytes;
  }
  return grads > 0 ? grads : ParameterBytes(trace);
}

struct StageGradients {
  std::vector<GradientReady> gradients;  // ready_ns from the start of the micro-batch's backward
  int64_t bytes_per_param = 2;
};

// A stage's weight gradients in the order its simulated micro-batch's backward
// produced them; a trace without gradient tensors exchanges its weights' size
// when backward ends.
StageGradients GradientsOf(const traces::Trace& trace, const StageResult& r) {
  StageGradients out;
  const int64_t backward_ns =
      std::max<int64_t>(0, r.compute_end_ns - r.backward_start_ns - r.optimizer_ns);
  std::vector<std::pair<int64_t, traces::TensorId>> order;
  for (const traces::Tensor& t : trace.tensors) {
    if (t.alias_of || !traces::IsWeightGradient(trace, t)) continue;
    int64_t ready = backward_ns;
    if (t.producer != traces::kNoOp && r.ops[static_cast<size_t>(t.producer)].end_ns >= 0) {
      ready = std::clamp<int64_t>(
          r.ops[static_cast<size_t>(t.producer)].end_ns - r.backward_start_ns, 0, backward_ns);
    }
    order.emplace_back(ready, t.id);
    out.bytes_per_param = traces::DTypeSize(t.dtype);
  }
  std::sort(order.begin(), order.end());
  for (const auto& [ready, id] : order) {
    out.gradients.push_back(GradientReady{ready, trace.tensor(id).bytes});
  }
  if (out.gradients.empty()) {
    const int64_t bytes = GradientBytes(trace);
    if (bytes > 0) out.gradients.push_back(GradientReady{backward_ns, bytes});
  }
  return out;
}

}  // namespace

int64_t ParameterBytes(const traces::Trace& trace) {
  int64_t bytes = 0;
  for (const traces::Tensor& t : trace.tensors) {
    if (!t.alias_of && t.kind == traces::TensorKind::kWeight) bytes += t.bytes;
  }
  return bytes;
}

DataParallelStep SimulateDataParallel(const std::vector<StageRun>& stages,
                                      const PipelineResult& pipe, int64_t dp, int64_t zero_stage,
                                      const HardwareOptions& hw) {
  const double GBps = hw.interconnect.dp_GBps, latency_us = hw.interconnect.latency_us;
  const CollectiveKind kind = GradientCollective(zero_stage);
  const int64_t bucket_params = std::max(kBucketParams, kBucketParamsPerRank * dp);
  DataParallelStep out;
  out.gradients_done_ns = pipe.makespan_ns;
  out.buckets.resize(stages.size());
  // The gradient order of each distinct stage result (alone or sharing the SSD).
  std::map<const StageResult*, StageGradients> gradients_of;
  std::map<const traces::Trace*, int64_t> param_bytes;
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageRun& run = stages[s];
    auto it = gradients_of.find(run.result);
    if (it == gradients_of.end()) {
      it = gradients_of.emplace(run.result, GradientsOf(*run.trace, *run.result)).first;
    }
    const StageGradients& g = it->second;
    const int64_t begin = pipe.last_backward_start_ns[s];
    const int64_t end = pipe.stage_end_ns[s];
    std::vector<GradientReady> ready;
    for (const GradientReady& x : g.gradients) {
      ready.push_back(GradientReady{std::min(end, begin + x.ready_ns), x.bytes});
    }
    std::vector<BucketSpan>& spans = out.buckets[s];
    spans =
        BucketedCollective(ready, bucket_params * g.bytes_per_param, kind, dp, GBps, latency_us);
    int64_t busy = 0;
    for (const BucketSpan& b : spans) busy += b.end_ns - b.start_ns;
    out.busy_ns = std::max(out.busy_ns, busy);
    if (!spans.empty())
      out.gradients_done_ns = std::max(out.gradients_done_ns, spans.back().end_ns);
    auto params = param_bytes.find(run.trace);
    if (params == param_bytes.end()) {
      params = param_bytes.emplace(run.trace, ParameterBytes(*run.trace)).first;
    }
    const int64_t gather = ParamAllGatherNs(zero_stage, params->second, dp, GBps, latency_us);
    out.stage_all_gather_ns.push_back(gather);
    out.param_all_gather_ns = std::max(out.param_all_gather_ns, gather);
  }
  return out;
}

}  // namespace ssdtrain::sim

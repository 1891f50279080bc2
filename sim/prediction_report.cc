// A prediction (sim/simulate.h) as JSON (PredictionToJson) and as the step
// report `ssdtrain compare` reads beside a measured run (PredictionReport).
#include "sim/simulate.h"
#include "traces/report.h"

namespace ssdtrain::sim {

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
                  {"allreduce_busy_ns", p.allreduce_busy_ns},
                  {"bucket_sm_ns", p.bucket_sm_ns},
                  {"optimizer_ns", p.optimizer_ns},
                  {"param_all_gather_ns", p.param_all_gather_ns},
                  {"ddp", p.ddp},
                  {"bubble_fraction", p.bubble_fraction},
                  {"virtual_stages", p.virtual_stages},
                  {"pipeline_sends", p.pipeline_sends},
                  {"forwarded_storages", p.forwarded_storages},
                  {"dropped_writes", p.dropped_writes},
                  {"recompute_ns_per_micro_batch", p.recompute_ns},
                  {"collective_sm_ns_per_micro_batch", p.collective_sm_ns},
                  {"peak_reserved_bytes", p.peak_reserved_bytes},
                  {"reserved_fits", p.reserved_fits},
                  {"peak_host_bytes", p.peak_host_bytes},
                  {"host_region_bytes", p.host_region_bytes}};
  nlohmann::json stages = nlohmann::json::array();
  for (const Prediction::StagePeak& sp : p.stage_peaks) {
    stages.push_back({{"stage", sp.stage},
                      {"peak_gpu_bytes", sp.peak_gpu_bytes},
                      {"peak_activation_bytes", sp.peak_activation_bytes},
                      {"in_flight", sp.in_flight},
                      {"offloadable_bytes", sp.offloadable_bytes},
                      {"forward_compute_ns", sp.forward_compute_ns},
                      {"required_write_GBps", sp.required_write_GBps}});
  }
  j["details"]["stages"] = stages;
  nlohmann::json collectives = nlohmann::json::object();
  for (const auto& [kind, t] : p.collectives)
    collectives[kind] = {{"count", t.count}, {"ns", t.ns}};
  j["details"]["collectives"] = collectives;
  j["details"]["array_write_GBps"] = p.array_write_GBps;
  return j;
}

traces::StepReport PredictionReport(const Prediction& p, const traces::Trace& trace,
                                    const traces::Plan& plan, const HardwareOptions& hw) {
  traces::StepReport r =
      traces::NewStepReport("prediction", trace, plan, hw.name, traces::LayoutOf(plan));
  r.metrics = p.metrics;
  for (traces::Lane l : traces::kBusyLanes) {
    const std::string lane(traces::ToString(l));
    auto it = p.lane_busy_ns.find(lane);
    r.lane_busy_ns[lane] = it == p.lane_busy_ns.end() ? 0 : it->second;
  }
  for (size_t i = 0; i < p.ops.size(); ++i) {
    if (p.ops[i].start_ns < 0) continue;
    r.ops.push_back(
        traces::TimingOf(trace, static_cast<traces::OpId>(i), p.ops[i].start_ns, p.ops[i].end_ns));
  }
  r.extra["details"] = PredictionToJson(p)["details"];
  return r;
}

}  // namespace ssdtrain::sim

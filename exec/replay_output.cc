// The run file (ToJson(ReplayResult)).
#include <iterator>

#include "exec/replay.h"

namespace ssdtrain::exec {

std::map<std::string, int64_t> LaneBusy::ByLane() const {
  const int64_t ns[] = {compute_ns, d2h_ns, h2d_ns, ssd_write_ns, ssd_read_ns};
  static_assert(std::size(traces::kBusyLanes) == std::size(ns));
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i < std::size(ns); ++i) {
    out[std::string(traces::ToString(traces::kBusyLanes[i]))] = ns[i];
  }
  return out;
}

nlohmann::json ToJson(const ReplayResult& r) {
  nlohmann::json j = traces::ToJson(r.metrics);
  j.erase("peak_gpu_bytes");
  j["peak_device_bytes"] = r.metrics.peak_gpu_bytes;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["io_backend"] = r.io_backend;
  j["direct_io"] = r.direct_io;
  j["steps"] = r.steps;
  j["step_times_ns"] = r.step_times_ns;  // warm-up first
  j["planned_peak_activation_bytes"] = r.planned_peak_activation_bytes;
  j["planned_peak_device_bytes"] = r.planned_peak_device_bytes;
  j["plan_offloaded_bytes"] = r.plan_offloaded_bytes;
  j["plan_host_bytes"] = r.plan_host_bytes;
  j["workspace_bytes"] = r.workspace_bytes;
  j["cache"] = {{"writes", r.cache.writes},
                {"bytes_written", r.cache.bytes_written},
                {"writes_dropped", r.cache.writes_dropped},
                {"bytes_write_dropped", r.cache.bytes_write_dropped},
                {"forwarded", r.cache.forwarded},
                {"bytes_forwarded", r.cache.bytes_forwarded},
                {"reads", r.cache.reads},
                {"bytes_read", r.cache.bytes_read},
                {"evictions", r.cache.evictions},
                {"bytes_evicted", r.cache.bytes_evicted},
                {"host_copies", r.cache.host_copies},
                {"bytes_to_host", r.cache.bytes_to_host},
                {"host_restores", r.cache.host_restores},
                {"bytes_from_host", r.cache.bytes_from_host}};
  j["lane_busy_ns"] = r.busy.ByLane();
  nlohmann::json ops = nlohmann::json::object();
  for (const OpTime& t : r.ops) {
    ops[std::to_string(t.op)] = {{"start_ns", t.start_ns}, {"end_ns", t.end_ns}};
  }
  j["ops"] = std::move(ops);
  j["verify"] = r.verify;
  j["verified"] = r.verified;
  j["tensors_checked"] = r.tensors_checked;
  if (!r.gradient_buckets.empty()) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const BucketRun& b : r.gradient_buckets) {
      buckets.push_back({{"bytes", b.bytes},
                         {"gradients", b.gradients},
                         {"ranks", b.ranks},
                         {"after_op", b.after_op},
                         {"after_original_op", b.after_original_op},
                         {"micro_batch", b.micro_batch},
                         {"posted_ns", b.posted_ns},
                         {"done_ns", b.done_ns}});
    }
    j["gradient_buckets"] = std::move(buckets);
  }
  return j;
}

}  // namespace ssdtrain::exec

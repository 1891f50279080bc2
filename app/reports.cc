#include "app/reports.h"

#include <fmt/format.h>

#include <algorithm>

#include "traces/collective_kind.h"

namespace ssdtrain::app {

traces::StepReport RunReport(const exec::ReplayResult& run, const traces::Trace& trace,
                             const traces::Plan& plan) {
  // What the replay ran: the whole step of the trace's stage (its micro-batches
  // in its schedule); across ranks (as many as the plan's layout has: the
  // replay checked) the plan's layout, every rank of it; one process runs one
  // shard of one stage, so pp 1 and dp 1.
  traces::ReportLayout layout;
  layout.micro_batch = trace.header.micro_batch;
  if (run.ranks > 1) {
    layout.parallel = traces::PlanLayout(plan);
    layout.parallel.pp = std::max<int64_t>(trace.header.pp, 1);  // as the replay placed its ranks
  } else {
    layout.parallel.tp = std::max<int64_t>(trace.header.tp, 1);
    layout.parallel.cp = std::max<int64_t>(trace.header.cp, 1);
    layout.parallel.ep = std::max<int64_t>(trace.header.ep, 1);
    layout.parallel.zero_stage = trace.header.zero_stage;
  }
  layout.num_micro_batches = run.micro_batches;
  layout.schedule = run.schedule;
  layout.zero_shards = trace.header.zero_shards;
  traces::StepReport r = traces::NewStepReport("run", trace, plan, run.device, layout);
  r.metrics = run.metrics;
  r.lane_busy_ns = run.busy.ByLane();
  // Per op, as a prediction has them: micro-batch 0's, under the ids of the
  // single-micro-batch trace (the same ops when the plan has one micro-batch;
  // an interleaved chunk boundary's send and recv repeat no op of it).
  for (const exec::OpTime& t : run.ops) {
    if (t.micro_batch == 0 && t.original_op != traces::kNoOp)
      r.ops.push_back(traces::TimingOf(trace, t.original_op, t.start_ns, t.end_ns));
  }
  r.steps = run.steps;
  if (run.verify) r.verified = run.verified;
  // The executor's own figures (cache, step times, plan checks) ride along.
  nlohmann::json j = exec::ToJson(run);
  for (const char* key :
       {"backend", "io_backend", "direct_io", "step_times_ns", "planned_peak_activation_bytes",
        "planned_peak_device_bytes", "plan_offloaded_bytes", "workspace_bytes", "cache",
        "tensors_checked", "gradient_buckets"}) {
    if (j.contains(key)) r.extra[key] = j[key];
  }
  return r;
}

nlohmann::json CollectivesJson(const exec::CollectiveTraffic& c) {
  nlohmann::json by_kind = nlohmann::json::object();
  for (traces::CollectiveKind kind : traces::kCollectiveKinds) {
    const exec::CollectiveTraffic::Time& t = c.by_kind[static_cast<size_t>(kind)];
    if (t.count > 0)
      by_kind[std::string(traces::ToString(kind))] = {{"count", t.count}, {"ns", t.ns}};
  }
  return {{"pieces_sent", c.pieces_sent},
          {"bytes_sent", c.bytes_sent},
          {"pieces_received", c.pieces_received},
          {"bytes_received", c.bytes_received},
          {"beside_gemm", c.beside_gemm},
          {"prefetched", c.prefetched},
          {"by_kind", by_kind}};
}

std::string CollectivesLine(const exec::CollectiveTraffic& c) {
  int64_t ns = 0;
  std::string kinds;
  for (traces::CollectiveKind kind : traces::kCollectiveKinds) {
    const exec::CollectiveTraffic::Time& t = c.by_kind[static_cast<size_t>(kind)];
    if (t.count == 0) continue;
    ns += t.ns;
    kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", t.count, traces::ToString(kind));
  }
  if (kinds.empty()) return "";
  if (c.beside_gemm > 0) kinds += fmt::format(", {} beside their GEMMs", c.beside_gemm);
  if (c.prefetched > 0) kinds += fmt::format(", {} gathers ahead", c.prefetched);
  return fmt::format(", collectives {:.3f} ms ({})", ns / 1e6, kinds);
}

}  // namespace ssdtrain::app

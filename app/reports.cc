#include "app/reports.h"

#include <algorithm>

namespace ssdtrain::app {

traces::StepReport RunReport(const exec::ReplayResult& run, const traces::Trace& trace,
                             const traces::Plan& plan) {
  // What the replay ran: the whole step of the trace's stage (its micro-batches
  // in its schedule); across ranks (tp × pp × dp of them) every tensor-parallel
  // shard of every stage of the pipeline on each data-parallel replica; one
  // process runs one shard of one stage, so pp 1.
  const int64_t pp = run.ranks > 1 ? trace.header.pp : 1;
  const int64_t tp = std::max<int64_t>(trace.header.tp, 1);
  const int64_t dp = run.ranks > 1 ? run.ranks / (pp * tp) : 1;
  traces::StepReport r =
      traces::NewStepReport("run", trace, plan, run.device,
                            traces::ReportLayout{trace.header.micro_batch, trace.header.tp, pp, dp,
                                                 run.micro_batches, run.schedule});
  r.metrics = run.metrics;
  r.lane_busy_ns = run.busy.ByLane();
  // Per op, as a prediction has them: micro-batch 0's, under the ids of the
  // single-micro-batch trace (the same ops when the plan has one micro-batch).
  for (const exec::OpTime& t : run.ops) {
    if (t.micro_batch == 0) r.ops.push_back(traces::OpTiming{t.original_op, t.start_ns, t.end_ns});
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

}  // namespace ssdtrain::app

// Simulating a plan for one training step: each simulated stage's micro-batch
// (SimulateStage), composed into the pipeline schedule over the plan's
// micro-batches, then the optimizer and the data-parallel gradient all-reduce.
//
// Stages: `stages` holds the traces of the stages that were simulated, with a
// plan for each; stages in between behave like stages[0] (so one trace stands
// for all pp stages when only one is given). Per-GPU figures (bytes, memory)
// are the worst stage's.
//
// Memory with pipelining: a stage that holds k micro-batches in flight needs
// static + (k − 1)·kept_activation_bytes + (single micro-batch peak − static).
//
// Thread-safety: a pure function; safe to call concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/hardware.h"
#include "sim/stage_sim.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/status.h"
#include "traces/timeline.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

struct StageInput {
  const traces::Trace* trace = nullptr;  // not owned; outlives the call
  const traces::Plan* plan = nullptr;    // its placements apply to `trace`
};

struct SimulateOptions {
  int gpu = -1;  // storage array to use; -1: the slowest
  bool record_timeline = true;
  bool use_trace_measurements = true;
};

struct Prediction {
  traces::StepMetrics metrics;
  traces::Timeline timeline;                    // one micro-batch of each simulated stage
  std::map<std::string, int64_t> lane_busy_ns;  // per step, stage 0
  std::vector<OpTiming> ops;                    // stage 0, first micro-batch, by op id
  int64_t pipeline_ns = 0;
  int64_t allreduce_ns = 0;
  int64_t optimizer_ns = 0;
  double bubble_fraction = 0;
  int64_t forwarded_storages = 0;
  int64_t dropped_writes = 0;
  int64_t recompute_ns = 0;  // per micro-batch, stage 0
  int64_t peak_host_bytes = 0;
};

// The layout (micro_batch, pp, dp, num_micro_batches, schedule) comes from
// stages[0].plan.
Result<Prediction> Simulate(const std::vector<StageInput>& stages, const HardwareOptions& hw,
                            const SimulateOptions& options = {});
// One trace standing for every stage.
Result<Prediction> Simulate(const traces::Trace& trace, const traces::Plan& plan,
                            const HardwareOptions& hw, const SimulateOptions& options = {});

// The prediction file: traces::ToJson(metrics) plus "lane_busy_ns",
// "ops" ([{op, start_ns, end_ns}] for stage 0's first micro-batch) and
// "details" (pipeline, all-reduce, bubble, forwarding, recompute).
nlohmann::json PredictionToJson(const Prediction& p);

// The prediction as a step report (traces/report.h), the shape `ssdtrain
// compare` reads against an executor run: kind "prediction", the trace's model
// and fingerprint, the plan's policy, source = the hardware config's name, the
// step metrics, lane_busy_ns (compute, d2h, h2d, ssd_write, ssd_read) and the
// predicted start/end of every op of stage 0's first micro-batch (ops that did
// not run are left out). "details" (PredictionToJson's) goes into `extra`.
traces::StepReport PredictionReport(const Prediction& p, const traces::Trace& trace,
                                    const traces::Plan& plan, const HardwareOptions& hw);

}  // namespace ssdtrain::sim

// Simulating a plan for one training step of m micro-batches over pp pipeline
// stages (GPipe or 1F1B), dp-way data parallel:
// - Each distinct stage's micro-batch is simulated once (SimulateStage: ops,
//   offload I/O, memory); the pipeline schedule composes the stages' forward
//   and backward times over all m micro-batches (sim/pipeline.h), with the
//   activation and gradient sends as transfers on the links between stages.
// - Micro-batches in flight share the SSD: a stage that holds k > 1 of them
//   (1F1B: min(p − i, m) on stage i; GPipe: m) runs one micro-batch's writes
//   while another's reads are in flight, and the array splits its rate evenly
//   between the two directions. Its micro-batch is simulated again with each
//   direction's rate cut by half the other direction's busy fraction of the
//   micro-batch alone, rate · (1 − busy_other / (2 · micro-batch time)), so
//   later writes (later evictions, more memory) and later reads (exposed I/O)
//   show in its times and peak.
// - Memory: a stage holding k micro-batches needs its one-micro-batch peak
//   plus (k − 1)·between_passes_bytes (what a micro-batch holds while it
//   waits between its passes: sim/stage_sim.h), the closed form of the
//   unrolled step that the replay runs (traces::WholeStepStaticPeaks).
//   Interleaved (v chunks per stage, the plan's virtual_stages), a stage
//   holding k chunks needs the one-micro-batch peak (all v chunks of one
//   micro-batch) plus traces::HeldByOtherChunks, ⌈(k − v)·between_passes/v⌉:
//   each chunk holds 1/v of the stage's activations. That is a closed form;
//   with SimulateOptions::unrolled_interleaved_peaks the stage's static peak
//   is instead its whole step's, unrolled as the replay runs it
//   (traces/step_peaks.h), which the chunk boundaries' copies and the
//   chunks' unequal parts make differ from it by a fraction of a percent.
//   With set_to_none weight gradients and m > 1 (traces::LaterPassesHoldGradients)
//   the later passes run beside every gradient micro-batch 0's backward made:
//   a stage's peak is traces::WholeStepPeak of its micro-batch's simulated
//   peaks (alone, with the gradients held, from its backward on with them
//   held; StageResult), the static walk's rule too (WholeStepStaticPeaks), so
//   the printed peak is the unrolled step's at every k and m
//   (tests/set_to_none_fit_test.cc). The budget the stage simulation's
//   backpressure holds a micro-batch to does not count those gradients.
// - Data parallelism: each stage exchanges its weight gradients in buckets
//   of max(4e7, 1e6·dp) parameters (Megatron's) during its last micro-batch's
//   backward, in the order backward produces them (sim/data_parallel.h): an
//   all-reduce per bucket, or with the plan's zero_stage 1 (Megatron's
//   distributed optimizer) a reduce-scatter; only what outlasts the pipeline
//   adds to the step; with the plan's ddp "local" (Megatron's --DDP-impl
//   local) no bucket starts before the stage's step backward has ended, so
//   all of it outlasts the pipeline. Then the optimizer, then ZeRO-1's all-gather of the
//   updated parameters.
// With pp = 1, m = 1, dp = 1 this is exactly SimulateStage's step.
//
// Stages: `stages` holds the traces of the stages that were simulated, with a
// plan for each: stage 0, then (of three) one standing for every middle stage,
// then the last stage; with fewer, a missing middle or last stage behaves like
// stage 0 (so one trace stands for all pp stages when only one is given).
// Per-GPU figures (bytes, memory) are the worst stage's.
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
#include "traces/storage_plan.h"
#include "traces/timeline.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

struct StageInput {
  const traces::Trace* trace = nullptr;  // not owned; outlives the call
  const traces::Plan* plan = nullptr;    // its placements apply to `trace`
  // Optional: the trace's traces::ResolveStorages, for a search that
  // simulates many plans of one trace (StageSimOptions::storages).
  const traces::StoragePlan* storages = nullptr;
};

struct SimulateOptions {
  int gpu = -1;  // storage array to use; -1: the slowest
  bool record_timeline = true;
  bool use_trace_measurements = true;
  // Interleaved: each stage's peaks from its whole step unrolled
  // (traces/step_peaks.h: exactly what the replay holds) instead of the
  // closed form ⌈(k − v)·between_passes/v⌉ (below). The unrolling costs about
  // a stage's ops × m per stage, so the planner's search ranks by the closed
  // form and judges its winner by this (sim/planner.h).
  bool unrolled_interleaved_peaks = false;
  // One micro-batch of one stage (pp 1, one micro-batch a step): also what
  // PyTorch's caching allocator would reserve for the step's allocations
  // (sim/caching_allocator.h; Prediction::peak_reserved_bytes). Off in a
  // search; the planner sets it for the plan it returns.
  bool caching_allocator = false;
};

struct Prediction {
  traces::StepMetrics metrics;
  // pp = 1, m = 1: the stage's ops and transfers; a whole step: each stage's
  // forwards, backwards, sends, gradient buckets and optimizer (PipelineTimeline),
  // with its ops and transfers in every forward and backward (step_timeline.h).
  traces::Timeline timeline;
  std::map<std::string, int64_t> lane_busy_ns;  // per step, stage 0
  std::vector<OpTiming> ops;                    // stage 0, first micro-batch, by op id
  int64_t pipeline_ns = 0;
  // The data-parallel gradient exchange (all-reduce, or ZeRO-1's reduce-scatter)
  // not hidden behind backward, and all of it (the busiest stage's buckets).
  // The first includes what the buckets' SMs cost the last backward beside
  // them (bucket_sm_ns, sim/data_parallel.h), which ends that much later.
  int64_t allreduce_ns = 0;
  int64_t allreduce_busy_ns = 0;
  int64_t bucket_sm_ns = 0;
  std::string ddp = "overlapped";  // the plan's (traces::DdpImpl): when the buckets may start
  int64_t optimizer_ns = 0;
  int64_t param_all_gather_ns = 0;  // ZeRO-1, 2: after the optimizer, the longest stage's
  double bubble_fraction = 0;
  int64_t virtual_stages = 1;  // interleaved: model chunks per stage
  int64_t pipeline_sends = 0;  // point-to-point sends per step (sim/pipeline.h)
  int64_t forwarded_storages = 0;
  int64_t dropped_writes = 0;
  int64_t recompute_ns = 0;  // per micro-batch, stage 0
  // Per micro-batch, stage 0: what its compute lost to the SMs of the NCCL
  // collectives beside it on side streams (StageResult::collective_sm_ns).
  int64_t collective_sm_ns = 0;
  // SimulateOptions::caching_allocator: torch.cuda.max_memory_reserved after
  // three steps on PyTorch's caching allocator (StepsOnCachingAllocator, the
  // device's usable memory its capacity) and whether they fit; 0 where not
  // modelled (a whole step of several micro-batches or stages).
  int64_t peak_reserved_bytes = 0;
  bool reserved_fits = true;
  // Stage 0's tensor-parallel collectives in a step, by kind
  // (traces::ToString(CollectiveKind)): how many, and their time (each
  // micro-batch's ops as the first one's, op by op; recomputes left out).
  struct CollectiveTotal {
    int64_t count = 0;
    int64_t ns = 0;
  };
  std::map<std::string, CollectiveTotal> collectives;
  int64_t peak_host_bytes = 0;  // stage 0's one micro-batch: host copies and bounce staging
  // The pinned offload-host regions a replay of the step holds on the worst
  // stage: m micro-batches' regions (traces::UnrollStep gives each its own).
  int64_t host_region_bytes = 0;
  // Each pipeline stage's peaks (metrics holds their maximum); stage 1 stands
  // for the stages between the first and the last, as in the simulation.
  struct StagePeak {
    int64_t stage = 0;
    int64_t peak_gpu_bytes = 0, peak_activation_bytes = 0;
    int64_t in_flight = 1;  // chunks the stage holds at once (micro-batches, v = 1)
    // What offloading the stage would ask of its drives: the saved activations
    // a plan may offload (traces::OffloadCandidates, each storage once) of one
    // micro-batch, written behind its forward compute, at
    // traces::RequiredWriteGBps of them.
    int64_t offloadable_bytes = 0;
    int64_t forward_compute_ns = 0;
    double required_write_GBps = 0;
    // The most recompute runs of one op in a micro-batch (StageResult::max_op_reruns).
    int64_t max_op_reruns = 0;
  };
  // What the stage's drives write (sim::ArrayFor: the array a GPU uses).
  double array_write_GBps = 0;
  std::vector<StagePeak> stage_peaks;
};

// The rates a micro-batch gets on a stage holding several (above): each SSD
// direction cut by half the other direction's busy fraction of `alone`, the
// micro-batch simulated by itself.
StageSimOptions SharedSsdOptions(const StageResult& alone, StageSimOptions options);
// What a stage's other micro-batches hold while one runs, as the budget sees it:
// traces::HeldByOtherChunks of traces::BetweenPasses of the plan (its storages
// between the passes with instantaneous I/O: a replay's backpressure lets the
// waiting micro-batches' writes land and evict before it holds the next one
// back), for `in_flight` chunks of `v` per micro-batch: (in_flight − 1) ·
// BetweenPasses with v = 1.
Result<int64_t> HeldByOtherMicroBatches(const traces::Trace& trace, const traces::Plan& plan,
                                        const HardwareOptions& hw, int64_t in_flight,
                                        int64_t v = 1);
// The same on a resolved plan, storages rounded to `alignment`.
int64_t HeldByOtherMicroBatches(const traces::Trace& trace, const traces::StoragePlan& plan,
                                int64_t alignment, int64_t in_flight, int64_t v = 1);

// The layout (micro_batch, pp, dp, zero_stage, num_micro_batches, schedule)
// comes from stages[0].plan.
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

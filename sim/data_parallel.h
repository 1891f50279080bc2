// A step's data-parallel exchange (sim/simulate.h), by ZeRO stage
// (sim/collective.h, GradientCollective): each pipeline stage exchanges its
// weight gradients with its dp peers in its trace's buckets
// (traces/dp_buckets.h: Megatron's max(4e7, 1e6·dp) parameters, in the order
// the backward completes them) during its last micro-batch's backward, each
// bucket once the op that completes it has ended (ddp overlapped), or all of
// them from the end of the stage's pipeline work, its last backward (ddp
// local: traces::BucketsWaitForBackward), each over its group (the routed
// experts' buckets over the expert-data-parallel group of dp / ep ranks,
// nothing at ep = dp; the others over the layout's DenseGradientGroup, dp ×
// cp ranks, HSDP's replica group at stages 2 and 3); zero_stage 0 all-reduces
// each bucket, 1 (Megatron's distributed optimizer) reduce-scatters it and,
// after the optimizer, all-gathers the stage's updated parameters, not hidden
// behind compute (Megatron's overlap_param_gather is off by default); 2 and 3
// (whose traces reduce-scatter each layer's gradients over the shard group
// themselves, models/detail/zero_shard.cc) all-reduce the gradient shards
// over HSDP's replica group (nothing without HSDP), and 2 all-gathers the
// parameters after the optimizer as 1 does. A trace without weight gradients
// exchanges nothing.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/collective.h"
#include "sim/hardware.h"
#include "sim/pipeline.h"
#include "sim/stage_sim.h"
#include "sim/topology.h"
#include "traces/dp_buckets.h"
#include "traces/layout.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

// One pipeline stage as simulated: its trace and its micro-batch's result
// (both not owned; the same pair may stand for several stages).
struct StageRun {
  const traces::Trace* trace = nullptr;
  const StageResult* result = nullptr;
};

struct DataParallelStep {
  // Per stage, one per bucket of its trace's table, in its order.
  std::vector<std::vector<BucketSpan>> buckets;
  // When the last stage's last bucket has ended, never before the pipeline.
  int64_t gradients_done_ns = 0;
  int64_t busy_ns = 0;  // the busiest stage's buckets, end minus start summed
  // What the buckets' collectives' SMs (their tier's collective_sms) cost the
  // last backward beside them, the stage that lost most: it ends that much
  // later (in gradients_done_ns).
  int64_t bucket_sm_ns = 0;
  // ZeRO-1 and 2: the longest stage's parameter all-gather after the optimizer; else 0.
  int64_t param_all_gather_ns = 0;
  std::vector<int64_t> stage_all_gather_ns;  // per stage
};

// `stages[s]` is pipeline stage s; `pipe` is the step's pipeline.
// The layout's dp and ZeRO stage say what is exchanged; its groups, placed on
// the hardware (sim/topology.h, stage by stage), what each bucket costs.
DataParallelStep SimulateDataParallel(const std::vector<StageRun>& stages,
                                      const PipelineResult& pipe, const traces::Layout& layout,
                                      traces::DdpImpl ddp, const HardwareOptions& hw);

// The bytes of the trace's parameters (weights, each storage once): what
// ZeRO-1 and 2 all-gather after the optimizer.
int64_t ParameterBytes(const traces::Trace& trace);
// Of those, the routed experts' (traces::IsRoutedExpert).
int64_t ExpertParameterBytes(const traces::Trace& trace);

// ZeRO-1 and 2's all-gather of the stage's updated parameters after the
// optimizer, placed as `links` says (0 at stages 0 and 3): over
// ParamGatherGroup, but where ep > 1 the routed experts' over their
// expert-data-parallel group, whose ranks hold their state's shards
// (traces::Layout::ExpertOptimizerShards), after the rest (Megatron-Core
// gathers the two buffers one after the other).
int64_t StageParamAllGatherNs(const traces::Trace& trace, const traces::Layout& layout,
                              const LayoutLinks& links, const InterconnectOptions& ic);

}  // namespace ssdtrain::sim

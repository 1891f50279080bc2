// The planner's search: micro-batch size, pipeline depth and schedule (1F1B,
// or interleaved with v model chunks per stage), tensor-parallel degree (up
// to one node's GPUs) and policy, for the highest predicted
// throughput that fits in GPU memory; the remaining factor of the GPU count is
// data parallelism.
//
// Branch and bound: for each layout a cheap analytic bound (compute-only step
// time from the cost model in the closed-form pipeline, plus the part of the
// gradient all-reduce longer than one micro-batch's backward; static memory) orders the layouts and
// prunes those that cannot fit or cannot beat the best simulated plan so far; only the rest are
// simulated, each under every requested policy.
//
// A layout includes its ZeRO stage (and HSDP's shard group when pinned): with
// dp > 1 it is tried with the optimizer state whole (gradients all-reduced),
// sharded over dp (Megatron's distributed optimizer: less static memory, a
// parameter all-gather after the optimizer), the gradients sharded too (ZeRO-2)
// and, at pp 1, the weights too (ZeRO-3, FSDP: each layer gathered beside
// compute), unless PlannerOptions::zero_stage pins it. The bound counts the
// ZeRO collectives only as the link time they need at least.
// A layout includes its context-parallel degree (PlannerOptions::cp): at long
// sequences each cp > 1 that leaves kMinContextTokens a rank cuts the
// sequence over cp ranks (activations and FLOPs 1/cp each), its ring's K/V
// exchanges priced beside the attention steps; the bound counts them as the
// ring link's time, like ZeRO's.
// Within a layout, keep is simulated first: no policy is faster than keeping
// everything, so when keep cannot beat the best plan that fits, the layout's
// other policies are skipped (a search for optimal alone simulates keep too,
// as that bound only, never as its answer).
//
// Each simulated layout plans stage 0, the last stage and (pp > 2) stage 1
// standing for the middle stages, each for its own micro-batches in flight
// (sim/stage_plans.h), and judges them by the whole-step prediction it would
// return: a plan fits when every stage's peak is within the budget
// (sim/fit.h). Interleaved candidates are ranked by the closed form of their
// stage peaks (traces::HeldByOtherChunks); the search's winner is judged by
// the peaks printed, its unrolled steps' (traces/step_peaks.h), and when it does
// not fit by them the search runs again with it judged so (the first plan in
// rank order that fits by the printed figure wins, or none fits). The files: layouts and bound
// (planner_layouts.cc), per-stage plans (stage_plans.cc), the fit rule (fit.cc), the search
// (planner.cc).
//
// The caller supplies the traces (sim does not depend on models): a provider
// called with a TraceShape. Calls are memoised per shape.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/hardware.h"
#include "sim/simulate.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

// The trace the planner asks for: one pipeline stage of one data-parallel
// replica at a layout. dp, zero_stage and dp_shard say what is sharded over
// the shard group (traces/layout.h): at 1 the optimizer state (Megatron's
// distributed optimizer), at 2 the gradients too, at 3 the weights too, with
// the trace's gathers and reduce-scatters; with 0, dp changes nothing in the
// trace.
struct TraceShape {
  int64_t micro_batch = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t stage = 0;
  int64_t dp = 1;
  int64_t zero_stage = 0;  // 0 to 3
  int64_t ep = 1;          // expert parallelism: E/ep experts per MoE layer here
  int64_t dp_shard = 0;    // HSDP: the shard group's dp ranks; 0: dp
  int64_t cp = 1;          // context parallelism: seq_len / cp tokens here
  // The pipeline split (traces/layout.h): the first and the last stage's
  // blocks; 0: the even split.
  int64_t pp_first_layers = 0;
  int64_t pp_last_layers = 0;
  auto operator<=>(const TraceShape&) const = default;
  // Stage `stage`'s trace at `plan`'s layout: the one mapping of a plan to
  // the trace it was made for (plan, replay and the tests use it).
  static TraceShape Of(const traces::Plan& plan, int64_t stage);
};

using TraceProvider = std::function<Result<traces::Trace>(const TraceShape& shape)>;

// The context-parallel degrees an unpinned search weighs (PlannerOptions::cp):
// each rank keeps at least this many tokens of a sequence (below it the
// ring's steps are short and its exchanges exposed; NeMo's shortest cp runs
// keep 4096), and cp goes no higher than this.
inline constexpr int64_t kMinContextTokens = 4096;
inline constexpr int64_t kMaxContextParallel = 32;

struct PlannerOptions {
  int64_t gpus = 1;
  std::string policy = "auto";         // a policy name, or auto: every fixed policy and optimal
  int64_t memory_budget_bytes = 0;     // 0: the GPU's capacity
  std::optional<int64_t> micro_batch;  // fixed micro-batch; else 1, 2, 4, ... up to 16
  int64_t global_batch = 0;            // sequences per step; 0: micro_batch · dp · m
  // Pins (`ssdtrain plan --tp --pp --dp --num-micro-batches --schedule`): a
  // set field fixes that part of the layout and the search covers the rest.
  // Impossible pins are errors naming the flag and the reason (tp must divide
  // the heads and the GPUs, pp the layers, tp·pp·dp must equal the GPUs, the
  // global batch must be micro_batch · dp · m). An unpinned tp ranges over
  // powers of two up to one node; a pinned one may span nodes.
  std::optional<int64_t> tp;
  std::optional<int64_t> pp;
  // The pipeline split (`--pp-first-layers`, `--pp-last-layers`;
  // traces/layout.h): pinned only with pp. Unpinned, a pp that divides the
  // layers splits them evenly, and one that does not gets
  // traces::DefaultUnevenSplit (a pp it gives none is not tried).
  std::optional<int64_t> pp_first_layers;
  std::optional<int64_t> pp_last_layers;
  std::optional<int64_t> dp;
  std::optional<int64_t> num_micro_batches;  // else global_batch / (micro_batch · dp), or 2·pp
  // The ZeRO stage (`ssdtrain plan --zero-stage`; traces/layout.h): 0 to 3
  // pins it; unset, every layout with dp > 1 is tried with 0, 1 and 2, and
  // with 3 at pp 1 (the sharded state fits where the whole one may not; its
  // gathers and reduce-scatters cost time where compute does not hide them),
  // and dp = 1 with 0. ZeRO-3 is left to a pin with pipelining, as the
  // frameworks run it: torchtitan keeps the weights gathered between forward
  // and backward under pp (reshard_after_forward off: ZeRO-2's memory), and
  // Megatron's torch FSDP2 refuses pp (TODAYS_LAYOUTS.md, 1.1 and 1.3).
  std::optional<int64_t> zero_stage;
  // The FP8 recipe the traces train under (traces/fp8.h; "" none): unpinned,
  // ZeRO-3 is not tried with it, nor ZeRO >= 2 with ep > 1 (traces::Unmodelled,
  // which the config's validation follows too); pinned, such pairs are refused.
  std::string fp8;
  // The blocks are built with separate projections (models: projections
  // "separate", torchtitan's Llama): auto and `plan --compare` also try
  // recompute-sac, torchtitan's per-op checkpointing, which on Megatron's
  // fused block is no framework's policy.
  bool separate_projections = false;
  // HSDP (`--dp-shard`): the shard group's dp ranks, a divisor of dp; unset,
  // the whole of dp (one shard group).
  std::optional<int64_t> dp_shard;
  // When the data-parallel gradients are exchanged (`--ddp`, the plan's ddp:
  // traces::DdpImpl), "overlapped" or "local": a property of the training
  // framework, not of the layout, so every layout gets it and none is
  // searched over it.
  std::string ddp = "overlapped";
  // "1f1b", "gpipe" or "interleaved"; unset: 1f1b (never slower than GPipe in
  // this model: the same makespan for equal stages, fewer micro-batches held)
  // and interleaved: each layout with pp >= 2 and m a multiple of pp is also
  // tried with the most model chunks per stage v that divides layers / pp, up
  // to 8 (the least bubble and memory), and the winning layout with every
  // other such v from 2 (fewer sends; detail::VirtualStagesToTry).
  std::optional<std::string> schedule;
  // `--virtual-stages`: pins v (needs schedule "interleaved"; layers must
  // divide by pp·v and m be a multiple of pp).
  std::optional<int64_t> virtual_stages;
  // Expert parallelism (`--ep`), for a model with `experts` > 0 routed experts
  // per MoE layer: pinned, or every power of two dividing both the experts and
  // dp (ep · tp divides dp · tp, Megatron-Core's rule with the experts split
  // over tp), with ZeRO stage 0 where ep > 1. A dense model (experts 0) keeps
  // ep 1 and its search; --ep > 1 on it is refused.
  std::optional<int64_t> ep;
  int64_t experts = 0;
  // Context parallelism (`--cp`; traces/layout.h): pinned, or every power of
  // two up to kMaxContextParallel that leaves each rank at least
  // kMinContextTokens of the sequence and splits it (2·cp chunks, of tp
  // pieces each under sequence parallelism: traces::SequenceSplitError), with
  // tp · cp · pp dividing the GPUs. `cp_refusal` says why the model cannot
  // run context-parallel (models::ContextParallelRefusal); then cp stays 1
  // and a pin above 1 is refused with it.
  std::optional<int64_t> cp;
  int64_t seq_len = 0;
  bool sequence_parallel = false;
  std::string cp_refusal;
  int64_t layers = 0;  // the model's blocks (split over pp: traces::PipelineSplitError)
  int64_t heads = 0;   // tp must divide it
  // Why the model cannot run at a tensor-parallel degree, "" where it can
  // (models::TensorParallelRefusal: the heads, key/value heads and widths tp
  // splits); unset, `heads` alone decides (a captured trace's).
  std::function<std::string(int64_t tp)> tp_refusal;
  // Why the stages between the first and the last of a pipeline (its pp and
  // split, traces::Layout) are not alike, or why the model does not pipeline
  // so (an encoder-decoder model interleaved), "" where it does
  // (models::PipelineStagesRefusal): stage 1 stands for them all. Unset: alike.
  std::function<std::string(const traces::Layout&)> pp_refusal;
  bool allow_host_offload = true;  // false: auto skips offload-host; optimal never uses host
  // What recompute-selective rebuilds (sim/policy.h, PolicyOptions).
  std::vector<std::string> recompute_modules = {"core_attn"};
  // Which blocks recompute-full rebuilds: every N-th (sim/policy.h, PolicyOptions).
  int64_t recompute_every = 1;
  // What megatron-offload moves (sim/policy.h, PolicyOptions).
  std::vector<std::string> offload_modules = {"core_attn", "attn_proj", "expert_fc1"};
  std::function<void(const std::string&)> progress;  // one line per event; may be empty
  bool record_timeline = false;  // the chosen plan's predicted timeline in prediction.timeline
  // Threads for the optimizer's per-stage searches (sim/stage_plans.h); 0: one
  // per hardware thread. The result does not depend on it.
  int threads = 0;
};

struct PlannerResult {
  bool fits = false;  // false: `plan` is the lowest-memory plan found
  traces::Plan plan;  // with prediction set
  Prediction prediction;
  int64_t over_budget_bytes = 0;  // when !fits: peak minus budget
  // When !fits for want of pinned host memory or disk (sim/fit.h
  // HostAndDiskShortfall): why; empty otherwise.
  std::string shortfall;
  int64_t layouts = 0, simulated_layouts = 0, simulations = 0;
  nlohmann::json rok = nlohmann::json::array();  // best layout: per policy memory vs step time
  // The plans of the other simulated stages (stage 1 standing for the middle
  // ones when pp > 2, then the last stage when pp > 1), by stage index; a
  // middle stage k > 1 runs stage 1's plan (RetargetPlan onto its trace).
  std::vector<std::pair<int64_t, traces::Plan>> stage_plans;
  // When the chosen plan is interleaved: the same layout and policy under
  // 1F1B, for the summary ("interleaved v=2 beats 1f1b by X%: bubble a → b").
  struct ScheduleComparison {
    int64_t virtual_stages = 0;
    double tokens_per_s = 0, one_f_one_b_tokens_per_s = 0;
    double bubble_fraction = 0, one_f_one_b_bubble_fraction = 0;
    bool one_f_one_b_fits = false;
  };
  std::optional<ScheduleComparison> interleaved_vs_1f1b;
};

Result<PlannerResult> SearchPlan(const TraceProvider& provider, const HardwareOptions& hw,
                                 const PlannerOptions& options);

}  // namespace ssdtrain::sim

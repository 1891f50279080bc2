// `ssdtrain plan`'s options, and what the search plans from (app/plan_cmd.cc):
// a model config or a captured trace, and the plans of a pipeline's other
// stages put into the plan file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/plan_budget.h"
#include "sim/planner.h"
#include "sim/stage_plans.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::app {

struct PlanCmdOptions {
  std::string model, trace, hardware, output, timeline, policy = "auto";
  int64_t gpus = 0;  // 0: 1 from --model; from --trace, its tp·pp (TakeTraceShape)
  double memory_budget_GiB = 0;
  std::string prediction;
  int64_t micro_batch = 0;
  int64_t seq_len = 0;
  int64_t global_batch = 0;
  // Pins: 0 (or empty) leaves that part of the layout to the search.
  int64_t tp = 0, pp = 0, dp = 0, num_micro_batches = 0;
  int64_t pp_first_layers = 0, pp_last_layers = 0;  // the pipeline split; 0: searched with pp
  int64_t cp = 0;                                   // context parallelism; 0: searched
  int64_t zero_stage = -1;              // -1: weigh 0 to 3 (--model); with --trace, the trace's
  int64_t dp_shard = 0;                 // HSDP's shard group (--dp-shard); 0: dp
  bool defer_grad_sync = false;         // --defer-grad-sync: ZeRO 2/3 reduce-scatter once a step
  bool sequence_parallel = false;       // --sequence-parallel: on where tp > 1, over the config
  bool tp_comm_overlap = false;         // --tp-comm-overlap: TE's userbuffers, over the config
  bool no_tp_backward_overlap = false;  // --no-tp-backward-overlap: tp backward in order
  std::string attention;                // --attention standard|flash; "": the model config's
  std::string attention_kernel;         // --attention-kernel NAME; "": the model config's
  std::string projections;              // --projections fused|separate; "": the model config's
  // --rotary, --gqa, --norm (traces::kBlockKernels); each "": the model config's.
  traces::BlockKernels block_kernels;
  std::string grad_dtype;  // --grad-dtype fp16|bf16|fp32; "": the model config's
  std::string fp8;         // --fp8 RECIPE|off; "": the model config's
  int64_t ep = 0;          // expert parallelism (MoE models); 0: searched
  std::string schedule;
  int64_t virtual_stages = 0;      // 0: searched (with --schedule interleaved)
  std::string ddp = "overlapped";  // --ddp: when the dp gradients go (traces::DdpImpl)
  bool rok = false;
  bool compare = false;      // every policy at one global batch (app/plan_compare.h)
  std::string compare_json;  // --json: the comparison as JSON
  bool no_host_offload = false;
  // --recompute-modules: what recompute-selective rebuilds (sim/policy.h).
  std::vector<std::string> recompute_modules = {"core_attn"};
  // --recompute-every: which blocks recompute-full rebuilds (sim/policy.h).
  int64_t recompute_every = 1;
  // --offload-modules: what megatron-offload moves (sim/policy.h).
  std::vector<std::string> offload_modules = {"core_attn", "attn_proj", "expert_fc1"};
};

// The search's input: a model config (every layout the planner tries is built
// from it), or a captured trace (ssdtrain.capture), which exists at one shape
// only, so the search is pinned to it.
struct PlanInput {
  std::string name;
  int64_t layers = 0, heads = 0;
  int64_t experts = 0;  // routed experts per MoE layer; 0: dense (ep stays 1)
  // Context parallelism: the whole sequence, sequence parallelism, and why the
  // model cannot run context-parallel ("" where it can; sim::PlannerOptions::cp).
  int64_t seq_len = 0;
  bool sequence_parallel = false;
  std::string cp_refusal;
  // Why the model cannot run at a tp ("" where it can; sim::PlannerOptions::
  // tp_refusal); unset for a captured trace.
  std::function<std::string(int64_t)> tp_refusal;
  // models::PipelineStagesRefusal for a model config; unset for a trace.
  std::function<std::string(const traces::Layout&)> pp_refusal;
  std::string fp8;               // the FP8 recipe its traces train under (traces/fp8.h); "" none
  std::string attention_kernel;  // the fused attention kernel its traces name; "" none
  // Its blocks have separate projections (sim::PlannerOptions::separate_projections).
  bool separate_projections = false;
  sim::TraceProvider provider;
  std::function<Result<traces::Trace>(const traces::Plan&)> stage0;
  // The command that builds the plan's (stage 0) trace; empty for a captured trace.
  std::function<std::string(const traces::Plan&)> trace_command;
  std::string trace_path;  // captured: the trace itself; else empty
  int64_t stage = 0;       // captured: the trace's pipeline stage
  // --model: the layout its config states, which the search may override.
  std::optional<ConfigLayout> config;
};

// Runs `ssdtrain plan` (app/plan_cmd.cc); its exit status.
int RunPlan(PlanCmdOptions o);

// Reads the trace and sets `o`'s shape and GPU count from it (TakeTraceShape).
Result<PlanInput> TraceInput(PlanCmdOptions& o);

// Builds every layout the planner tries from --model (--seq-len,
// --attention and --defer-grad-sync applied).
Result<PlanInput> ModelInput(const PlanCmdOptions& o);

// With pp > 1, the plan of every other stage goes into the plan file
// (extra.stage_plans: [{stage, plan}]): the planner's own for stage 1 and the
// last stage, and for stages between them the policy of its stage 1 applied
// to each stage's trace, eviction points placed alike (the simulator lets
// stage 1 stand for them). Each
// rank of `mpirun ... ssdtrain replay` replays its stage's.
Status AttachStagePlans(const PlanInput& in, const sim::PlannerResult& r, traces::Plan& plan);

}  // namespace ssdtrain::app

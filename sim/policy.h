// Policies: each turns a trace (one stage, one micro-batch) into a plan that
// says, per saved tensor, keep / offload-ssd / offload-host / recompute.
//
//   keep                 nothing moves
//   recompute-full       layerwise checkpointing: every saved activation of a
//                        block except its input is rebuilt in backward, all
//                        of the block's at once where backward first reads
//                        one (SetRerunPoints, below); with
//                        PolicyOptions::recompute_every N > 1, every N-th
//                        block of the stage only (torchtitan's selective
//                        per-layer checkpointing)
//   recompute-selective  Megatron's selective recompute of the modules
//                        PolicyOptions::recompute_modules names: core_attn
//                        (the default: the attention core's scores, softmax
//                        and attention dropout) and mla_up_proj (multi-head
//                        latent attention's query, key and value,
//                        traces::kMlaUpScope), each module of a block re-run
//                        whole as its own region
//   recompute-sac        torchtitan's per-op selective activation
//                        checkpointing (selective_ac_option "op"): in each
//                        block, the outputs of every other linear GEMM (the
//                        1st, 3rd, ... in forward order), of the fused
//                        attention and of the tp reduce-scatters kept, the
//                        other ops recomputed, and the kept ops' outputs that
//                        autograd does not save held for the recompute that
//                        reads them (Placement::hold_until; sim/sac_policy.cc).
//                        Meant for blocks with separate projections (models:
//                        projections "separate"). Not in kFixedPolicies: auto
//                        and --compare try it on such blocks only
//                        (PlannerOptions::separate_projections).
//   offload-host         every candidate to pinned host memory, up to the
//                        pinned budget (the rest kept)
//   offload-ssd          every candidate to SSD
//   ssdtrain             the paper's adaptive rule (sim/README.md): offload the
//                        first layers, keep the layers from the first one whose
//                        offload cannot finish in time at the write bandwidth
//   ssdtrain-paper       the paper's own rules, as FlashTrain decides them
//                        (sim/ssdtrain_paper_policy.cc, each rule cited there):
//                        only saved activations of >= 8 Mi elements inside the
//                        blocks (never parameters, inputs, Loss / Model /
//                        LMHead scopes); the last forward module kept where
//                        its backward follows (pp 1, or the last stage); the
//                        adaptive keep walked over blocks and their attention
//                        and MLP sub-modules, its bandwidth all saved bytes over
//                        the offloaded bytes' write time; order-based prefetch
//                        two modules ahead. Not in kFixedPolicies: the planner's
//                        search and `ssdtrain` stay as they were (a separate
//                        name keeps the accuracy and CLI expectations of
//                        `ssdtrain`, which uses a 1 MiB floor and layer
//                        granularity).
//   megatron-offload     Megatron-Core's fine-grained activation offloading
//                        (--fine-grained-activation-offloading
//                        --offload-modules): every tensor that the backward
//                        of a chosen module (PolicyOptions::offload_modules,
//                        traces::OffloadModuleOf) reads, of at least 1,048,576
//                        elements (its --min-offloaded-tensor-size), goes to
//                        pinned host memory in forward order, up to the pinned
//                        budget, and is read back with the fixed policies'
//                        lookahead. Not in kFixedPolicies (optimal starts
//                        from those): `plan --compare` shows it beside them,
//                        and the planner's auto tries it after them, at
//                        the layouts where offload-host fits (its tensors
//                        are a subset of offload-host's: sim/planner.cc).
//   optimal              per tensor, chosen jointly under the memory budget by
//                        simulation, with time-aware prefetch (optimal_policy.h)
//
// Candidates for offload: saved-for-backward, offloadable activations inside a
// transformer block (parameters, the embedding, LM head and loss are never
// moved), at least `min_offload_bytes`. Offloaded tensors of fixed policies are
// prefetched with SSDTrain's order-based lookahead (FlashTrain tensor_cache.py,
// prefetch_num_leaves_per_chunk = 2: "the next two modules"): a module is a
// backward op that consumes saved activations; when module i begins, the
// tensors of modules i+1 .. i+lookahead are read.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "sim/hardware.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

inline constexpr std::string_view kFixedPolicies[] = {
    "keep", "recompute-full", "recompute-selective", "offload-host", "offload-ssd", "ssdtrain"};

struct PolicyOptions {
  int64_t min_offload_bytes = 1 << 20;  // smaller tensors stay on the device
  int prefetch_lookahead_modules = 2;
  int gpu = -1;  // storage array the plan targets; -1: the slowest
  // false: no offload-host placements (offload-host and megatron-offload
  // place nothing, the optimizer never moves a tensor to host memory): plan
  // --no-host-offload, for a machine without a pinned pool to spare.
  bool allow_host_offload = true;
  // What recompute-selective rebuilds, as Megatron-Core's --recompute-modules
  // names it: "core_attn" and "mla_up_proj" (kRecomputeModules).
  std::vector<std::string> recompute_modules = {"core_attn"};
  // Which blocks recompute-full rebuilds: every N-th of the stage, counted
  // from 1 in forward order (blocks N, 2N, ...), as torchtitan's
  // activation_checkpoint.selective_ac_option = "N" wraps every N-th
  // TransformerBlock (its checkpoint wrapper's _count % ac_freq == 0). 1:
  // every block. At least 1.
  int64_t recompute_every = 1;
  // What megatron-offload moves (traces::kOffloadModules); the default is
  // the pattern Megatron-Core's documentation recommends.
  std::vector<std::string> offload_modules = {"core_attn", "attn_proj", "expert_fc1"};
};

// Megatron-Core's --min-offloaded-tensor-size default, in elements.
inline constexpr int64_t kMegatronMinOffloadElements = int64_t{1} << 20;
// "" when every name is one of traces::kOffloadModules, else a message naming the first other.
std::string OffloadModulesError(const std::vector<std::string>& modules);

inline constexpr std::string_view kRecomputeModules[] = {"core_attn", "mla_up_proj"};
// "" when every name is one of kRecomputeModules, else a message naming the first other.
std::string RecomputeModulesError(const std::vector<std::string>& modules);

// A plan for `trace` under a fixed policy. The layout fields (micro_batch, tp,
// pp, dp, num_micro_batches, schedule, memory budget) are copied from `base`;
// policy, model, fingerprint and placements are filled in. "keep" and
// "offload-ssd" are traces::KeepAllPlan and traces::OffloadAllPlan (with
// min_offload_bytes and prefetch_lookahead_modules), the plans the executor's
// `replay --policy keep|offload-all` runs; candidates for every policy are
// traces::OffloadCandidates, prefetch points traces::LookaheadPrefetchOps.
Result<traces::Plan> MakeFixedPlan(std::string_view policy, const traces::Trace& trace,
                                   const HardwareOptions& hw, const traces::Plan& base,
                                   const PolicyOptions& options = {});

// Each recompute placement's rebuild point (Placement::prefetch_before;
// traces/storage_plan.h, "Recompute"): a checkpointed region is re-run whole
// when backward first needs any of its recomputed storages, as Megatron's
// CheckpointFunction and torch.utils.checkpoint do (the whole region's
// recomputed tensors resident from there, not each from its own first use).
// The region's inputs that backward does not read (nothing saves them; an
// eager RMSNorm's input, which it reads only as its fp32 copy) are kept for
// the re-run, as both save a region's inputs: held (Placement::hold_until)
// until the last point of a region that reads them; else a re-run would
// rebuild them by re-running the region before, and that one the region
// before it. `region_of` names each tensor's region (a placed tensor's, and
// what a re-run reads); returns each region's point.
Result<std::map<int64_t, traces::OpId>> SetRerunPoints(
    const traces::Trace& trace, traces::Plan* plan,
    const std::function<int64_t(const traces::Tensor&)>& region_of);

// recompute-sac's plan on `base`'s layout (sim/sac_policy.cc).
Result<traces::Plan> MakeSacPlan(const traces::Trace& trace, traces::Plan base);

// The adaptive rule's answer: the first layer that is kept (layers below it are
// offloaded). Exposed for tests.
int AdaptiveFirstKeptLayer(const traces::Trace& trace, const HardwareOptions& hw,
                           const PolicyOptions& options);

// ssdtrain-paper's pieces, exposed for tests: the tensors FlashTrain's pack
// hook would offload (one per storage), the op from which the adaptive keep
// stops offloading (kNoOp: it never does), and the plan.
std::vector<traces::TensorId> PaperOffloadCandidates(const traces::Trace& trace);
// A step's saved activations as the paper counts them (§III-D): saved-for-
// backward activation tensors with a producer, each storage once.
int64_t PaperStepActivationBytes(const traces::Trace& trace);
traces::OpId PaperAdaptiveKeepFrom(const traces::Trace& trace, const HardwareOptions& hw,
                                   const PolicyOptions& options);
Result<traces::Plan> MakeSsdtrainPaperPlan(const traces::Trace& trace, const HardwareOptions& hw,
                                           traces::Plan plan, const PolicyOptions& options);

// Planned eviction points (Placement::evict_before): simulates `plan` with
// every offloaded storage evicted as soon as its write lands (on a stage
// holding several micro-batches, with the SSD shared as Simulate shares it:
// SharedSsdOptions), then pins each
// storage's eviction at the first op that starts after its predicted landing
// (within its window: after its last forward use, before its prefetch point
// and first backward use, and at the latest its micro-batch's first backward
// op: a point on a later backward op of its own micro-batch means that op,
// which would wait for the write). A storage whose write does not land in that window
// goes at the end of its forward pass (its point is the first backward op,
// traces/storage_plan.h) when the stage holds several micro-batches at once
// (plan.pp, num_micro_batches, schedule and the trace's stage): the next pass
// waits for its write (backpressure) instead of the stage holding it while the
// micro-batch waits for its backward. A stage holding one micro-batch keeps it
// instead (its placements go: the simulation forwards it, and a run that wrote
// it anyway could evict and read it back, holding other memory at other times). Simulating the
// result gives the same memory profile at every op, and a replay holds exactly that memory whatever
// its SSD does: a slower drive makes the op at the point wait (exposed I/O) instead of holding
// more. Existing points are replaced. Plans without offload come back unchanged.
// `storages`: the trace's traces::ResolveStorages where the caller has it.
Result<traces::Plan> PlaceEvictions(const traces::Trace& trace, traces::Plan plan,
                                    const HardwareOptions& hw,
                                    const traces::StoragePlan* storages = nullptr);

// A plan template: layout from the trace header; dp and micro-batch count 1.
traces::Plan BasePlan(const traces::Trace& trace);  // traces::PlanTemplate, unnamed

}  // namespace ssdtrain::sim

// A plan: an overlay on a trace that says, for each saved tensor, whether it is
// kept on the device, offloaded to SSD or host memory, or recomputed; when its
// offload starts and when it is prefetched; and where it lives on disk. Also the
// training layout the planner chose (micro-batch, pipeline, parallelism) and,
// when the simulator made it, the prediction.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "traces/drives.h"
#include "traces/layout.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

inline constexpr std::string_view kPlanFormatName = "ssdtrain-plan";
inline constexpr int kPlanFormatVersion = 1;

enum class TensorAction { kKeep, kOffloadSsd, kOffloadHost, kRecompute };
std::string_view ToString(TensorAction v);  // keep, offload-ssd, offload-host, recompute
std::optional<TensorAction> ParseTensorAction(std::string_view s);

// One saved tensor's placement. Tensors a plan does not list are kept.
struct Placement {
  TensorId tensor = 0;
  TensorAction action = TensorAction::kKeep;
  // Offload: the write starts when the producer op ends; the device copy is
  // evicted when the write lands (or at `evict_before`). The read-back is issued when op
  // `prefetch_before` starts (kNoOp: on demand, when the first backward consumer
  // needs it).
  OpId prefetch_before = kNoOp;
  // offload-ssd only: a relative file name inside the offload directory (no "..",
  // no absolute path), which SSD directory (stripe index), and the byte offset.
  std::string file;
  int device = 0;
  int64_t offset = 0;
  // Offload: where the device copy goes (kNoOp: as soon as the write has landed
  // and the last forward consumer has been issued). Otherwise the copy stays
  // resident until op `evict_before` is issued and is freed then, the op
  // waiting for the write to land if it has not: memory follows from the plan
  // alone, whatever the SSD's speed, and a late write costs time (exposed I/O)
  // instead of memory. Must come after the storage's last forward use and
  // before its first backward use and its prefetch point. The planner sets it
  // where its simulation has the write landed (sim::PlaceEvictions).
  OpId evict_before = kNoOp;
  // keep only: the storage stays resident until op `hold_until` has run, as
  // if that op read it, however early its last use (kNoOp: until its last
  // use). A checkpointed region's cache: PyTorch's selective checkpointing
  // stores the outputs of the ops its policy saves, read or not by autograd,
  // and its re-run of the region in backward reads them instead of running
  // those ops again (sim's recompute-sac). Must come after the producer.
  OpId hold_until = kNoOp;
};

// Figures a simulation predicts or a replay measures; both files carry this.
struct StepMetrics {
  int64_t step_time_ns = 0;
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;
  int64_t peak_gpu_bytes = 0;  // a replay calls it peak_device_bytes
  int64_t peak_activation_bytes = 0;
  int64_t ssd_bytes_written = 0;
  int64_t ssd_bytes_read = 0;
  // ssd_bytes_written by drive of the GPU's drive set (traces/drives.h), when
  // it has more than one drive: the simulator's by the stripe rule, a
  // replay's as its engine counted them. JSON: optional, written when set.
  std::vector<int64_t> ssd_bytes_written_per_drive;
  double required_ssd_write_GBps = 0;  // RequiredWriteGBps: the rate that hides every write
  int64_t exposed_io_ns = 0;           // stall time the offload I/O adds
  double ssd_lifetime_days = 0;        // rated endurance at this write rate, 24/7
};

struct Plan {
  std::string policy;  // keep, recompute-full, recompute-selective, offload-host, offload-ssd,
                       // ssdtrain, optimal
  std::string model;
  uint64_t trace_fingerprint = 0;
  int64_t micro_batch = 1;
  int64_t seq_len = 0;
  int64_t tp = 1;
  // Context-parallel degree (traces/layout.h; the trace's header cp). JSON:
  // optional (default 1), written when not 1.
  int64_t cp = 1;
  int64_t pp = 1;
  // The pipeline split (traces/layout.h): the first and the last stage's
  // blocks, 0 where the stages split evenly. JSON: optional, written when set.
  int64_t pp_first_layers = 0;
  int64_t pp_last_layers = 0;
  int64_t dp = 1;
  // Expert-parallel degree (MoE models): each rank holds E/ep routed experts of
  // every MoE layer; ep divides dp (models/moe_config.h). JSON: optional
  // (default 1), written when not 1.
  int64_t ep = 1;
  // The ZeRO stage (traces/layout.h): 1 Megatron's distributed optimizer (each
  // rank of the shard group holds its share of the optimizer state, the
  // gradients are reduce-scattered and the updated parameters all-gathered),
  // 2 the gradients sharded too, 3 the weights too (the trace is built so,
  // with its gathers and reduce-scatters). JSON: optional, written when not 0.
  int64_t zero_stage = 0;
  // HSDP: the shard group's dp ranks (a divisor of dp); 0: dp. JSON: optional,
  // written when not 0.
  int64_t dp_shard = 0;
  // ZeRO 2 and 3: the gradients reduce-scattered once a step, after the last
  // micro-batch's backward (the trace's header zero_defer_grad_sync; a replay
  // from a model config builds its trace so). JSON: optional, written when true.
  bool zero_defer_grad_sync = false;
  // The trace's attention, "standard" or "flash" (its header's; `plan
  // --attention` may set it against the model config's, and a replay from a
  // model config builds its trace so). "": a plan written before the field,
  // whose replay keeps the config's. JSON: optional, written when set.
  std::string attention;
  // The trace's projections when "separate" (its header's; `plan
  // --projections`): a replay from a model config builds its blocks so. "":
  // the model config's. JSON: optional, written when set.
  std::string projections;
  // The trace's block kernels where not the defaults (its header's; `plan
  // --rotary`, `--gqa`, `--norm`): a replay from a model config builds its
  // blocks so. Each "": the model config's. JSON: each optional, written when
  // set.
  BlockKernels block_kernels;
  // The weight gradients' dtype where the trace's header names one (`plan
  // --grad-dtype`): a replay from a model config builds its trace so. "": the
  // model config's. JSON: optional, written when set.
  std::string grad_dtype;
  // Sequence parallelism (the trace's header sequence_parallel; tp > 1 only):
  // a replay from a model config builds its trace with it. JSON: optional,
  // written when true.
  bool sequence_parallel = false;
  // TE's userbuffers overlap of the tensor-parallel collectives (the trace's
  // header tp_comm_overlap; `plan --tp-comm-overlap`): a replay from a model
  // config builds its trace with it. JSON: optional, written when true.
  bool tp_comm_overlap = false;
  // Megatron's asynchronous tensor-parallel backward (the trace's header
  // tp_backward_overlap; `plan --no-tp-backward-overlap` turns it off): a
  // replay from a model config builds its trace with it. JSON: optional,
  // written when true (a plan without it ran the collectives in order).
  bool tp_backward_overlap = false;
  // The fused attention kernel its attention was priced on (the trace's header
  // attention_kernel; `plan --attention-kernel`): a replay or simulation from a
  // model config builds its trace with it. Changes no op, so a plan and a
  // trace that differ in it still match. JSON: optional, written when set.
  std::string attention_kernel;
  // FP8 training's recipe (traces/fp8.h; the trace's header fp8): "" none.
  // A replay from a model config builds its trace with it. JSON: optional,
  // written when set.
  std::string fp8;
  // When the data-parallel gradients are exchanged (traces/dp_buckets.h,
  // DdpImpl): "overlapped" (default: each bucket during backward) or "local"
  // (Megatron's --DDP-impl local: all after the step's backward). JSON:
  // optional, written when "local".
  std::string ddp = "overlapped";
  int64_t num_micro_batches = 1;
  std::string schedule = "1f1b";  // 1f1b, gpipe or interleaved (traces/whole_step.h)
  // Interleaved: model chunks per stage (Megatron's virtual pipeline stages,
  // each chunk layers / (pp · v) layers), >= 2; 1 for the other schedules.
  // JSON: optional (default 1), written when not 1.
  int64_t virtual_stages = 1;
  int64_t memory_budget_bytes = 0;  // 0: no budget
  // The node's drives the plan was made for and its stripe size
  // (traces/drives.h): a replay stripes each rank's tensors over its drive set
  // as the simulation did. JSON "storage": optional, written when set.
  DriveLayout storage;
  std::vector<Placement> placements;
  std::optional<StepMetrics> prediction;
  nlohmann::json extra = nlohmann::json::object();  // planner details (search, ROK curve)
};

// The plan's parallel layout (traces/layout.h), each degree at least 1.
Layout PlanLayout(const Plan& plan);

// The SSD write rate that would hide every write of a step behind its forward
// pass: bytes written per step (one micro-batch's, per GPU) over the step's
// forward compute time (the sum of its forward ops' durations), in 1e9 B/s.
// Predictions and runs both report this. 0 when there is no forward time.
double RequiredWriteGBps(int64_t bytes_written, int64_t forward_compute_ns);

nlohmann::json ToJson(const StepMetrics& m);
Result<StepMetrics> StepMetricsFromJson(const nlohmann::json& j, const std::string& where);
nlohmann::json ToJson(const Plan& plan);
// `source` names the file in messages.
Result<Plan> PlanFromJson(const nlohmann::json& j, const std::string& source);
Result<Plan> ReadPlan(const std::string& path);
Status WritePlan(const Plan& plan, const std::string& path);

// A plan for `trace` with no placements (everything kept): the trace's model,
// fingerprint and layout (micro-batch, sequence, tp, pp, ep, cp, deferred
// gradient sync; dp and micro-batch count 1), no budget. Every policy, the planner and the
// executor's built-in plans start from this.
Plan PlanTemplate(const Trace& trace, std::string policy = "keep");
// The same with the trace's Fingerprint worked out already (a search's cache).
Plan PlanTemplate(const Trace& trace, std::string policy, uint64_t fingerprint);

// Checks a plan against its trace: model, deferred gradient sync, fingerprint, known tensor ids,
// actions only on saved offloadable tensors, file names that stay inside the offload directory.
Status ValidatePlan(const Plan& plan, const Trace& trace, const std::string& source);

}  // namespace ssdtrain::traces

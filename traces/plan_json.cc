// Plans as JSON (traces/plan.h; the fields: traces/FORMAT.md): written, and
// read field by field with every field checked on the way in.
#include <algorithm>
#include <string>

#include "traces/detail/block_kernels_json.h"
#include "traces/detail/json_fields.h"
#include "traces/dp_buckets.h"
#include "traces/drives.h"
#include "traces/fp8.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/whole_step.h"

namespace ssdtrain::traces {
namespace {

using detail::JsonPath;
using detail::ObjectReader;
using nlohmann::json;

Result<uint64_t> ParseFingerprint(const ObjectReader& r, const std::string& field) {
  SSDTRAIN_ASSIGN_OR_RETURN(std::string s, r.String(field));
  std::optional<uint64_t> v = ParseFingerprintHex(s);
  if (!v) {
    return r.At(field).Error("expected a 64-bit hex string like \"0x0123456789abcdef\", got \"" +
                             s + "\"");
  }
  return *v;
}

Result<Placement> ParsePlacement(const json& j, const JsonPath& at) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, at));
  Placement p;
  SSDTRAIN_ASSIGN_OR_RETURN(p.tensor, r.Int("tensor"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string action, r.String("action"));
  std::optional<TensorAction> a = ParseTensorAction(action);
  if (!a) {
    return r.At("action").Error("unknown value \"" + action +
                                "\"; expected keep, offload-ssd, offload-host or recompute");
  }
  p.action = *a;
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> prefetch, r.OptionalInt("prefetch_before"));
  p.prefetch_before = prefetch.value_or(kNoOp);
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> evict, r.OptionalInt("evict_before"));
  p.evict_before = evict.value_or(kNoOp);
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> hold, r.OptionalInt("hold_until"));
  p.hold_until = hold.value_or(kNoOp);
  SSDTRAIN_ASSIGN_OR_RETURN(p.file, r.StringOr("file", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t device, r.IntOr("device", 0));
  p.device = static_cast<int>(device);
  SSDTRAIN_ASSIGN_OR_RETURN(p.offset, r.IntOr("offset", 0));
  SSDTRAIN_RETURN_IF_ERROR(r.CheckNoUnknown());
  return p;
}

}  // namespace

json ToJson(const Plan& plan) {
  json placements = json::array();
  for (const Placement& p : plan.placements) {
    json row{{"tensor", p.tensor}, {"action", ToString(p.action)}};
    row["prefetch_before"] = p.prefetch_before == kNoOp ? json(nullptr) : json(p.prefetch_before);
    if (p.evict_before != kNoOp) row["evict_before"] = p.evict_before;
    if (p.hold_until != kNoOp) row["hold_until"] = p.hold_until;
    if (p.action == TensorAction::kOffloadSsd) {
      row["file"] = p.file;
      row["device"] = p.device;
      row["offset"] = p.offset;
    }
    placements.push_back(std::move(row));
  }
  json j{{"format", kPlanFormatName},
         {"version", kPlanFormatVersion},
         {"policy", plan.policy},
         {"model", plan.model},
         {"trace_fingerprint", FingerprintHex(plan.trace_fingerprint)},
         {"micro_batch", plan.micro_batch},
         {"seq_len", plan.seq_len},
         {"tp", plan.tp},
         {"pp", plan.pp},
         {"dp", plan.dp},
         {"num_micro_batches", plan.num_micro_batches},
         {"schedule", plan.schedule},
         {"memory_budget_bytes", plan.memory_budget_bytes},
         {"placements", std::move(placements)},
         {"extra", plan.extra}};
  if (plan.zero_stage != 0) j["zero_stage"] = plan.zero_stage;
  if (plan.dp_shard != 0) j["dp_shard"] = plan.dp_shard;
  if (plan.zero_defer_grad_sync) j["zero_defer_grad_sync"] = true;
  if (!plan.attention.empty()) j["attention"] = plan.attention;
  if (!plan.projections.empty()) j["projections"] = plan.projections;
  detail::WriteBlockKernels(plan.block_kernels, &j);
  if (!plan.grad_dtype.empty()) j["grad_dtype"] = plan.grad_dtype;
  if (!plan.fp8.empty()) j["fp8"] = plan.fp8;
  if (plan.sequence_parallel) j["sequence_parallel"] = true;
  if (plan.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (plan.tp_backward_overlap) j["tp_backward_overlap"] = true;
  if (!plan.attention_kernel.empty()) j["attention_kernel"] = plan.attention_kernel;
  if (plan.ddp != "overlapped") j["ddp"] = plan.ddp;
  if (plan.ep != 1) j["ep"] = plan.ep;
  if (plan.cp != 1) j["cp"] = plan.cp;
  if (plan.pp_first_layers != 0) j["pp_first_layers"] = plan.pp_first_layers;
  if (plan.pp_last_layers != 0) j["pp_last_layers"] = plan.pp_last_layers;
  if (plan.virtual_stages != 1) j["virtual_stages"] = plan.virtual_stages;
  if (plan.storage != DriveLayout{}) {
    json storage = json::object();
    if (!plan.storage.arrays.empty()) storage["arrays"] = plan.storage.arrays;
    if (plan.storage.stripe_bytes != 0) storage["stripe_bytes"] = plan.storage.stripe_bytes;
    if (plan.storage.gds) storage["gds"] = true;
    j["storage"] = std::move(storage);
  }
  if (plan.prediction) j["prediction"] = ToJson(*plan.prediction);
  return j;
}

namespace {

// The layout: micro-batch, sequence, the parallel degrees, the pipeline's
// uneven ends, the ZeRO stage with HSDP and deferred gradient sync.
Status ReadPlanLayout(const ObjectReader& r, Plan* out) {
  Plan& plan = *out;
  SSDTRAIN_ASSIGN_OR_RETURN(plan.micro_batch, r.IntOr("micro_batch", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.seq_len, r.IntOr("seq_len", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.tp, r.IntOr("tp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.pp, r.IntOr("pp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.pp_first_layers, r.IntOr("pp_first_layers", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.pp_last_layers, r.IntOr("pp_last_layers", 0));
  for (const char* field : {"pp_first_layers", "pp_last_layers"}) {
    const int64_t v =
        std::string(field) == "pp_first_layers" ? plan.pp_first_layers : plan.pp_last_layers;
    if (v < 0 || (v > 0 && plan.pp < 2)) {
      return r.At(field).Error("expected a positive block count on a pipeline of pp >= 2, got " +
                               std::to_string(v) + " at pp " + std::to_string(plan.pp));
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(plan.dp, r.IntOr("dp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.ep, r.IntOr("ep", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.cp, r.IntOr("cp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.zero_stage, r.IntOr("zero_stage", 0));
  if (plan.zero_stage < 0 || plan.zero_stage > 3) {
    return r.At("zero_stage")
        .Error(
            "expected 0, 1, 2 or 3 (1: the optimizer state sharded over dp; 2: the gradients "
            "too; 3: the weights too), got " +
            std::to_string(plan.zero_stage));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(plan.dp_shard, r.IntOr("dp_shard", 0));
  if (plan.dp_shard != 0) {
    Layout shard;
    shard.dp = std::max<int64_t>(1, plan.dp);
    shard.zero_stage = plan.zero_stage;
    shard.dp_shard = plan.dp_shard;
    if (Status s = ValidateLayout(shard, ""); !s.ok()) {
      const std::string m = s.message();
      return r.At("dp_shard").Error(m.substr(m.find("dp_shard: ") + 10));
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(plan.zero_defer_grad_sync, r.BoolOr("zero_defer_grad_sync", false));
  if (plan.zero_defer_grad_sync && plan.zero_stage < 2) {
    return r.At("zero_defer_grad_sync")
        .Error("applies to zero_stage 2 or 3, got zero_stage " + std::to_string(plan.zero_stage));
  }
  return Status::Ok();
}

// How it trains: attention, sequence parallelism, the FP8 recipe, DDP.
Status ReadPlanTraining(const ObjectReader& r, Plan* out) {
  Plan& plan = *out;
  SSDTRAIN_ASSIGN_OR_RETURN(plan.attention, r.StringOr("attention", ""));
  if (!plan.attention.empty() && plan.attention != "standard" && plan.attention != "flash") {
    return r.At("attention")
        .Error("unknown value \"" + plan.attention + "\"; expected standard or flash");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(plan.projections, r.StringOr("projections", ""));
  if (!plan.projections.empty() && plan.projections != "fused" && plan.projections != "separate") {
    return r.At("projections")
        .Error("unknown value \"" + plan.projections + "\"; expected fused or separate");
  }
  if (plan.projections == "fused") plan.projections.clear();
  SSDTRAIN_RETURN_IF_ERROR(detail::ReadBlockKernels(r, &plan.block_kernels));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.grad_dtype, r.StringOr("grad_dtype", ""));
  if (!plan.grad_dtype.empty() && plan.grad_dtype != "fp16" && plan.grad_dtype != "bf16" &&
      plan.grad_dtype != "fp32") {
    return r.At("grad_dtype")
        .Error("unknown dtype \"" + plan.grad_dtype + "\"; expected fp16, bf16 or fp32");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(plan.sequence_parallel, r.BoolOr("sequence_parallel", false));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.tp_comm_overlap, r.BoolOr("tp_comm_overlap", false));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.tp_backward_overlap, r.BoolOr("tp_backward_overlap", false));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.attention_kernel, r.StringOr("attention_kernel", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.fp8, r.StringOr("fp8", ""));
  if (const std::optional<Fp8Recipe> recipe = ParseFp8Recipe(plan.fp8); !recipe) {
    return r.At("fp8").Error("unknown recipe \"" + plan.fp8 + "\"; expected " +
                             std::string(kFp8RecipeNames));
  } else {
    plan.fp8 = std::string(ToString(*recipe));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(plan.ddp, r.StringOr("ddp", "overlapped"));
  if (!ParseDdpImpl(plan.ddp).ok()) {
    return r.At("ddp").Error("unknown value \"" + plan.ddp +
                             "\"; expected overlapped or local (Megatron's --DDP-impl)");
  }
  return Status::Ok();
}

// The schedule: micro-batches, 1F1B, GPipe or interleaved with its virtual
// stages; the memory budget.
Status ReadPlanSchedule(const ObjectReader& r, Plan* out) {
  Plan& plan = *out;
  SSDTRAIN_ASSIGN_OR_RETURN(plan.num_micro_batches, r.IntOr("num_micro_batches", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.schedule, r.StringOr("schedule", "1f1b"));
  Result<Schedule> schedule = ParseSchedule(plan.schedule);
  if (!schedule.ok()) {
    return r.At("schedule")
        .Error("unknown value \"" + plan.schedule + "\"; expected 1f1b, gpipe or interleaved");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(plan.virtual_stages, r.IntOr("virtual_stages", 1));
  if (*schedule != Schedule::kInterleaved && plan.virtual_stages != 1) {
    return r.At("virtual_stages")
        .Error("expected 1 under schedule " + plan.schedule + ", got " +
               std::to_string(plan.virtual_stages) + " (model chunks are interleaved only)");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(plan.memory_budget_bytes, r.IntOr("memory_budget_bytes", 0));
  if (*schedule == Schedule::kInterleaved) {
    const std::string why =
        InterleavedError(plan.pp, plan.num_micro_batches, plan.virtual_stages, 0);
    if (!why.empty()) return r.At("virtual_stages").Error("interleaved " + why);
  }
  return Status::Ok();
}

// The drives it was planned for ("storage"), checked.
Status ReadPlanStorage(const ObjectReader& r, const std::string& source, Plan* plan) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader st, r.Object("storage"));
  if (st.Has("arrays")) {
    SSDTRAIN_ASSIGN_OR_RETURN(std::vector<int64_t> arrays, st.IntArray("arrays"));
    for (const int64_t drives : arrays) {
      plan->storage.arrays.push_back(
          static_cast<int>(std::clamp<int64_t>(drives, -1, kMaxArrayDrives + 1)));
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(plan->storage.stripe_bytes, st.IntOr("stripe_bytes", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(plan->storage.gds, st.BoolOr("gds", false));
  SSDTRAIN_RETURN_IF_ERROR(ValidateDriveLayout(plan->storage, source + ": storage"));
  SSDTRAIN_RETURN_IF_ERROR(st.CheckNoUnknown());
  return Status::Ok();
}

}  // namespace

Result<Plan> PlanFromJson(const json& j, const std::string& source) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, JsonPath(source, "")));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string format, r.String("format"));
  if (format != kPlanFormatName) {
    return r.At("format").Error("expected \"" + std::string(kPlanFormatName) + "\", got \"" +
                                format + "\"");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t version, r.Int("version"));
  if (version != kPlanFormatVersion) {
    return r.At("version").Error("unsupported version " + std::to_string(version) +
                                 "; this build reads version " +
                                 std::to_string(kPlanFormatVersion));
  }
  Plan plan;
  SSDTRAIN_ASSIGN_OR_RETURN(plan.policy, r.String("policy"));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.model, r.String("model"));
  SSDTRAIN_ASSIGN_OR_RETURN(plan.trace_fingerprint, ParseFingerprint(r, "trace_fingerprint"));
  SSDTRAIN_RETURN_IF_ERROR(ReadPlanLayout(r, &plan));
  SSDTRAIN_RETURN_IF_ERROR(ReadPlanTraining(r, &plan));
  SSDTRAIN_RETURN_IF_ERROR(ReadPlanSchedule(r, &plan));
  for (auto [field, value] :
       {std::pair{"micro_batch", plan.micro_batch}, std::pair{"tp", plan.tp},
        std::pair{"pp", plan.pp}, std::pair{"dp", plan.dp}, std::pair{"ep", plan.ep},
        std::pair{"cp", plan.cp}, std::pair{"num_micro_batches", plan.num_micro_batches}}) {
    if (value <= 0)
      return r.At(field).Error("expected a positive integer, got " + std::to_string(value));
  }
  if (r.Has("storage")) SSDTRAIN_RETURN_IF_ERROR(ReadPlanStorage(r, source, &plan));
  SSDTRAIN_ASSIGN_OR_RETURN(const json* rows, r.Value("placements"));
  if (!rows->is_array()) {
    return r.At("placements").Error("expected an array, got " + detail::TypeName(*rows));
  }
  plan.placements.reserve(rows->size());
  for (size_t i = 0; i < rows->size(); ++i) {
    SSDTRAIN_ASSIGN_OR_RETURN(Placement p, ParsePlacement((*rows)[i], r.At("placements").Index(i)));
    plan.placements.push_back(std::move(p));
  }
  if (r.Has("prediction")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const json* pred, r.Value("prediction"));
    SSDTRAIN_ASSIGN_OR_RETURN(StepMetrics m, StepMetricsFromJson(*pred, source + ": prediction"));
    plan.prediction = m;
  } else {
    r.Skip("prediction");
  }
  if (r.Has("extra")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const json* extra, r.Value("extra"));
    plan.extra = *extra;
  } else {
    r.Skip("extra");
  }
  SSDTRAIN_RETURN_IF_ERROR(r.CheckNoUnknown());
  return plan;
}

Result<Plan> ReadPlan(const std::string& path) {
  SSDTRAIN_ASSIGN_OR_RETURN(json j, ReadJsonFile(path));
  return PlanFromJson(j, path);
}

Status WritePlan(const Plan& plan, const std::string& path) {
  return WriteJsonFile(ToJson(plan), path);
}

}  // namespace ssdtrain::traces

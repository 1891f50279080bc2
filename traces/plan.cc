#include "traces/plan.h"

#include <algorithm>
#include <array>
#include <unordered_map>

#include "traces/detail/enum_names.h"
#include "traces/detail/json_fields.h"
#include "traces/dp_buckets.h"
#include "traces/fp8.h"
#include "traces/io.h"
#include "traces/storage_plan.h"
#include "traces/whole_step.h"

namespace ssdtrain::traces {
namespace {

using detail::JsonPath;
using detail::ObjectReader;
using nlohmann::json;

constexpr detail::NameTable<TensorAction, 4> kActionNames{
    {{TensorAction::kKeep, "keep"},
     {TensorAction::kOffloadSsd, "offload-ssd"},
     {TensorAction::kOffloadHost, "offload-host"},
     {TensorAction::kRecompute, "recompute"}}};

}  // namespace

std::string_view ToString(TensorAction v) { return detail::NameOf(kActionNames, v); }

std::optional<TensorAction> ParseTensorAction(std::string_view s) {
  return detail::ParseName(kActionNames, s);
}

double RequiredWriteGBps(int64_t bytes_written, int64_t forward_compute_ns) {
  if (forward_compute_ns <= 0) return 0;
  return static_cast<double>(bytes_written) / static_cast<double>(forward_compute_ns);  // B/ns
}

json ToJson(const StepMetrics& m) {
  json j{{"step_time_ns", m.step_time_ns},
         {"tokens_per_s", m.tokens_per_s},
         {"tflops_per_gpu", m.tflops_per_gpu},
         {"peak_gpu_bytes", m.peak_gpu_bytes},
         {"peak_activation_bytes", m.peak_activation_bytes},
         {"ssd_bytes_written", m.ssd_bytes_written},
         {"ssd_bytes_read", m.ssd_bytes_read},
         {"required_ssd_write_GBps", m.required_ssd_write_GBps},
         {"exposed_io_ns", m.exposed_io_ns},
         {"ssd_lifetime_days", m.ssd_lifetime_days}};
  if (!m.ssd_bytes_written_per_drive.empty()) {
    j["ssd_bytes_written_per_drive"] = m.ssd_bytes_written_per_drive;
  }
  return j;
}

Result<StepMetrics> StepMetricsFromJson(const json& j, const std::string& where) {
  // `where` is "<file>" or "<file>: <path>"; split once for JsonPath.
  const size_t colon = where.find(": ");
  JsonPath at = colon == std::string::npos
                    ? JsonPath(where, "")
                    : JsonPath(where.substr(0, colon), where.substr(colon + 2));
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, at));
  StepMetrics m;
  SSDTRAIN_ASSIGN_OR_RETURN(m.step_time_ns, r.Int("step_time_ns"));
  SSDTRAIN_ASSIGN_OR_RETURN(m.tokens_per_s, r.NumberOr("tokens_per_s", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(m.tflops_per_gpu, r.NumberOr("tflops_per_gpu", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(m.peak_gpu_bytes, r.IntOr("peak_gpu_bytes", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(m.peak_activation_bytes, r.IntOr("peak_activation_bytes", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(m.ssd_bytes_written, r.IntOr("ssd_bytes_written", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(m.ssd_bytes_read, r.IntOr("ssd_bytes_read", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(m.required_ssd_write_GBps, r.NumberOr("required_ssd_write_GBps", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(m.exposed_io_ns, r.IntOr("exposed_io_ns", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(m.ssd_lifetime_days, r.NumberOr("ssd_lifetime_days", 0));
  if (r.Has("ssd_bytes_written_per_drive")) {
    SSDTRAIN_ASSIGN_OR_RETURN(m.ssd_bytes_written_per_drive,
                              r.IntArray("ssd_bytes_written_per_drive"));
  }
  // Other fields (per-lane busy time, per-op spans) belong to the file's other readers.
  return m;
}

Layout PlanLayout(const Plan& plan) {
  Layout l;
  l.tp = std::max<int64_t>(1, plan.tp);
  l.cp = std::max<int64_t>(1, plan.cp);
  l.pp = std::max<int64_t>(1, plan.pp);
  l.pp_first_layers = plan.pp_first_layers;
  l.pp_last_layers = plan.pp_last_layers;
  l.vp = std::max<int64_t>(1, plan.virtual_stages);
  l.dp = std::max<int64_t>(1, plan.dp);
  l.ep = std::max<int64_t>(1, plan.ep);
  l.zero_stage = plan.zero_stage;
  l.dp_shard = plan.dp_shard;
  return l;
}

Plan PlanTemplate(const Trace& trace, std::string policy) {
  return PlanTemplate(trace, std::move(policy), Fingerprint(trace));
}

Plan PlanTemplate(const Trace& trace, std::string policy, uint64_t fingerprint) {
  Plan plan;
  plan.policy = std::move(policy);
  plan.model = trace.header.model;
  plan.trace_fingerprint = fingerprint;
  plan.micro_batch = std::max<int64_t>(1, trace.header.micro_batch);
  plan.seq_len = trace.header.seq_len;
  plan.tp = std::max<int64_t>(1, trace.header.tp);
  plan.pp = std::max<int64_t>(1, trace.header.pp);
  plan.pp_first_layers = trace.header.pp_first_layers;
  plan.pp_last_layers = trace.header.pp_last_layers;
  plan.ep = std::max<int64_t>(1, trace.header.ep);
  plan.cp = std::max<int64_t>(1, trace.header.cp);
  plan.zero_defer_grad_sync = trace.header.zero_defer_grad_sync;
  plan.attention = trace.header.attention;
  if (trace.header.projections != "fused") plan.projections = trace.header.projections;
  plan.block_kernels = trace.header.block_kernels;
  plan.grad_dtype = trace.header.grad_dtype;
  plan.fp8 = trace.header.fp8;
  plan.sequence_parallel = trace.header.sequence_parallel;
  plan.tp_comm_overlap = trace.header.tp_comm_overlap;
  plan.tp_backward_overlap = trace.header.tp_backward_overlap;
  plan.attention_kernel = trace.header.attention_kernel;
  return plan;
}

Status ValidatePlan(const Plan& plan, const Trace& trace, const std::string& source) {
  if (plan.model != trace.header.model) {
    return Status::FailedPrecondition(source + ": model: the plan is for \"" + plan.model +
                                      "\" but the trace is of \"" + trace.header.model + "\"");
  }
  if (plan.zero_defer_grad_sync != trace.header.zero_defer_grad_sync) {
    auto says = [](bool defer) {
      return defer ? std::string("reduce-scatters the gradients once a step")
                   : std::string("reduce-scatters every micro-batch's gradients");
    };
    return Status::FailedPrecondition(source + ": zero_defer_grad_sync: the plan " +
                                      says(plan.zero_defer_grad_sync) + ", the trace " +
                                      says(trace.header.zero_defer_grad_sync));
  }
  if (!plan.attention.empty() && plan.attention != trace.header.attention) {
    return Status::FailedPrecondition(source + ": attention: the plan runs " + plan.attention +
                                      " attention, the trace " + trace.header.attention);
  }
  if (plan.projections.empty() ? trace.header.projections != "fused"
                               : plan.projections != trace.header.projections) {
    return Status::FailedPrecondition(
        source + ": projections: the plan's blocks are " +
        (plan.projections.empty() ? std::string("fused") : plan.projections) + ", the trace's " +
        trace.header.projections);
  }
  for (const BlockKernel& k : kBlockKernels) {
    if (plan.block_kernels.*k.member != trace.header.block_kernels.*k.member) {
      return Status::FailedPrecondition(
          source + ": " + std::string(k.field) + ": the plan's blocks run it " +
          std::string(KernelValue(plan.block_kernels, k)) + ", the trace's " +
          std::string(KernelValue(trace.header.block_kernels, k)));
    }
  }
  if (plan.grad_dtype != trace.header.grad_dtype) {
    auto says = [](const std::string& d) {
      return d.empty() ? std::string("the config's default") : d;
    };
    return Status::FailedPrecondition(source + ": grad_dtype: the plan's weight gradients are " +
                                      says(plan.grad_dtype) + ", the trace's " +
                                      says(trace.header.grad_dtype));
  }
  if (plan.sequence_parallel && !trace.header.sequence_parallel) {
    return Status::FailedPrecondition(source +
                                      ": sequence_parallel: the plan runs sequence parallelism, "
                                      "the trace was built without it");
  }
  if (plan.tp_comm_overlap != trace.header.tp_comm_overlap) {
    auto says = [](bool on) {
      return on ? std::string("overlaps") : std::string("does not overlap");
    };
    return Status::FailedPrecondition(
        source + ": tp_comm_overlap: the plan " + says(plan.tp_comm_overlap) +
        " the tensor-parallel collectives with their GEMMs, the trace " +
        says(trace.header.tp_comm_overlap) + " them");
  }
  if (plan.tp_backward_overlap != trace.header.tp_backward_overlap) {
    auto where = [](bool on) {
      return on ? std::string("beside their GEMMs") : std::string("after their GEMMs");
    };
    return Status::FailedPrecondition(
        source +
        ": tp_backward_overlap: the plan runs the column-parallel layers' backward "
        "collectives " +
        where(plan.tp_backward_overlap) + ", the trace " + where(trace.header.tp_backward_overlap) +
        " (ssdtrain trace --no-tp-backward-overlap builds a trace that runs them after)");
  }
  if (plan.fp8 != trace.header.fp8) {
    auto says = [](const std::string& fp8) {
      return fp8.empty() ? std::string("without FP8") : "in FP8 (" + fp8 + ")";
    };
    return Status::FailedPrecondition(source + ": fp8: the plan trains " + says(plan.fp8) +
                                      ", the trace " + says(trace.header.fp8));
  }
  const uint64_t fp = Fingerprint(trace);
  if (plan.trace_fingerprint != fp) {
    return Status::FailedPrecondition(
        source + ": trace_fingerprint: " + FingerprintHex(plan.trace_fingerprint) +
        " does not match the trace's " + FingerprintHex(fp) +
        " (the plan was made for another trace: other micro-batch, sequence length, "
        "parallelism, or how its collectives overlap)");
  }
  return ResolvePlan(trace, plan, source).status();
}

}  // namespace ssdtrain::traces

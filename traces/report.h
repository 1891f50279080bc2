// A step report: what `ssdtrain simulate`/`plan` predict and what `ssdtrain
// replay` measures, in one JSON shape keyed by the trace's op ids, so that
// `ssdtrain compare` can diff the two. The StepMetrics fields sit at the top
// level of the document (step_time_ns, peak_gpu_bytes, ...); a measured run also
// writes peak_device_bytes (= peak_gpu_bytes), backend, steps and verified.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

inline constexpr std::string_view kReportFormatName = "ssdtrain-report";
inline constexpr int kReportFormatVersion = 1;

struct OpTiming {
  OpId op = kNoOp;
  int64_t start_ns = 0;  // from the start of the step
  int64_t end_ns = 0;
  // The trace's name of the op ("L3.adam"); JSON "name", empty in reports
  // written before it existed.
  std::string name;
};

// Op `op` of `trace` (the single-micro-batch trace, whose ids reports use)
// timed from start_ns to end_ns, named as the trace names it: the one place
// both the simulator's predictions and the executor's runs take the name from.
OpTiming TimingOf(const Trace& trace, OpId op, int64_t start_ns, int64_t end_ns);

// The training layout a report covers: what the plan laid out (a prediction)
// or what the replay ran (a run: each stage's whole step, the plan's
// micro-batches in its schedule, on its tp × pp × dp ranks under mpirun; one
// process runs one stage, so pp 1). `ssdtrain compare` refuses to set
// two reports side by side whose layouts differ.
struct ReportLayout {
  int64_t micro_batch = 1;
  // tp, cp, pp (its split and virtual stages), dp, ep, the ZeRO stage and the
  // HSDP shard group: the one layout concept (traces/layout.h). JSON: flat,
  // tp, pp and dp always, the others where not their defaults.
  Layout parallel;
  int64_t num_micro_batches = 1;
  std::string schedule = "1f1b";
  // The optimizer state's shard group's ranks (the trace header's
  // zero_shards; Layout::OptimizerShards of a plan). JSON: where not 1.
  int64_t zero_shards = 1;
  bool operator==(const ReportLayout&) const = default;
};

// The plan's layout (micro_batch, PlanLayout, num_micro_batches, schedule,
// its optimizer shard group).
ReportLayout LayoutOf(const Plan& plan);
// Every field in which `a` and `b` differ, as "pp 4 vs 1, num_micro_batches 8
// vs 1"; empty when they agree.
std::string LayoutMismatch(const ReportLayout& a, const ReportLayout& b);

struct StepReport {
  std::string kind;  // "prediction" or "run"
  std::string model;
  uint64_t trace_fingerprint = 0;
  std::string policy;
  std::string source;  // the hardware config (prediction) or backend description (run)
  StepMetrics metrics;
  // Busy time per timeline lane ("compute", "d2h", "h2d", "ssd_write", "ssd_read").
  std::map<std::string, int64_t> lane_busy_ns;
  std::vector<OpTiming> ops;     // one step, in op order
  int64_t steps = 1;             // measured steps the medians come from
  std::optional<bool> verified;  // runs with --verify
  // JSON "layout": {micro_batch, tp, pp, dp, num_micro_batches, schedule,
  // and cp, ep, vp, dp_shard, pp_first_layers, pp_last_layers, zero_stage,
  // zero_shards where not their defaults}; absent in reports written before
  // it existed.
  std::optional<ReportLayout> layout;
  nlohmann::json extra = nlohmann::json::object();
};

// What every report says of itself, predicted or measured alike: its kind
// ("prediction" or "run"), the trace's model and fingerprint, the plan's
// policy, its source (a hardware config or a device) and the layout.
StepReport NewStepReport(std::string kind, const Trace& trace, const Plan& plan, std::string source,
                         ReportLayout layout);

nlohmann::json ToJson(const StepReport& r);
Result<StepReport> StepReportFromJson(const nlohmann::json& j, const std::string& source);
Result<StepReport> ReadStepReport(const std::string& path);
Status WriteStepReport(const StepReport& r, const std::string& path);

}  // namespace ssdtrain::traces

#include "traces/report.h"

#include "traces/detail/json_fields.h"
#include "traces/io.h"

namespace ssdtrain::traces {
namespace {

using detail::JsonPath;
using detail::ObjectReader;
using nlohmann::json;

}  // namespace

StepReport NewStepReport(std::string kind, const Trace& trace, const Plan& plan, std::string source,
                         ReportLayout layout) {
  StepReport r;
  r.kind = std::move(kind);
  r.model = trace.header.model;
  r.trace_fingerprint = Fingerprint(trace);
  r.policy = plan.policy;
  r.source = std::move(source);
  r.layout = std::move(layout);
  return r;
}

OpTiming TimingOf(const Trace& trace, OpId op, int64_t start_ns, int64_t end_ns) {
  OpTiming t{op, start_ns, end_ns, ""};
  if (op >= 0 && static_cast<size_t>(op) < trace.ops.size()) t.name = trace.ops[op].name;
  return t;
}

ReportLayout LayoutOf(const Plan& plan) {
  ReportLayout l{plan.micro_batch,       plan.tp,      plan.pp, plan.dp,
                 plan.num_micro_batches, plan.schedule};
  l.zero_stage = plan.zero_stage;
  l.zero_shards = PlanLayout(plan).OptimizerShards();
  return l;
}

std::string LayoutMismatch(const ReportLayout& a, const ReportLayout& b) {
  std::string out;
  auto field = [&](const char* name, const std::string& x, const std::string& y) {
    if (x == y) return;
    out += (out.empty() ? "" : ", ") + std::string(name) + " " + x + " vs " + y;
  };
  field("micro_batch", std::to_string(a.micro_batch), std::to_string(b.micro_batch));
  field("tp", std::to_string(a.tp), std::to_string(b.tp));
  field("pp", std::to_string(a.pp), std::to_string(b.pp));
  field("dp", std::to_string(a.dp), std::to_string(b.dp));
  field("num_micro_batches", std::to_string(a.num_micro_batches),
        std::to_string(b.num_micro_batches));
  field("schedule", a.schedule, b.schedule);
  field("zero_stage", std::to_string(a.zero_stage), std::to_string(b.zero_stage));
  field("zero_shards", std::to_string(a.zero_shards), std::to_string(b.zero_shards));
  return out;
}

json ToJson(const StepReport& r) {
  json j = ToJson(r.metrics);
  j["format"] = kReportFormatName;
  j["version"] = kReportFormatVersion;
  j["kind"] = r.kind;
  j["model"] = r.model;
  j["trace_fingerprint"] = FingerprintHex(r.trace_fingerprint);
  j["policy"] = r.policy;
  j["source"] = r.source;
  j["peak_device_bytes"] = r.metrics.peak_gpu_bytes;
  j["lane_busy_ns"] = r.lane_busy_ns;
  json ops = json::array();
  for (const OpTiming& t : r.ops) {
    json op{{"op", t.op}, {"start_ns", t.start_ns}, {"end_ns", t.end_ns}};
    if (!t.name.empty()) op["name"] = t.name;
    ops.push_back(std::move(op));
  }
  j["ops"] = std::move(ops);
  j["steps"] = r.steps;
  j["verified"] = r.verified ? json(*r.verified) : json(nullptr);
  if (r.layout) {
    j["layout"] = json{{"micro_batch", r.layout->micro_batch},
                       {"tp", r.layout->tp},
                       {"pp", r.layout->pp},
                       {"dp", r.layout->dp},
                       {"num_micro_batches", r.layout->num_micro_batches},
                       {"schedule", r.layout->schedule}};
    if (r.layout->zero_stage != 0) j["layout"]["zero_stage"] = r.layout->zero_stage;
    if (r.layout->zero_shards != 1) j["layout"]["zero_shards"] = r.layout->zero_shards;
  }
  j["extra"] = r.extra;
  return j;
}

Result<StepReport> StepReportFromJson(const json& j, const std::string& source) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, JsonPath(source, "")));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string format, r.String("format"));
  if (format != kReportFormatName) {
    return r.At("format").Error("expected \"" + std::string(kReportFormatName) +
                                "\" (a prediction or run file), got \"" + format + "\"");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t version, r.Int("version"));
  if (version != kReportFormatVersion) {
    return r.At("version").Error("unsupported version " + std::to_string(version));
  }
  StepReport out;
  SSDTRAIN_ASSIGN_OR_RETURN(out.kind, r.String("kind"));
  if (out.kind != "prediction" && out.kind != "run") {
    return r.At("kind").Error("expected \"prediction\" or \"run\", got \"" + out.kind + "\"");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(out.model, r.String("model"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string fp, r.String("trace_fingerprint"));
  std::optional<uint64_t> fingerprint = ParseFingerprintHex(fp);
  if (!fingerprint)
    return r.At("trace_fingerprint").Error("expected a 64-bit hex string, got \"" + fp + "\"");
  out.trace_fingerprint = *fingerprint;
  SSDTRAIN_ASSIGN_OR_RETURN(out.policy, r.StringOr("policy", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(out.source, r.StringOr("source", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(out.metrics, StepMetricsFromJson(j, source));
  if (r.Has("lane_busy_ns")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const json* lanes, r.Value("lane_busy_ns"));
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader lr, ObjectReader::Make(*lanes, r.At("lane_busy_ns")));
    for (auto it = lanes->begin(); it != lanes->end(); ++it) {
      SSDTRAIN_ASSIGN_OR_RETURN(out.lane_busy_ns[it.key()], lr.Int(it.key()));
    }
  }
  if (r.Has("ops")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const json* ops, r.Value("ops"));
    if (!ops->is_array())
      return r.At("ops").Error("expected an array, got " + detail::TypeName(*ops));
    out.ops.reserve(ops->size());
    for (size_t i = 0; i < ops->size(); ++i) {
      SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader o,
                                ObjectReader::Make((*ops)[i], r.At("ops").Index(i)));
      OpTiming t;
      SSDTRAIN_ASSIGN_OR_RETURN(t.op, o.Int("op"));
      SSDTRAIN_ASSIGN_OR_RETURN(t.start_ns, o.Int("start_ns"));
      SSDTRAIN_ASSIGN_OR_RETURN(t.end_ns, o.Int("end_ns"));
      SSDTRAIN_ASSIGN_OR_RETURN(t.name, o.StringOr("name", ""));
      out.ops.push_back(t);
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(out.steps, r.IntOr("steps", 1));
  if (r.Has("verified")) {
    SSDTRAIN_ASSIGN_OR_RETURN(bool v, r.Bool("verified"));
    out.verified = v;
  }
  if (r.Has("layout")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const json* layout, r.Value("layout"));
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader lr, ObjectReader::Make(*layout, r.At("layout")));
    ReportLayout l;
    SSDTRAIN_ASSIGN_OR_RETURN(l.micro_batch, lr.Int("micro_batch"));
    SSDTRAIN_ASSIGN_OR_RETURN(l.tp, lr.Int("tp"));
    SSDTRAIN_ASSIGN_OR_RETURN(l.pp, lr.Int("pp"));
    SSDTRAIN_ASSIGN_OR_RETURN(l.dp, lr.Int("dp"));
    SSDTRAIN_ASSIGN_OR_RETURN(l.num_micro_batches, lr.Int("num_micro_batches"));
    SSDTRAIN_ASSIGN_OR_RETURN(l.schedule, lr.String("schedule"));
    SSDTRAIN_ASSIGN_OR_RETURN(l.zero_stage, lr.IntOr("zero_stage", 0));
    SSDTRAIN_ASSIGN_OR_RETURN(l.zero_shards, lr.IntOr("zero_shards", 1));
    out.layout = l;
  }
  if (r.Has("extra")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const json* extra, r.Value("extra"));
    out.extra = *extra;
  }
  return out;
}

Result<StepReport> ReadStepReport(const std::string& path) {
  SSDTRAIN_ASSIGN_OR_RETURN(json j, ReadJsonFile(path));
  return StepReportFromJson(j, path);
}

Status WriteStepReport(const StepReport& r, const std::string& path) {
  return WriteJsonFile(ToJson(r), path);
}

}  // namespace ssdtrain::traces

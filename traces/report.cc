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
  ReportLayout l;
  l.micro_batch = plan.micro_batch;
  l.parallel = PlanLayout(plan);
  l.num_micro_batches = plan.num_micro_batches;
  l.schedule = plan.schedule;
  l.zero_shards = l.parallel.OptimizerShards();
  return l;
}

std::string LayoutMismatch(const ReportLayout& a, const ReportLayout& b) {
  std::string out;
  auto field = [&](const char* name, const std::string& x, const std::string& y) {
    if (x == y) return;
    out += (out.empty() ? "" : ", ") + std::string(name) + " " + x + " vs " + y;
  };
  auto number = [&](const char* name, int64_t x, int64_t y) {
    field(name, std::to_string(x), std::to_string(y));
  };
  const Layout &x = a.parallel, &y = b.parallel;
  number("micro_batch", a.micro_batch, b.micro_batch);
  number("tp", x.tp, y.tp);
  number("cp", x.cp, y.cp);
  number("pp", x.pp, y.pp);
  number("pp_first_layers", x.pp_first_layers, y.pp_first_layers);
  number("pp_last_layers", x.pp_last_layers, y.pp_last_layers);
  number("vp", x.vp, y.vp);
  number("dp", x.dp, y.dp);
  number("dp_shard", x.dp_shard, y.dp_shard);
  number("ep", x.ep, y.ep);
  number("num_micro_batches", a.num_micro_batches, b.num_micro_batches);
  field("schedule", a.schedule, b.schedule);
  number("zero_stage", x.zero_stage, y.zero_stage);
  number("zero_shards", a.zero_shards, b.zero_shards);
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
    const Layout& l = r.layout->parallel;
    json& o = j["layout"];
    o = json{{"micro_batch", r.layout->micro_batch},
             {"tp", l.tp},
             {"pp", l.pp},
             {"dp", l.dp},
             {"num_micro_batches", r.layout->num_micro_batches},
             {"schedule", r.layout->schedule}};
    if (l.cp != 1) o["cp"] = l.cp;
    if (l.ep != 1) o["ep"] = l.ep;
    if (l.vp != 1) o["vp"] = l.vp;
    if (l.dp_shard != 0) o["dp_shard"] = l.dp_shard;
    if (l.pp_first_layers != 0) o["pp_first_layers"] = l.pp_first_layers;
    if (l.pp_last_layers != 0) o["pp_last_layers"] = l.pp_last_layers;
    if (l.zero_stage != 0) o["zero_stage"] = l.zero_stage;
    if (r.layout->zero_shards != 1) o["zero_shards"] = r.layout->zero_shards;
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
    Layout& p = l.parallel;
    SSDTRAIN_ASSIGN_OR_RETURN(l.micro_batch, lr.Int("micro_batch"));
    SSDTRAIN_ASSIGN_OR_RETURN(p.tp, lr.Int("tp"));
    SSDTRAIN_ASSIGN_OR_RETURN(p.pp, lr.Int("pp"));
    SSDTRAIN_ASSIGN_OR_RETURN(p.dp, lr.Int("dp"));
    SSDTRAIN_ASSIGN_OR_RETURN(p.cp, lr.IntOr("cp", 1));
    SSDTRAIN_ASSIGN_OR_RETURN(p.ep, lr.IntOr("ep", 1));
    SSDTRAIN_ASSIGN_OR_RETURN(p.vp, lr.IntOr("vp", 1));
    SSDTRAIN_ASSIGN_OR_RETURN(p.dp_shard, lr.IntOr("dp_shard", 0));
    SSDTRAIN_ASSIGN_OR_RETURN(p.pp_first_layers, lr.IntOr("pp_first_layers", 0));
    SSDTRAIN_ASSIGN_OR_RETURN(p.pp_last_layers, lr.IntOr("pp_last_layers", 0));
    SSDTRAIN_ASSIGN_OR_RETURN(l.num_micro_batches, lr.Int("num_micro_batches"));
    SSDTRAIN_ASSIGN_OR_RETURN(l.schedule, lr.String("schedule"));
    SSDTRAIN_ASSIGN_OR_RETURN(p.zero_stage, lr.IntOr("zero_stage", 0));
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

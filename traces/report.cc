#include "traces/report.h"

#include "traces/detail/json_fields.h"
#include "traces/io.h"

namespace ssdtrain::traces {
namespace {

using detail::JsonPath;
using detail::ObjectReader;
using nlohmann::json;

}  // namespace

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
  for (const OpTiming& t : r.ops)
    ops.push_back(json{{"op", t.op}, {"start_ns", t.start_ns}, {"end_ns", t.end_ns}});
  j["ops"] = std::move(ops);
  j["steps"] = r.steps;
  j["verified"] = r.verified ? json(*r.verified) : json(nullptr);
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
      out.ops.push_back(t);
    }
  }
  SSDTRAIN_ASSIGN_OR_RETURN(out.steps, r.IntOr("steps", 1));
  if (r.Has("verified")) {
    SSDTRAIN_ASSIGN_OR_RETURN(bool v, r.Bool("verified"));
    out.verified = v;
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

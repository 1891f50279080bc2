#include "traces/timeline.h"

#include <algorithm>
#include <array>
#include <map>

#include "traces/detail/enum_names.h"
#include "traces/detail/json_fields.h"

namespace ssdtrain::traces {
namespace {

using detail::JsonPath;
using detail::ObjectReader;
using nlohmann::json;

constexpr detail::NameTable<Lane, 6> kLaneNames{{{Lane::kCompute, "compute"},
                                                 {Lane::kDeviceToHost, "d2h"},
                                                 {Lane::kHostToDevice, "h2d"},
                                                 {Lane::kSsdWrite, "ssd_write"},
                                                 {Lane::kSsdRead, "ssd_read"},
                                                 {Lane::kNetwork, "network"}}};
constexpr double kNsPerUs = 1000.0;

std::optional<Lane> ParseLane(std::string_view s) { return detail::ParseName(kLaneNames, s); }

}  // namespace

int64_t BusyTime(std::vector<std::pair<int64_t, int64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  int64_t busy = 0, cur_start = 0, cur_end = -1;
  for (const auto& [s, e] : intervals) {
    if (cur_end < s) {
      if (cur_end > cur_start) busy += cur_end - cur_start;
      cur_start = s;
      cur_end = e;
    } else {
      cur_end = std::max(cur_end, e);
    }
  }
  if (cur_end > cur_start) busy += cur_end - cur_start;
  return busy;
}

std::string_view ToString(Lane v) { return detail::NameOf(kLaneNames, v); }

json ToJson(const Timeline& t) {
  json spans = json::array();
  for (const Span& s : t.spans) {
    spans.push_back(json{{"lane", ToString(s.lane)},
                         {"start_ns", s.start_ns},
                         {"end_ns", s.end_ns},
                         {"op", s.op == kNoOp ? json(nullptr) : json(s.op)},
                         {"tensor", s.tensor < 0 ? json(nullptr) : json(s.tensor)},
                         {"micro_batch", s.micro_batch},
                         {"stage", s.stage},
                         {"name", s.name},
                         {"bytes", s.bytes}});
  }
  json memory = json::array();
  for (const CounterSample& c : t.memory) {
    memory.push_back(json{{"time_ns", c.time_ns},
                          {"device_bytes", c.device_bytes},
                          {"activation_bytes", c.activation_bytes}});
  }
  return json{{"spans", std::move(spans)}, {"memory", std::move(memory)}};
}

Result<Timeline> TimelineFromJson(const json& j, const std::string& source) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, JsonPath(source, "")));
  Timeline t;
  SSDTRAIN_ASSIGN_OR_RETURN(const json* spans, r.Value("spans"));
  if (!spans->is_array()) return r.At("spans").Error("expected an array");
  for (size_t i = 0; i < spans->size(); ++i) {
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader s,
                              ObjectReader::Make((*spans)[i], r.At("spans").Index(i)));
    Span span;
    SSDTRAIN_ASSIGN_OR_RETURN(std::string lane, s.String("lane"));
    std::optional<Lane> l = ParseLane(lane);
    if (!l) return s.At("lane").Error("unknown lane \"" + lane + "\"");
    span.lane = *l;
    SSDTRAIN_ASSIGN_OR_RETURN(span.start_ns, s.Int("start_ns"));
    SSDTRAIN_ASSIGN_OR_RETURN(span.end_ns, s.Int("end_ns"));
    if (span.end_ns < span.start_ns) return s.At("end_ns").Error("ends before it starts");
    SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> op, s.OptionalInt("op"));
    span.op = op.value_or(kNoOp);
    SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> tensor, s.OptionalInt("tensor"));
    span.tensor = tensor.value_or(-1);
    SSDTRAIN_ASSIGN_OR_RETURN(int64_t mb, s.IntOr("micro_batch", 0));
    span.micro_batch = static_cast<int>(mb);
    SSDTRAIN_ASSIGN_OR_RETURN(int64_t stage, s.IntOr("stage", 0));
    span.stage = static_cast<int>(stage);
    SSDTRAIN_ASSIGN_OR_RETURN(span.name, s.StringOr("name", ""));
    SSDTRAIN_ASSIGN_OR_RETURN(span.bytes, s.IntOr("bytes", 0));
    t.spans.push_back(std::move(span));
  }
  if (r.Has("memory")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const json* mem, r.Value("memory"));
    if (!mem->is_array()) return r.At("memory").Error("expected an array");
    for (size_t i = 0; i < mem->size(); ++i) {
      SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader m,
                                ObjectReader::Make((*mem)[i], r.At("memory").Index(i)));
      CounterSample c;
      SSDTRAIN_ASSIGN_OR_RETURN(c.time_ns, m.Int("time_ns"));
      SSDTRAIN_ASSIGN_OR_RETURN(c.device_bytes, m.Int("device_bytes"));
      SSDTRAIN_ASSIGN_OR_RETURN(c.activation_bytes, m.IntOr("activation_bytes", 0));
      t.memory.push_back(c);
    }
  }
  return t;
}

json ToChromeTrace(const Timeline& t, const std::string& process_name) {
  constexpr int kPid = 1;
  constexpr int kLanesPerStage = static_cast<int>(kLaneNames.size());
  json events = json::array();
  events.push_back(json{
      {"name", "process_name"}, {"ph", "M"}, {"pid", kPid}, {"args", {{"name", process_name}}}});
  std::map<int, bool> named;  // tid -> thread_name emitted (ordered: deterministic output)
  for (const Span& s : t.spans) {
    const int tid = s.stage * kLanesPerStage + static_cast<int>(s.lane);
    if (!named[tid]) {
      named[tid] = true;
      std::string lane(ToString(s.lane));
      events.push_back(json{{"name", "thread_name"},
                            {"ph", "M"},
                            {"pid", kPid},
                            {"tid", tid},
                            {"args", {{"name", "stage " + std::to_string(s.stage) + " " + lane}}}});
    }
    json args{{"micro_batch", s.micro_batch}};
    if (s.op != kNoOp) args["op"] = s.op;
    if (s.tensor >= 0) args["tensor"] = s.tensor;
    if (s.bytes > 0) args["bytes"] = s.bytes;
    events.push_back(json{{"name", s.name.empty() ? std::string(ToString(s.lane)) : s.name},
                          {"ph", "X"},
                          {"pid", kPid},
                          {"tid", tid},
                          {"ts", static_cast<double>(s.start_ns) / kNsPerUs},
                          {"dur", static_cast<double>(s.end_ns - s.start_ns) / kNsPerUs},
                          {"args", std::move(args)}});
  }
  for (const CounterSample& c : t.memory) {
    events.push_back(
        json{{"name", "memory"},
             {"ph", "C"},
             {"pid", kPid},
             {"ts", static_cast<double>(c.time_ns) / kNsPerUs},
             {"args",
              {{"device_MiB", static_cast<double>(c.device_bytes) / (1 << 20)},
               {"activation_MiB", static_cast<double>(c.activation_bytes) / (1 << 20)}}}});
  }
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ns"}};
}

}  // namespace ssdtrain::traces

// The timeline a simulation predicts and a replay measures, in one format keyed
// by the trace's op and tensor ids, exportable as a Chrome/Perfetto trace.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

// Lanes of the timeline; each is one row in Perfetto.
enum class Lane { kCompute, kDeviceToHost, kHostToDevice, kSsdWrite, kSsdRead, kNetwork };
std::string_view ToString(Lane v);  // compute, d2h, h2d, ssd_write, ssd_read, network
// The lanes a step report's lane_busy_ns holds, predicted and measured alike.
inline constexpr Lane kBusyLanes[] = {Lane::kCompute, Lane::kDeviceToHost, Lane::kHostToDevice,
                                      Lane::kSsdWrite, Lane::kSsdRead};
// A lane's busy time: the length of the union of its [start, end) intervals
// (overlapping transfers on one lane count once).
int64_t BusyTime(std::vector<std::pair<int64_t, int64_t>> intervals);

struct Span {
  Lane lane = Lane::kCompute;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  OpId op = kNoOp;       // set for compute spans
  TensorId tensor = -1;  // set for copy and I/O spans
  int micro_batch = 0;
  int stage = 0;
  std::string name;
  int64_t bytes = 0;  // bytes moved, for copy and I/O spans (0 when unknown)
};

struct CounterSample {
  int64_t time_ns = 0;
  int64_t device_bytes = 0;
  int64_t activation_bytes = 0;
};

struct Timeline {
  std::vector<Span> spans;
  std::vector<CounterSample> memory;
};

nlohmann::json ToJson(const Timeline& t);
Result<Timeline> TimelineFromJson(const nlohmann::json& j, const std::string& source);
// Chrome trace events: "X" complete events (µs) with one tid per lane and stage,
// "C" counter events for memory. Opens in ui.perfetto.dev.
nlohmann::json ToChromeTrace(const Timeline& t, const std::string& process_name);

}  // namespace ssdtrain::traces

#include "analysis/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

#include "traces/timeline.h"

namespace ssdtrain::analysis {
namespace {

std::string Fmt(double v, const std::string& unit) {
  if (unit == "ns") return fmt::format("{:.3f} ms", v / 1e6);
  if (unit == "bytes") return fmt::format("{:.1f} MiB", v / (1024.0 * 1024.0));
  return fmt::format("{:.3g}", v);
}

std::string FmtError(double e) {
  if (std::isinf(e)) return "n/a";
  return fmt::format("{:+.1f}%", 100.0 * e);
}

// The tensor-parallel collectives' time by kind, predicted (stage 0's,
// details.collectives) against measured (rank 0's, stage 0's first shard:
// extra.ranks[0].collectives.by_kind), where both have them.
template <typename Add>
void AddCollectives(const traces::StepReport& p, const traces::StepReport& m, const Add& add) {
  const auto details = p.extra.find("details");
  const auto ranks = m.extra.find("ranks");
  if (details == p.extra.end() || !details->contains("collectives") || ranks == m.extra.end() ||
      !ranks->is_array() || ranks->empty()) {
    return;
  }
  const nlohmann::json& measured = (*ranks)[0]
                                       .value("collectives", nlohmann::json::object())
                                       .value("by_kind", nlohmann::json::object());
  for (const auto& [kind, predicted] : (*details)["collectives"].items()) {
    if (!measured.contains(kind)) continue;
    add("collective." + kind, "ns", predicted.value("ns", 0.0), measured.at(kind).value("ns", 0.0));
  }
}

}  // namespace

double RelativeError(double predicted, double measured) {
  if (measured == 0) return predicted == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return (predicted - measured) / measured;
}

Result<Comparison> Compare(const traces::StepReport& p, const traces::StepReport& m, size_t worst) {
  if (p.kind != "prediction" || m.kind != "run") {
    return Status::InvalidArgument(fmt::format(
        "expected a prediction and a measured run, got a {} and a {} (pass --prediction "
        "from `ssdtrain simulate` and --measured from `ssdtrain replay`)",
        p.kind, m.kind));
  }
  if (p.model != m.model || p.trace_fingerprint != m.trace_fingerprint) {
    return Status::FailedPrecondition(
        fmt::format("the prediction and the run describe different traces (prediction: {} "
                    "fingerprint 0x{:016x}; run: {} "
                    "fingerprint 0x{:016x}); simulate and replay the same trace",
                    p.model, p.trace_fingerprint, m.model, m.trace_fingerprint));
  }
  Comparison c;
  c.model = m.model;
  c.policy = m.policy.empty() ? p.policy : m.policy;
  auto add = [&](std::string name, std::string unit, double pv, double mv) {
    c.metrics.push_back(MetricRow{std::move(name), std::move(unit), pv, mv, RelativeError(pv, mv)});
  };
  add("step_time", "ns", static_cast<double>(p.metrics.step_time_ns),
      static_cast<double>(m.metrics.step_time_ns));
  for (traces::Lane l : traces::kBusyLanes) {
    const std::string lane(traces::ToString(l));
    auto pi = p.lane_busy_ns.find(lane);
    auto mi = m.lane_busy_ns.find(lane);
    if (pi == p.lane_busy_ns.end() && mi == m.lane_busy_ns.end()) continue;
    add(std::string("busy.") + lane, "ns",
        pi == p.lane_busy_ns.end() ? 0.0 : static_cast<double>(pi->second),
        mi == m.lane_busy_ns.end() ? 0.0 : static_cast<double>(mi->second));
  }
  add("exposed_io", "ns", static_cast<double>(p.metrics.exposed_io_ns),
      static_cast<double>(m.metrics.exposed_io_ns));
  add("peak_device_memory", "bytes", static_cast<double>(p.metrics.peak_gpu_bytes),
      static_cast<double>(m.metrics.peak_gpu_bytes));
  add("peak_activation_memory", "bytes", static_cast<double>(p.metrics.peak_activation_bytes),
      static_cast<double>(m.metrics.peak_activation_bytes));
  // Each pipeline stage's peaks, when the prediction carries them (its
  // details.stages) and the run measured them (its ranks, a stage's peak the
  // largest of its data-parallel ranks').
  const auto details = p.extra.find("details");
  const auto ranks = m.extra.find("ranks");
  if (details != p.extra.end() && details->contains("stages") && ranks != m.extra.end() &&
      ranks->is_array() && (*details)["stages"].size() > 1) {
    for (const nlohmann::json& st : (*details)["stages"]) {
      const int64_t stage = st.value("stage", int64_t{-1});
      int64_t device = -1, activation = -1;
      for (const nlohmann::json& r : *ranks) {
        if (r.value("stage", int64_t{-1}) != stage) continue;
        device = std::max(device, r.value("peak_device_bytes", int64_t{0}));
        activation = std::max(activation, r.value("peak_activation_bytes", int64_t{0}));
      }
      if (device < 0) continue;
      const std::string name = "stage" + std::to_string(stage) + ".";
      add(name + "peak_device", "bytes", st.value("peak_gpu_bytes", 0.0),
          static_cast<double>(device));
      add(name + "peak_activations", "bytes", st.value("peak_activation_bytes", 0.0),
          static_cast<double>(activation));
    }
  }
  AddCollectives(p, m, add);
  add("ssd_bytes_written", "bytes", static_cast<double>(p.metrics.ssd_bytes_written),
      static_cast<double>(m.metrics.ssd_bytes_written));
  add("ssd_bytes_read", "bytes", static_cast<double>(p.metrics.ssd_bytes_read),
      static_cast<double>(m.metrics.ssd_bytes_read));

  std::unordered_map<traces::OpId, const traces::OpTiming*> predicted;
  for (const traces::OpTiming& t : p.ops) predicted[t.op] = &t;
  for (const traces::OpTiming& t : m.ops) {
    auto it = predicted.find(t.op);
    if (it == predicted.end()) continue;
    const int64_t predicted_ns = it->second->end_ns - it->second->start_ns;
    const int64_t measured_ns = t.end_ns - t.start_ns;
    // Both reports name the op from the same trace (their fingerprints agree);
    // an older one has no names, so take whichever side has it.
    c.worst_ops.push_back(OpErrorRow{t.op, it->second->name.empty() ? t.name : it->second->name,
                                     predicted_ns, measured_ns,
                                     std::llabs(predicted_ns - measured_ns)});
  }
  std::stable_sort(
      c.worst_ops.begin(), c.worst_ops.end(),
      [](const OpErrorRow& a, const OpErrorRow& b) { return a.abs_error_ns > b.abs_error_ns; });
  if (c.worst_ops.size() > worst) c.worst_ops.resize(worst);
  return c;
}

void PrintComparison(const Comparison& c, std::ostream& out) {
  out << fmt::format("{} ({})\n", c.model, c.policy.empty() ? "plan" : c.policy);
  out << fmt::format("{:<24} {:>14} {:>14} {:>9}\n", "", "predicted", "measured", "error");
  for (const MetricRow& r : c.metrics) {
    out << fmt::format("{:<24} {:>14} {:>14} {:>9}\n", r.name, Fmt(r.predicted, r.unit),
                       Fmt(r.measured, r.unit), FmtError(r.relative_error));
  }
  out << "error = (predicted - measured) / measured: + where the prediction is above the "
         "measurement (slower, larger), - where below\n";
  if (!c.worst_ops.empty()) {
    size_t name_width = 4;
    for (const OpErrorRow& r : c.worst_ops) name_width = std::max(name_width, r.name.size());
    out << fmt::format("\nops with the largest absolute error\n{:>8} {:<{}} {:>14} {:>14} {:>14}\n",
                       "op", "name", name_width, "predicted", "measured", "abs error");
    for (const OpErrorRow& r : c.worst_ops) {
      out << fmt::format("{:>8} {:<{}} {:>11.3f} ms {:>11.3f} ms {:>11.3f} ms\n", r.op,
                         r.name.empty() ? "-" : r.name, name_width, r.predicted_ns / 1e6,
                         r.measured_ns / 1e6, r.abs_error_ns / 1e6);
    }
  }
}

void WriteCsv(const Comparison& c, std::ostream& out) {
  out << "kind,name,unit,predicted,measured,relative_error\n";
  for (const MetricRow& r : c.metrics) {
    out << fmt::format(
        "metric,{},{},{},{},{}\n", r.name, r.unit, r.predicted, r.measured,
        std::isinf(r.relative_error) ? std::string("") : fmt::format("{}", r.relative_error));
  }
  for (const OpErrorRow& r : c.worst_ops) {
    out << fmt::format(
        "op,{},ns,{},{},{}\n", r.op, r.predicted_ns, r.measured_ns,
        RelativeError(static_cast<double>(r.predicted_ns), static_cast<double>(r.measured_ns)));
  }
}

}  // namespace ssdtrain::analysis

#include "sim/chunk_times.h"

#include <algorithm>

#include "traces/chunks.h"

namespace ssdtrain::sim {
namespace {

// Durations between consecutive chunk ends, in the order the phase runs them.
std::vector<int64_t> Split(const std::vector<int64_t>& chunk_end, int64_t begin, int64_t end) {
  std::vector<int64_t> out;
  int64_t at = begin;
  for (size_t i = 0; i < chunk_end.size(); ++i) {
    const int64_t until = i + 1 == chunk_end.size() ? end : std::clamp(chunk_end[i], at, end);
    out.push_back(std::max<int64_t>(0, until - at));
    at = std::max(at, until);
  }
  return out;
}

}  // namespace

ChunkTimes ChunkTimesOf(const traces::Trace& trace, const StageResult& r, int64_t v) {
  const traces::Header& h = trace.header;
  if (v < 2 || h.stage_layers < v || h.stage_layers % v != 0 || r.ops.size() != trace.ops.size()) {
    return {};
  }
  const std::vector<int64_t> chunk = traces::ChunkOfOps(trace, v);
  // The end of each chunk's last op, by phase; -1: none ran.
  std::vector<int64_t> forward_end(static_cast<size_t>(v), -1), backward_end(forward_end);
  for (const traces::Op& op : trace.ops) {
    const auto i = static_cast<size_t>(op.id);
    if (chunk[i] < 0 || r.ops[i].end_ns < 0) continue;
    std::vector<int64_t>& ends = op.phase == traces::Phase::kForward ? forward_end : backward_end;
    int64_t& e = ends[static_cast<size_t>(chunk[i])];
    e = std::max(e, r.ops[i].end_ns);
  }
  const bool every_chunk_ran =
      std::none_of(forward_end.begin(), forward_end.end(), [](int64_t e) { return e < 0; }) &&
      std::none_of(backward_end.begin(), backward_end.end(), [](int64_t e) { return e < 0; });
  if (!every_chunk_ran) return {};
  ChunkTimes out;
  out.forward_ns = Split(forward_end, 0, r.forward_end_ns);
  std::reverse(backward_end.begin(), backward_end.end());  // chunk v − 1 runs first
  out.backward_ns =
      Split(backward_end, r.forward_end_ns, std::max(r.forward_end_ns, r.step_ns - r.optimizer_ns));
  std::reverse(out.backward_ns.begin(), out.backward_ns.end());  // by chunk
  return out;
}

}  // namespace ssdtrain::sim

#include "sim/pipeline.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "sim/collective.h"
#include "sim/engine.h"

namespace ssdtrain::sim {
namespace {

struct Task {
  bool forward = true;
  int64_t micro_batch = 0;
};

std::vector<Task> StageOrder(int64_t stage, int64_t p, int64_t m, PipelineSchedule schedule) {
  std::vector<Task> order;
  if (schedule == PipelineSchedule::kGpipe) {
    for (int64_t i = 0; i < m; ++i) order.push_back({true, i});
    for (int64_t i = 0; i < m; ++i) order.push_back({false, i});
    return order;
  }
  const int64_t warmup = std::min(p - stage - 1, m);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back({true, f});
  while (f < m) {
    order.push_back({true, f++});
    order.push_back({false, b++});
  }
  while (b < m) order.push_back({false, b++});
  return order;
}

}  // namespace

Result<PipelineSchedule> ParseSchedule(const std::string& s) {
  if (s == "gpipe") return PipelineSchedule::kGpipe;
  if (s == "1f1b") return PipelineSchedule::kOneFOneB;
  return Status::InvalidArgument("schedule: expected \"1f1b\" or \"gpipe\", got \"" + s + "\"");
}

Result<PipelineResult> SimulatePipeline(const std::vector<StageTimes>& stages, int64_t m,
                                        PipelineSchedule schedule, int64_t send_ns) {
  if (stages.empty()) return Status::InvalidArgument("pipeline: no stages");
  if (m < 1) return Status::InvalidArgument("pipeline: micro-batch count must be >= 1");
  const int64_t p = static_cast<int64_t>(stages.size());
  const size_t n = static_cast<size_t>(p), mm = static_cast<size_t>(m);
  Engine engine;
  std::vector<std::vector<Task>> orders(n);
  for (int64_t s = 0; s < p; ++s) orders[static_cast<size_t>(s)] = StageOrder(s, p, m, schedule);
  // Arrival time of each task's input (-1: not yet produced).
  std::vector<std::vector<int64_t>> fwd_ready(n, std::vector<int64_t>(mm, -1));
  std::vector<std::vector<int64_t>> bwd_ready(n, std::vector<int64_t>(mm, -1));
  for (size_t i = 0; i < mm; ++i) fwd_ready[0][i] = 0;
  std::vector<size_t> next(n, 0);
  std::vector<bool> busy(n, false);
  std::vector<int64_t> in_flight(n, 0);
  PipelineResult result;
  result.max_in_flight.assign(n, 0);
  int64_t busy_total = 0;
  Status error;

  std::function<void(size_t)> try_run = [&](size_t s) {
    if (busy[s] || next[s] >= orders[s].size()) return;
    const Task task = orders[s][next[s]];
    const size_t i = static_cast<size_t>(task.micro_batch);
    // The last stage's backward of a micro-batch follows its own forward.
    const int64_t ready = task.forward ? fwd_ready[s][i] : bwd_ready[s][i];
    if (ready < 0 || ready > engine.Now().ns()) return;
    busy[s] = true;
    ++next[s];
    const int64_t duration = task.forward ? stages[s].forward_ns : stages[s].backward_ns;
    busy_total += duration;
    if (task.forward) {
      result.max_in_flight[s] = std::max(result.max_in_flight[s], ++in_flight[s]);
    }
    Status st = engine.Schedule(Time::Ns(duration), [&, s, task, i] {
      busy[s] = false;
      const int64_t now = engine.Now().ns();
      if (!task.forward) --in_flight[s];
      auto deliver = [&](std::vector<std::vector<int64_t>>& ready_table, size_t to, int64_t at) {
        ready_table[to][i] = at;
        Status d = engine.ScheduleAt(Time::Ns(at), [&, to] { try_run(to); });
        if (!d.ok()) error = d;
      };
      if (task.forward) {
        if (s + 1 < n) {
          deliver(fwd_ready, s + 1, now + send_ns);
        } else {
          deliver(bwd_ready, s, now);
        }
      } else if (s > 0) {
        deliver(bwd_ready, s - 1, now + send_ns);
      }
      try_run(s);
    });
    if (!st.ok()) error = st;
  };
  for (size_t s = 0; s < n; ++s) try_run(s);
  engine.Run();
  SSDTRAIN_RETURN_IF_ERROR(error);
  for (size_t s = 0; s < n; ++s) {
    if (next[s] != orders[s].size()) return Status::Internal("pipeline schedule deadlocked");
  }
  result.makespan_ns = engine.Now().ns();
  if (result.makespan_ns > 0) {
    result.bubble_fraction =
        1.0 - static_cast<double>(busy_total) / (static_cast<double>(p) * result.makespan_ns);
  }
  return result;
}

int64_t RingAllReduceNs(int64_t bytes, int64_t n, double GBps, double latency_us) {
  return CollectiveNs(CollectiveKind::kAllReduce, bytes, n, GBps, latency_us);
}

}  // namespace ssdtrain::sim

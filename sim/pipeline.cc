#include "sim/pipeline.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "sim/collective.h"

namespace ssdtrain::sim {
namespace {

using Task = traces::StageTask;

std::vector<Task> StageOrder(int64_t stage, int64_t p, int64_t m, PipelineSchedule schedule) {
  return traces::StageOrder(schedule, p, stage, m);
}

}  // namespace

int64_t MicroBatchesInFlight(int64_t stage, int64_t p, int64_t m, PipelineSchedule schedule) {
  // 1F1B: stage i's warm-up forwards p − i − 1 micro-batches, then each
  // forward joins them before a backward leaves (traces::StageOrder).
  if (schedule == PipelineSchedule::kGpipe) return m;
  return std::min(p - stage, m);
}

Result<PipelineSchedule> ParseSchedule(const std::string& s) { return traces::ParseSchedule(s); }

Result<PipelineResult> SimulatePipeline(const std::vector<StageTimes>& stages, int64_t m,
                                        PipelineSchedule schedule, int64_t send_ns,
                                        bool record_tasks) {
  if (stages.empty()) return Status::InvalidArgument("pipeline: no stages");
  if (m < 1) return Status::InvalidArgument("pipeline: micro-batch count must be >= 1");
  const int64_t p = static_cast<int64_t>(stages.size());
  const size_t n = static_cast<size_t>(p), mm = static_cast<size_t>(m);
  std::vector<std::vector<Task>> orders(n);
  for (int64_t s = 0; s < p; ++s) orders[static_cast<size_t>(s)] = StageOrder(s, p, m, schedule);
  // Arrival time of each task's input (-1: not yet produced).
  std::vector<std::vector<int64_t>> fwd_ready(n, std::vector<int64_t>(mm, -1));
  std::vector<std::vector<int64_t>> bwd_ready(n, std::vector<int64_t>(mm, -1));
  for (size_t i = 0; i < mm; ++i) fwd_ready[0][i] = 0;
  std::vector<size_t> next(n, 0);
  std::vector<int64_t> stage_free(n, 0), in_flight(n, 0);
  // When each direction of each link (0: forward, s -> s+1; 1: backward,
  // s -> s-1) is free for the next send.
  std::vector<std::array<int64_t, 2>> link_free(n, {0, 0});
  PipelineResult result;
  result.max_in_flight.assign(n, 0);
  result.last_backward_start_ns.assign(n, 0);
  result.stage_end_ns.assign(n, 0);
  int64_t busy_total = 0;

  // Each stage runs its order one task at a time, a task starting when its
  // input has arrived and the stage is free. A stage's sends leave in its
  // task order, which is also their time order, so each link's FIFO needs no
  // event queue: a worklist of stages whose next input may have arrived
  // computes the same times in O(tasks).
  auto send = [&](size_t s, int dir, int64_t at, int64_t micro_batch) {
    int64_t& free = link_free[s][static_cast<size_t>(dir)];
    const int64_t begin = std::max(at, free);
    free = begin + send_ns;
    if (record_tasks) {
      result.tasks.push_back(PipelineTask{
          dir == 0 ? PipelineTask::Kind::kSendForward : PipelineTask::Kind::kSendBackward,
          static_cast<int64_t>(s), micro_batch, begin, free});
    }
    return free;
  };
  std::vector<size_t> work;
  for (size_t s = n; s-- > 0;) work.push_back(s);
  while (!work.empty()) {
    const size_t s = work.back();
    work.pop_back();
    while (next[s] < orders[s].size()) {
      const Task task = orders[s][next[s]];
      const size_t i = static_cast<size_t>(task.micro_batch);
      const int64_t ready = task.forward ? fwd_ready[s][i] : bwd_ready[s][i];
      if (ready < 0) break;
      ++next[s];
      const int64_t start = std::max(ready, stage_free[s]);
      const int64_t duration = task.forward ? stages[s].forward_ns : stages[s].backward_ns;
      const int64_t end = start + duration;
      stage_free[s] = end;
      result.stage_end_ns[s] = end;
      busy_total += duration;
      if (task.forward) {
        result.max_in_flight[s] = std::max(result.max_in_flight[s], ++in_flight[s]);
      } else {
        --in_flight[s];
        result.last_backward_start_ns[s] = start;
      }
      if (record_tasks) {
        result.tasks.push_back(PipelineTask{
            task.forward ? PipelineTask::Kind::kForward : PipelineTask::Kind::kBackward,
            static_cast<int64_t>(s), task.micro_batch, start, end});
      }
      if (task.forward) {
        if (s + 1 < n) {
          fwd_ready[s + 1][i] = send(s, 0, end, task.micro_batch);
          work.push_back(s + 1);
        } else {
          bwd_ready[s][i] = end;  // the last stage's backward follows its forward
        }
      } else if (s > 0) {
        bwd_ready[s - 1][i] = send(s, 1, end, task.micro_batch);
        work.push_back(s - 1);
      }
    }
  }
  for (size_t s = 0; s < n; ++s) {
    if (next[s] != orders[s].size()) return Status::Internal("pipeline schedule deadlocked");
    result.makespan_ns = std::max(result.makespan_ns, result.stage_end_ns[s]);
  }
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

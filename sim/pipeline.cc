#include "sim/pipeline.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "sim/collective.h"

namespace ssdtrain::sim {
namespace {

using Task = traces::StageTask;

// Chunk c's share of a stage's `ns` of v chunks: `given`'s, else
// ⌊ns·(c + 1)/v⌋ − ⌊ns·c/v⌋.
int64_t ChunkNs(int64_t ns, const std::vector<int64_t>& given, int64_t c, int64_t v) {
  if (given.size() == static_cast<size_t>(v)) return given[static_cast<size_t>(c)];
  return ns * (c + 1) / v - ns * c / v;
}

}  // namespace

int64_t ChunksInFlight(int64_t stage, int64_t p, int64_t m, PipelineSchedule schedule, int64_t v) {
  return traces::ChunksInFlight(schedule, p, stage, m, v);
}

int64_t MicroBatchesInFlight(int64_t stage, int64_t p, int64_t m, PipelineSchedule schedule) {
  return ChunksInFlight(stage, p, m, schedule, 1);
}

Result<PipelineSchedule> ParseSchedule(const std::string& s) { return traces::ParseSchedule(s); }

Result<PipelineResult> SimulatePipeline(const std::vector<StageTimes>& stages, int64_t m,
                                        PipelineSchedule schedule, int64_t send_ns,
                                        bool record_tasks, int64_t virtual_stages) {
  if (stages.empty()) return Status::InvalidArgument("pipeline: no stages");
  if (m < 1) return Status::InvalidArgument("pipeline: micro-batch count must be >= 1");
  const int64_t p = static_cast<int64_t>(stages.size());
  const int64_t v = schedule == PipelineSchedule::kInterleaved ? virtual_stages : 1;
  if (schedule == PipelineSchedule::kInterleaved) {
    const std::string why = traces::InterleavedError(p, m, v, 0);
    if (!why.empty()) return Status::InvalidArgument("pipeline: interleaved " + why);
  }
  const size_t n = static_cast<size_t>(p), mm = static_cast<size_t>(m);
  std::vector<std::vector<Task>> orders(n);
  for (int64_t s = 0; s < p; ++s) {
    orders[static_cast<size_t>(s)] = traces::StageOrder(schedule, p, s, m, v);
  }
  // Arrival time of each task's input (-1: not yet produced), by chunk · m + micro-batch.
  const size_t slots = static_cast<size_t>(v) * mm;
  std::vector<std::vector<int64_t>> fwd_ready(n, std::vector<int64_t>(slots, -1));
  std::vector<std::vector<int64_t>> bwd_ready(n, std::vector<int64_t>(slots, -1));
  auto slot = [&](int64_t chunk, int64_t i) { return static_cast<size_t>(chunk * m + i); };
  for (size_t i = 0; i < mm; ++i) fwd_ready[0][i] = 0;
  std::vector<size_t> next(n, 0);
  std::vector<int64_t> stage_free(n, 0), in_flight(n, 0);
  // When each direction of each stage's outgoing link (0: forward, to the next
  // virtual stage; 1: backward, to the previous one) is free for the next send.
  std::vector<std::array<int64_t, 2>> link_free(n, {0, 0});
  PipelineResult result;
  result.max_in_flight.assign(n, 0);
  result.last_backward_start_ns.assign(n, 0);
  result.stage_end_ns.assign(n, 0);
  int64_t busy_total = 0;
  const int64_t last_virtual = p * v - 1;

  // Each stage runs its order one task at a time, a task starting when its
  // input has arrived and the stage is free. A stage's sends leave in its
  // task order, which is also their time order, so each link's FIFO needs no
  // event queue: a worklist of stages whose next input may have arrived
  // computes the same times in O(tasks).
  auto send = [&](size_t s, int dir, int64_t at, const Task& task) {
    int64_t& free = link_free[s][static_cast<size_t>(dir)];
    const int64_t begin = std::max(at, free);
    free = begin + send_ns;
    ++result.sends;
    if (record_tasks) {
      result.tasks.push_back(PipelineTask{
          dir == 0 ? PipelineTask::Kind::kSendForward : PipelineTask::Kind::kSendBackward,
          static_cast<int64_t>(s), task.micro_batch, task.chunk, begin, free});
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
      const size_t at = slot(task.chunk, task.micro_batch);
      const int64_t ready = task.forward ? fwd_ready[s][at] : bwd_ready[s][at];
      if (ready < 0) break;
      ++next[s];
      const int64_t start = std::max(ready, stage_free[s]);
      const StageTimes& st = stages[s];
      const int64_t duration = task.forward
                                   ? ChunkNs(st.forward_ns, st.chunk_forward_ns, task.chunk, v)
                                   : ChunkNs(st.backward_ns, st.chunk_backward_ns, task.chunk, v);
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
            static_cast<int64_t>(s), task.micro_batch, task.chunk, start, end});
      }
      // Virtual stage j = chunk · p + stage sends to j + 1 (forward) or j − 1 (backward).
      const int64_t j = task.chunk * p + static_cast<int64_t>(s);
      if (task.forward && j == last_virtual) {
        bwd_ready[s][at] = end;  // the last virtual stage's backward follows its forward
      } else if (task.forward || j > 0) {
        const int64_t to = task.forward ? j + 1 : j - 1;
        const auto to_stage = static_cast<size_t>(to % p);
        std::vector<int64_t>& ready_at = task.forward ? fwd_ready[to_stage] : bwd_ready[to_stage];
        ready_at[slot(to / p, task.micro_batch)] = send(s, task.forward ? 0 : 1, end, task);
        work.push_back(to_stage);
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

// Pipeline schedules over `pp` stages and `m` micro-batches (GPipe and 1F1B),
// simulated from per-stage forward and backward times of
// one micro-batch and the activation send between neighbouring stages; and the
// data-parallel gradient all-reduce as a ring.
//
// For uniform stages and free sends both schedules take (m + p − 1)·(F + B), so
// the bubble fraction is (p − 1)/(m + p − 1) (Korthikanti et al.). 1F1B's stage
// i holds up to min(p − i, m) micro-batches of activations; GPipe's holds m.
//
// Sends: each micro-batch's activations (forward) and gradients (backward)
// cross the link between neighbouring stages; each direction of each link
// carries one transfer at a time in the order they were sent (a send waits
// for the one before it), taking `send_ns`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/status.h"
#include "traces/whole_step.h"

namespace ssdtrain::sim {

// The schedules and each stage's order of passes: traces/whole_step.h.
using PipelineSchedule = traces::Schedule;
Result<PipelineSchedule> ParseSchedule(const std::string& s);  // "gpipe" or "1f1b"

struct StageTimes {
  int64_t forward_ns = 0;   // one micro-batch
  int64_t backward_ns = 0;  // one micro-batch
};

// One forward or backward of one micro-batch on one stage, or one send.
struct PipelineTask {
  enum class Kind { kForward, kBackward, kSendForward, kSendBackward };
  Kind kind = Kind::kForward;
  int64_t stage = 0;  // a send's sending stage
  int64_t micro_batch = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

struct PipelineResult {
  int64_t makespan_ns = 0;
  double bubble_fraction = 0;          // 1 − busy / (stages · makespan)
  std::vector<int64_t> max_in_flight;  // per stage: micro-batches forwarded, not yet backwarded
  std::vector<int64_t> last_backward_start_ns;  // per stage: its last backward task
  std::vector<int64_t> stage_end_ns;            // per stage: end of its last task
  std::vector<PipelineTask> tasks;  // with record_tasks: stage by stage as inputs arrive
};

// The most micro-batches stage `stage` of `p` holds at once under `schedule`
// (forwarded, not yet backwarded): 1F1B min(p − stage, m), GPipe m.
int64_t MicroBatchesInFlight(int64_t stage, int64_t p, int64_t m, PipelineSchedule schedule);

// `send_ns`: time to send one micro-batch's activations (or gradients) between
// neighbouring stages. `record_tasks`: fill PipelineResult::tasks. Requires
// stages non-empty and m >= 1.
Result<PipelineResult> SimulatePipeline(const std::vector<StageTimes>& stages, int64_t m,
                                        PipelineSchedule schedule, int64_t send_ns,
                                        bool record_tasks = false);

// Ring all-reduce of `bytes` over `n` ranks: 2·(n−1)/n · bytes / GBps plus
// 2·(n−1) link latencies. 0 when n == 1.
int64_t RingAllReduceNs(int64_t bytes, int64_t n, double GBps, double latency_us);

}  // namespace ssdtrain::sim

// Pipeline schedules over `pp` stages and `m` micro-batches (GPipe and 1F1B),
// simulated on the event engine from per-stage forward and backward times of
// one micro-batch and the activation send between neighbouring stages; and the
// data-parallel gradient all-reduce as a ring.
//
// For uniform stages and free sends both schedules take (m + p − 1)·(F + B), so
// the bubble fraction is (p − 1)/(m + p − 1) (Korthikanti et al.). 1F1B's first
// stage holds up to min(p, m) micro-batches of activations; GPipe's holds m.
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

struct PipelineResult {
  int64_t makespan_ns = 0;
  double bubble_fraction = 0;          // 1 − busy / (stages · makespan)
  std::vector<int64_t> max_in_flight;  // per stage: micro-batches forwarded, not yet backwarded
};

// `send_ns`: time to send one micro-batch's activations (or gradients) between
// neighbouring stages. Requires stages non-empty and m >= 1.
Result<PipelineResult> SimulatePipeline(const std::vector<StageTimes>& stages, int64_t m,
                                        PipelineSchedule schedule, int64_t send_ns);

// Ring all-reduce of `bytes` over `n` ranks: 2·(n−1)/n · bytes / GBps plus
// 2·(n−1) link latencies. 0 when n == 1.
int64_t RingAllReduceNs(int64_t bytes, int64_t n, double GBps, double latency_us);

}  // namespace ssdtrain::sim

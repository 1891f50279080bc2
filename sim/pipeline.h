// Pipeline schedules over `pp` stages and `m` micro-batches (GPipe, 1F1B and
// interleaved 1F1B), simulated from per-stage forward and backward times of
// one micro-batch and the activation send between neighbouring stages; and the
// data-parallel gradient all-reduce as a ring.
//
// For uniform stages and free sends GPipe and 1F1B take (m + p − 1)·(F + B), so
// the bubble fraction is (p − 1)/(m + p − 1) (Korthikanti et al.). 1F1B's stage
// i holds up to min(p − i, m) micro-batches of activations; GPipe's holds m.
//
// Interleaved (v model chunks per stage, traces/whole_step.h): virtual stage
// c·p + s is chunk c of stage s; chunk c's forward and backward take the
// stage's chunk times where given (StageTimes::chunk_forward_ns; Simulate
// gives them from the stage's ops, the embedding in chunk 0 and the head in
// the last: sim/chunk_times.h), else ⌊F·(c + 1)/v⌋ − ⌊F·c/v⌋ of its F and B. Uniform stages with
// free sends take (m·v + p − 1)·(F + B)/v: the bubble is (p − 1)/(v·m) of the ideal step m·(F + B),
// the fraction (p − 1)/(v·m + p − 1). Stage i holds traces::ChunksInFlight chunks, stage 0 the
// most.
//
// Sends: each micro-batch's activations (forward) and gradients (backward)
// cross the link from each virtual stage to the next, v·p − 1 sends each way
// per micro-batch (p − 1 without interleaving): interleaved, the last stage
// sends chunk c's output to stage 0's chunk c + 1 (the wrap), and stage 0
// sends chunk c's input gradient back to the last stage's chunk c − 1. Each
// direction of each stage's outgoing link carries one transfer at a time in
// the order they were sent (a send waits for the one before it), taking
// `send_ns`.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "traces/status.h"
#include "traces/whole_step.h"

namespace ssdtrain::sim {

// The schedules and each stage's order of passes: traces/whole_step.h.
using PipelineSchedule = traces::Schedule;
Result<PipelineSchedule> ParseSchedule(const std::string& s);  // "gpipe", "1f1b", "interleaved"

struct StageTimes {
  StageTimes(int64_t forward = 0, int64_t backward = 0, std::vector<int64_t> chunk_forward = {},
             std::vector<int64_t> chunk_backward = {})
      : forward_ns(forward),
        backward_ns(backward),
        chunk_forward_ns(std::move(chunk_forward)),
        chunk_backward_ns(std::move(chunk_backward)) {}
  int64_t forward_ns = 0;   // one micro-batch
  int64_t backward_ns = 0;  // one micro-batch
  // Interleaved: each chunk's share (v each, sim/chunk_times.h); empty: the
  // even split ⌊F·(c + 1)/v⌋ − ⌊F·c/v⌋.
  std::vector<int64_t> chunk_forward_ns, chunk_backward_ns;
};

// One forward or backward of one micro-batch (one chunk of it, interleaved) on
// one stage, or one send.
struct PipelineTask {
  enum class Kind { kForward, kBackward, kSendForward, kSendBackward };
  Kind kind = Kind::kForward;
  int64_t stage = 0;  // a send's sending stage
  int64_t micro_batch = 0;
  int64_t chunk = 0;  // interleaved: the model chunk (a send's sending chunk)
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

struct PipelineResult {
  int64_t makespan_ns = 0;
  double bubble_fraction = 0;  // 1 − busy / (stages · makespan)
  // Per stage: chunks forwarded, not yet backwarded (micro-batches when v = 1).
  std::vector<int64_t> max_in_flight;
  int64_t sends = 0;  // point-to-point transfers in the step, both directions
  std::vector<int64_t> last_backward_start_ns;  // per stage: its last backward task
  std::vector<int64_t> stage_end_ns;            // per stage: end of its last task
  std::vector<PipelineTask> tasks;  // with record_tasks: stage by stage as inputs arrive
};

// The most chunks stage `stage` of `p` holds at once under `schedule` with `v`
// chunks per stage (traces::ChunksInFlight): with v = 1 micro-batches, 1F1B
// min(p − stage, m), GPipe m.
int64_t ChunksInFlight(int64_t stage, int64_t p, int64_t m, PipelineSchedule schedule,
                       int64_t v = 1);
// The same in micro-batches, v = 1 (GPipe and 1F1B).
int64_t MicroBatchesInFlight(int64_t stage, int64_t p, int64_t m, PipelineSchedule schedule);

// `send_ns`: time to send one micro-batch's activations (or gradients) between
// neighbouring (virtual) stages. `record_tasks`: fill PipelineResult::tasks.
// `virtual_stages`: v, interleaved only (1 otherwise). Requires stages
// non-empty and m >= 1; interleaved, traces::InterleavedError empty.
Result<PipelineResult> SimulatePipeline(const std::vector<StageTimes>& stages, int64_t m,
                                        PipelineSchedule schedule, int64_t send_ns,
                                        bool record_tasks = false, int64_t virtual_stages = 1);

// Ring all-reduce of `bytes` over `n` ranks: 2·(n−1)/n · bytes / GBps plus
// 2·(n−1) link latencies. 0 when n == 1.
int64_t RingAllReduceNs(int64_t bytes, int64_t n, double GBps, double latency_us);

}  // namespace ssdtrain::sim

// An interleaved stage's model chunks (sim/pipeline.h): how long each chunk's
// forward and backward take, from the stage's simulated micro-batch.
//
// Each op's chunk is traces::ChunkOfOps (traces/chunks.h, the replay's too):
// chunk c of v holds the stage's blocks local c·L/v .. (c + 1)·L/v − 1, the
// embedding in chunk 0, the head and loss in chunk v − 1. A chunk's forward
// lasts from the end of the
// previous chunk's last forward op (0 for chunk 0) to the end of its own last
// one (forward_end_ns for the last chunk); backward runs the chunks in reverse
// from forward_end_ns, chunk 0 ending where the micro-batch's backward does
// (step_ns − optimizer_ns). So the chunks' times sum to the stage's, with
// waits for I/O in the chunk they delay.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/stage_sim.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

struct ChunkTimes {
  std::vector<int64_t> forward_ns, backward_ns;  // by chunk, v each
};

// Empty vectors when the trace does not say its blocks (stage_layers not a
// multiple of v, or no op in a block): the caller splits the stage evenly.
ChunkTimes ChunkTimesOf(const traces::Trace& trace, const StageResult& r, int64_t v);

}  // namespace ssdtrain::sim

// Per-layer accounting of a trace: unique saved-for-backward activation bytes
// (each storage counted once, views add nothing), forward and backward FLOPs.
#pragma once

#include <cstdint>
#include <vector>

#include "traces/trace.h"

namespace ssdtrain::traces {

struct LayerSummary {
  int layer = kNoLayer;  // kNoLayer: embedding, head, loss
  int64_t ops = 0;
  int64_t saved_bytes = 0;        // unique saved-for-backward activation storage
  int64_t offloadable_bytes = 0;  // the part of saved_bytes that may be offloaded
  int64_t forward_flops = 0;
  int64_t backward_flops = 0;
};

struct TraceSummary {
  std::vector<LayerSummary> layers;  // kNoLayer first, then blocks in index order
  LayerSummary total;
  int64_t weight_bytes = 0;
  int64_t tensors = 0;
};

TraceSummary Summarize(const Trace& trace);

}  // namespace ssdtrain::traces

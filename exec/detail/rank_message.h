// What follows the payload of every message a replay sends another rank (a
// pipeline send, exec/replay_pipeline.cc; a collective's piece,
// exec/replay_tensor_parallel.cc): the payload's CRC32C, checked on arrival,
// and the sender's verification seed. And how their messages name an op.
#pragma once

#include <cstdint>
#include <string>

#include "traces/trace.h"

namespace ssdtrain::exec::detail {

struct MessageTrailer {
  uint32_t crc = 0;
  uint32_t unused = 0;
  uint64_t seed = 0;
};
static_assert(sizeof(MessageTrailer) == 16);

// "op 12 (L0.fc1, micro-batch 3)"
inline std::string RankOpName(const traces::Op& op) {
  return "op " + std::to_string(op.id) + " (" + op.name + ", micro-batch " +
         std::to_string(op.micro_batch) + ")";
}

}  // namespace ssdtrain::exec::detail

// What follows the payload of every message a replay sends another rank (a
// pipeline send, exec/replay_pipeline.cc; a collective's piece,
// exec/replay_tensor_parallel.cc): the payload's CRC32C, checked on arrival,
// and the sender's verification seed. And how their messages name an op, and
// how a collective checks a piece against its sender's pattern (--verify).
#pragma once

#include <cstdint>
#include <string>

#include "exec/device.h"
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

// The first byte of [p, p + bytes) that differs from the pattern of `seed`
// at byte `offset` onwards; -1 when none does.
inline int64_t PatternMismatch(const uint8_t* p, int64_t bytes, uint64_t seed, int64_t offset) {
  for (int64_t i = 0; i < bytes; ++i) {
    if (p[i] != PatternByte(seed, static_cast<uint64_t>(offset + i))) return i;
  }
  return -1;
}

inline void FillPattern(uint8_t* p, int64_t bytes, uint64_t seed, int64_t offset) {
  for (int64_t i = 0; i < bytes; ++i) p[i] = PatternByte(seed, static_cast<uint64_t>(offset + i));
}

}  // namespace ssdtrain::exec::detail

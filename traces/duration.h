// Durations in whole nanoseconds, rounded up, decided once for the simulator
// and the executor: a transfer never ends before its last byte has moved, and
// a time in seconds never shrinks when it becomes nanoseconds.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace ssdtrain::traces {

inline constexpr int64_t kNsPerSec = 1'000'000'000;

// The time to move `bytes` (>= 0) at `bytes_per_sec` (> 0), rounded up to a
// whole nanosecond: ceil(bytes · 1e9 / bytes_per_sec), exact in 128-bit
// integers (bytes · 1e9 overflows int64 above 9.2 GB). A result beyond int64
// (more than 292 years) saturates at its maximum.
constexpr int64_t TransferNs(int64_t bytes, int64_t bytes_per_sec) {
  const __int128 num = static_cast<__int128>(bytes) * kNsPerSec;
  const __int128 den = bytes_per_sec;
  const __int128 ns = (num + den - 1) / den;
  constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(ns > kMax ? kMax : ns);
}

// Seconds (>= 0) to nanoseconds, rounded up: ceil(seconds · 1e9), computed in
// double (exact wherever the result is an integer a double holds, below 2^53
// ns, about 104 days). A result beyond int64 saturates at its maximum.
inline int64_t CeilSecondsToNs(double seconds) {
  const double ns = std::ceil(seconds * static_cast<double>(kNsPerSec));
  // 2^63 as a double: the first value that does not fit in int64.
  constexpr double kLimit = 9223372036854775808.0;
  return ns >= kLimit ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(ns);
}

}  // namespace ssdtrain::traces

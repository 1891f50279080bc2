// Integer simulated time, byte counts and bandwidths (ns-3 nstime.h's habit):
// the simulator's clock is an int64 count of nanoseconds, never a double, and
// every duration derived from a bandwidth is rounded UP to the next nanosecond
// (TransferTime, traces::TransferNs), so a transfer never finishes before its
// last byte has moved.
#pragma once

#include <compare>
#include <cstdint>
#include <limits>

#include "traces/duration.h"

namespace ssdtrain::sim {

// A point in simulated time or a duration, in nanoseconds.
class Time {
 public:
  constexpr Time() = default;
  static constexpr Time Ns(int64_t ns) { return Time(ns); }
  static constexpr Time Us(int64_t us) { return Time(us * 1000); }
  static constexpr Time Ms(int64_t ms) { return Time(ms * 1000 * 1000); }
  static constexpr Time Max() { return Time(std::numeric_limits<int64_t>::max()); }

  constexpr int64_t ns() const { return ns_; }
  constexpr auto operator<=>(const Time&) const = default;
  constexpr Time operator+(Time o) const { return Time(ns_ + o.ns_); }
  constexpr Time operator-(Time o) const { return Time(ns_ - o.ns_); }
  constexpr Time& operator+=(Time o) {
    ns_ += o.ns_;
    return *this;
  }

 private:
  constexpr explicit Time(int64_t ns) : ns_(ns) {}
  int64_t ns_ = 0;
};

// A byte count.
struct Bytes {
  int64_t value = 0;
  constexpr auto operator<=>(const Bytes&) const = default;
};

// A bandwidth in bytes per second (integer: 1 B/s resolution is far below any link).
struct BytesPerSec {
  int64_t value = 0;
  constexpr auto operator<=>(const BytesPerSec&) const = default;
};

using traces::kNsPerSec;

// Time to move `bytes` at `rate`, rounded up to whole nanoseconds:
// traces::TransferNs (ceil(bytes * 1e9 / rate), exact). `rate` must be positive.
constexpr Time TransferTime(Bytes bytes, BytesPerSec rate) {
  return Time::Ns(traces::TransferNs(bytes.value, rate.value));
}

// Bytes moved at `rate` during `dt`, rounded down: floor(rate * dt / 1e9).
// With TransferTime's round-up, BytesMoved(TransferTime(b, r), r) >= b.
constexpr Bytes BytesMoved(BytesPerSec rate, Time dt) {
  const __int128 num = static_cast<__int128>(rate.value) * dt.ns();
  return Bytes{static_cast<int64_t>(num / kNsPerSec)};
}

// GB/s (1e9 bytes per second, the unit vendors and configs use) to BytesPerSec.
constexpr BytesPerSec GBps(double gb_per_s) {
  return BytesPerSec{static_cast<int64_t>(gb_per_s * 1e9)};
}

}  // namespace ssdtrain::sim

// A token bucket for the optional SSD bandwidth cap: a request may start while
// the balance is non-negative and then takes its bytes (the balance may go
// negative, so one request is never split); the balance refills at `rate`
// bytes/s up to `burst` bytes. Not thread-safe (the engine's I/O thread owns it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace ssdtrain::exec::detail {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  // rate <= 0: unlimited.
  TokenBucket(double rate_bytes_per_s, double burst_bytes)
      : rate_(rate_bytes_per_s), burst_(burst_bytes), tokens_(burst_bytes), last_(Clock::now()) {}

  bool limited() const { return rate_ > 0; }

  // Nanoseconds until a request may start (0: now).
  int64_t WaitNs() {
    if (!limited()) return 0;
    Refill();
    return tokens_ >= 0 ? 0 : static_cast<int64_t>(-tokens_ / rate_ * 1e9) + 1;
  }

  void Take(int64_t bytes) {
    if (limited()) tokens_ -= static_cast<double>(bytes);
  }

 private:
  void Refill() {
    const Clock::time_point now = Clock::now();
    const double dt = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    tokens_ = std::min(burst_, tokens_ + dt * rate_);
  }

  double rate_;
  double burst_;
  double tokens_;
  Clock::time_point last_;
};

}  // namespace ssdtrain::exec::detail

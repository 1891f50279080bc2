// The arithmetic that puts CUDA event times on the host's steady clock, kept
// free of CUDA so that it is unit-tested in every build
// (exec/tests/cuda_host_logic_test.cc). Used by exec/cuda_streams.cc.
//
// cudaEventElapsedTime returns float milliseconds. Measured from one epoch
// fixed when the device was made, the float's step grows with the device's age
// (2 us at 30 s, 8 us at 130 s: the length of an H200 op), so every op time
// would come out quantized. Instead each event is timed from an *anchor*: a
// timing event recorded on an idle private stream and synchronized, so it
// completes at once. A fresh anchor is taken when an event is recorded and the
// current anchor is older than kAnchorRenewNs; an event's float elapsed time is
// then below ~a second (plus however far the stream lags its host thread), where
// the float's step is under 0.1 us, below the events' own 0.5 us resolution.
//
// An anchor's host time chains from the previous anchor's with the device's
// own elapsed time (a float over at most kAnchorChainMaxNs, so a step under
// 0.5 us) rather than from the host clock read after its synchronization,
// which would carry that call's latency (a few us, different per anchor) into
// ops whose start and end events straddle two anchors. After a longer quiet
// spell the chain link would be coarse, so the anchor takes the host clock.
#pragma once

#include <cmath>
#include <cstdint>

namespace ssdtrain::exec::detail {

// A recorded anchor older than this (host time) is replaced at the next Record.
constexpr int64_t kAnchorRenewNs = 250'000'000;
// Anchors further apart than this take their host time from the host clock:
// over 4 s a float millisecond count still resolves 0.25 us, beyond it coarser.
constexpr int64_t kAnchorChainMaxNs = 4'000'000'000;

// Float milliseconds (cudaEventElapsedTime) to integer nanoseconds, rounded.
inline int64_t ElapsedMsToNs(float ms) {
  return static_cast<int64_t>(std::llround(static_cast<double>(ms) * 1e6));
}

// True when an anchor taken at host time `anchor_taken_ns` should be renewed
// before recording an event at `now_ns`.
inline bool AnchorIsStale(int64_t anchor_taken_ns, int64_t now_ns) {
  return now_ns - anchor_taken_ns >= kAnchorRenewNs;
}

// The host time of a new anchor, given the previous anchor's host time and
// the host clock when each was taken, and the device's elapsed time from the
// previous anchor to the new one.
inline int64_t NextAnchorHostNs(int64_t prev_host_ns, int64_t prev_taken_ns, int64_t now_ns,
                                float elapsed_ms_from_prev) {
  if (now_ns - prev_taken_ns > kAnchorChainMaxNs) return now_ns;
  return prev_host_ns + ElapsedMsToNs(elapsed_ms_from_prev);
}

// An event's host time: its anchor's host time plus the device's elapsed
// time from the anchor to the event.
inline int64_t EventHostNs(int64_t anchor_host_ns, float elapsed_ms_from_anchor) {
  return anchor_host_ns + ElapsedMsToNs(elapsed_ms_from_anchor);
}

}  // namespace ssdtrain::exec::detail

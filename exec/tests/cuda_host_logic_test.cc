// The CUDA backend's host-side arithmetic, tested in every build (no GPU, no
// CUDA toolkit needed): event times on the host clock
// (exec/detail/event_clock.h), the per-stream mismatch words
// (exec/detail/device_words.h) and the GEMM workspace layout
// (exec/detail/gemm_workspace.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <tuple>

#include "exec/detail/device_words.h"
#include "exec/detail/event_clock.h"
#include "exec/detail/gemm_workspace.h"

namespace ssdtrain::exec::detail {
namespace {

// What cudaEventElapsedTime returns for two events `ns` apart: float ms.
float ElapsedMs(int64_t ns) { return static_cast<float>(static_cast<double>(ns) / 1e6); }

// A device whose clock equals the host's, driven the way CudaDevice drives
// the helpers: an anchor is taken (on an idle stream, synchronized) when the
// current one is stale at a Record; the host clock read after that
// synchronization is late by a latency that differs per anchor.
class SimulatedClock {
 public:
  SimulatedClock() { Take(0); }
  // Records an event at host time `now`; it completes on the device at `done`
  // (>= now: the stream lags). Returns its host time as TimeNs computes it.
  int64_t EventAt(int64_t now, int64_t done) {
    if (AnchorIsStale(taken_ns_, now)) Take(now);
    return EventHostNs(host_ns_, ElapsedMs(done - device_ns_));
  }
  int anchors() const { return anchors_; }
  int64_t taken_ns() const { return taken_ns_; }

 private:
  void Take(int64_t now) {
    // 2..9 us of synchronization latency, varying from anchor to anchor.
    const int64_t latency = 2000 + (anchors_ * 7919) % 7000;
    const int64_t taken = now + latency;
    host_ns_ = anchors_ == 0
                   ? taken
                   : NextAnchorHostNs(host_ns_, taken_ns_, taken, ElapsedMs(now - device_ns_));
    device_ns_ = now;
    taken_ns_ = taken;
    ++anchors_;
  }
  int64_t device_ns_ = 0;  // the anchor's true (device) time
  int64_t host_ns_ = 0;    // its host time as computed
  int64_t taken_ns_ = 0;   // the host clock when it was taken
  int anchors_ = 0;
};

TEST(EventClock, OpTimesStayExactForMinutesOfDeviceLife) {
  // An op of 3.217 us every 10 ms for 130 s, its events completing 40 us after
  // they are recorded. From one epoch made at 0 s, float ms at 130 s step by
  // 2^-6 ms = 15.6 us: the op would read as 0 or 15.6 us. Anchors renewed
  // every 250 ms keep each elapsed time under ~0.3 s, where the float's step
  // is 2^-15 ms = 30 ns, so each duration is within 0.1 us (rounding at both
  // ends), also for ops whose start and end straddle an anchor renewal.
  constexpr int64_t kOpNs = 3217, kLagNs = 40'000, kEveryNs = 10'000'000;
  constexpr int64_t kLifeNs = 130'000'000'000;
  SimulatedClock clock;
  int64_t worst = 0;
  for (int64_t t = kEveryNs; t < kLifeNs; t += kEveryNs) {
    const int64_t start = clock.EventAt(t, t + kLagNs);
    const int64_t end = clock.EventAt(t + kOpNs, t + kLagNs + kOpNs);
    worst = std::max(worst, std::abs((end - start) - kOpNs));
  }
  EXPECT_LE(worst, 100);
  // An anchor per 250 ms, or a little more (renewals land on the 10 ms grid):
  // between 130 s / 0.26 s = 500 and 130 s / 0.25 s = 520, plus the first.
  EXPECT_GE(clock.anchors(), 501);
  EXPECT_LE(clock.anchors(), 521);
  // An op whose end event is the first recorded after its anchor went stale:
  // the start is timed from the old anchor, the end from the new one, and the
  // chain between them keeps the duration.
  const int before = clock.anchors();
  const int64_t t = clock.taken_ns() + kAnchorRenewNs - 1000;
  const int64_t start = clock.EventAt(t, t + kLagNs);
  const int64_t end = clock.EventAt(t + kOpNs, t + kLagNs + kOpNs);
  EXPECT_EQ(clock.anchors(), before + 1);
  EXPECT_LE(std::abs((end - start) - kOpNs), 100);
}

TEST(EventClock, AnchorChainsDeviceTimeAndTakesTheHostClockAfterAQuietSpell) {
  // 1 s after an anchor with host time 5 s (taken at 5.000004 s), the device
  // says 1000.0005 ms: the next anchor is 5 s + 1000000.5 ns rounded = 6.0000005 s
  // (rounding half away from zero), not the host clock's 6.000009 s.
  EXPECT_EQ(NextAnchorHostNs(5'000'000'000, 5'000'004'000, 6'000'009'000, 1000.0005f),
            5'000'000'000 + ElapsedMsToNs(1000.0005f));
  EXPECT_NEAR(static_cast<double>(ElapsedMsToNs(1000.0005f)), 1'000'000'500.0, 64.0);
  // After 100 s without an anchor a float of 100000 ms steps by 7.8 us: the
  // new anchor takes the host clock instead.
  EXPECT_EQ(NextAnchorHostNs(5'000'000'000, 5'000'004'000, 105'000'009'000, 100000.0f),
            105'000'009'000);
  EXPECT_FALSE(AnchorIsStale(0, kAnchorRenewNs - 1));
  EXPECT_TRUE(AnchorIsStale(0, kAnchorRenewNs));
}

TEST(DeviceWords, EachStreamChecksIntoItsOwnWord) {
  // Five streams, five distinct mismatch words, none of them the read sink,
  // all inside the kDeviceWords-word allocation.
  std::set<int> words;
  for (Stream s : kAllStreams) {
    const int w = MismatchWord(s);
    EXPECT_NE(w, kReadSinkWord) << ToString(s);
    EXPECT_GE(w, 0) << ToString(s);
    EXPECT_LT(w, kDeviceWords) << ToString(s);
    words.insert(w);
  }
  EXPECT_EQ(words.size(), 5u);
  EXPECT_EQ(kDeviceWords, 6);
}

TEST(GemmWorkspace, OutputMatricesOfOneCallNeverShareElements) {
  // The attention stand-in, 256 x 256 x 256: a C matrix is 256*256*4 B =
  // 256 KiB, so the 64 MiB output region holds 256 and a batch of 1000 runs as
  // 256 + 256 + 256 + 232. The workspace is (2*65536 + 256*65536) * 4 B.
  EXPECT_EQ(OutputChunk(256, 256, 1000), 256);
  EXPECT_EQ(WorkspaceBytes(256, 256, 256, 1000), (2 * 65536 + 256 * 65536) * 4);
  // A batch smaller than the region's room gets exactly its own matrices.
  EXPECT_EQ(OutputChunk(256, 256, 3), 3);
  EXPECT_EQ(WorkspaceBytes(256, 128, 64, 2), (256 * 64 + 64 * 128 + 2 * 256 * 128) * 4);
  // A matrix larger than the region (8192^2 * 4 B = 256 MiB) runs one per call.
  EXPECT_EQ(OutputChunk(8192, 8192, 16), 1);
  EXPECT_EQ(OutputChunk(64, 64, 0), 1);
  // Every C matrix of one call lies inside the workspace, after A and B,
  // disjoint from the others: matrix i spans [C + i*m*n, C + (i+1)*m*n).
  for (const auto& [m, n, k, batch] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{256, 256, 256, 1000},
        {1024, 3072, 1024, 8},
        {4096, 4096, 128, 64}}) {
    const int64_t chunk = OutputChunk(m, n, batch);
    const int64_t c = WorkspaceCOffset(m, n, k);
    EXPECT_EQ(c, m * k + k * n);
    EXPECT_GE(WorkspaceBOffset(m, k), WorkspaceAOffset() + m * k);
    EXPECT_LE((c + chunk * m * n) * kMaxElementBytes, WorkspaceBytes(m, n, k, batch))
        << m << "x" << n << "x" << k << "x" << batch;
    EXPECT_GE(chunk, 1);
    EXPECT_LE(chunk, batch);
  }
}

}  // namespace
}  // namespace ssdtrain::exec::detail

#include "traces/duration.h"

#include <gtest/gtest.h>

#include <limits>

namespace ssdtrain::traces {
namespace {

TEST(Duration, TransferDividingExactlyIsNotRoundedUp) {
  // 1 GB at 1 GB/s is exactly 1 s; 4096 B at 4096 B/s is 1 s.
  EXPECT_EQ(TransferNs(1'000'000'000, 1'000'000'000), kNsPerSec);
  EXPECT_EQ(TransferNs(4096, 4096), kNsPerSec);
  EXPECT_EQ(TransferNs(0, 7), 0);
}

TEST(Duration, TransferWithARemainderRoundsUpToTheNextNanosecond) {
  // 1 B at 3 B/s: 333,333,333.3 ns -> 333,333,334. 1 B at 2 GB/s: 0.5 ns -> 1.
  EXPECT_EQ(TransferNs(1, 3), 333'333'334);
  EXPECT_EQ(TransferNs(1, 2'000'000'000), 1);
  // 10 B at 3 B/s: 3,333,333,333.3 ns -> 3,333,333,334.
  EXPECT_EQ(TransferNs(10, 3), 3'333'333'334);
}

TEST(Duration, TransferOfLargeCountsDoesNotOverflow) {
  // 1 TB at 7 GB/s: 1e12 · 1e9 = 1e21 overflows int64 (9.2e18) but not
  // 128 bits; 1e21 / 7e9 = 142,857,142,857.14 ns -> 142,857,142,858.
  EXPECT_EQ(TransferNs(1'000'000'000'000, 7'000'000'000), 142'857'142'858);
  // The largest byte count at 1 B/s: INT64_MAX · 1e9 ns, beyond int64: saturates.
  EXPECT_EQ(TransferNs(std::numeric_limits<int64_t>::max(), 1),
            std::numeric_limits<int64_t>::max());
  // INT64_MAX bytes at INT64_MAX B/s: exactly 1 s.
  EXPECT_EQ(TransferNs(std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max()),
            kNsPerSec);
}

TEST(Duration, SecondsToNsRoundsUpAndKeepsWholeNanoseconds) {
  EXPECT_EQ(CeilSecondsToNs(0), 0);
  EXPECT_EQ(CeilSecondsToNs(1.5), 1'500'000'000);  // exact
  EXPECT_EQ(CeilSecondsToNs(2e-6), 2'000);         // 2 µs, exact in double
  EXPECT_EQ(CeilSecondsToNs(0.25e-9), 1);          // a quarter ns -> 1
  EXPECT_EQ(CeilSecondsToNs(1.0000000005), 1'000'000'001);
  // 1e12 s is 1e21 ns, beyond int64: saturates instead of overflowing.
  EXPECT_EQ(CeilSecondsToNs(1e12), std::numeric_limits<int64_t>::max());
  // 9e9 s = 9e18 ns still fits (below 9.22e18).
  EXPECT_EQ(CeilSecondsToNs(9e9), 9'000'000'000'000'000'000);
}

}  // namespace
}  // namespace ssdtrain::traces

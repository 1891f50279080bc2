// The caching allocator's model against PyTorch's rules, on sequences whose
// reserved and allocated bytes follow from the rules by hand
// (sim/caching_allocator.h).
#include "sim/caching_allocator.h"

#include <gtest/gtest.h>

namespace ssdtrain::sim {
namespace {

constexpr int64_t KiB = 1024;
constexpr int64_t MiB = 1024 * KiB;

TEST(CachingAllocator, RoundsRequestsAndSizesSegmentsAsPyTorch) {
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512);
  EXPECT_EQ(CachingAllocator::RoundSize(512), 512);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024);
  EXPECT_EQ(CachingAllocator::SegmentSize(1 * MiB), 2 * MiB);         // small pool
  EXPECT_EQ(CachingAllocator::SegmentSize(1 * MiB + 512), 20 * MiB);  // large, under 10 MiB
  EXPECT_EQ(CachingAllocator::SegmentSize(10 * MiB), 10 * MiB);       // rounded to 2 MiB
  EXPECT_EQ(CachingAllocator::SegmentSize(10 * MiB + 512), 12 * MiB);
}

TEST(CachingAllocator, SmallRequestsShareTwoMiBSegments) {
  CachingAllocator a;
  for (int64_t id = 0; id < 4; ++id) ASSERT_TRUE(a.Allocate(id, 512 * KiB));
  EXPECT_EQ(a.reserved_bytes(), 2 * MiB);
  EXPECT_EQ(a.segments(), 1);
  ASSERT_TRUE(a.Allocate(4, 100));  // rounded to 512 bytes: a second segment
  EXPECT_EQ(a.reserved_bytes(), 4 * MiB);
  EXPECT_EQ(a.allocated_bytes(), 2 * MiB + 512);
}

TEST(CachingAllocator, LargeBlocksSplitOnlyWhenMoreThanOneMiBIsLeft) {
  CachingAllocator a;
  // Four 5 MiB requests fill one 20 MiB segment (the last takes the 5 MiB left whole).
  for (int64_t id = 0; id < 4; ++id) ASSERT_TRUE(a.Allocate(id, 5 * MiB));
  EXPECT_EQ(a.reserved_bytes(), 20 * MiB);
  ASSERT_TRUE(a.Allocate(4, 5 * MiB));
  EXPECT_EQ(a.reserved_bytes(), 40 * MiB);
  // 11 MiB reserves a 12 MiB segment; the 1 MiB left is not split off, so the
  // request holds the whole block.
  CachingAllocator b;
  ASSERT_TRUE(b.Allocate(0, 11 * MiB));
  EXPECT_EQ(b.reserved_bytes(), 12 * MiB);
  EXPECT_EQ(b.allocated_bytes(), 12 * MiB);
}

TEST(CachingAllocator, FreedBlocksStayCachedAndMergeWithFreeNeighbours) {
  CachingAllocator a;
  for (int64_t id = 0; id < 3; ++id) ASSERT_TRUE(a.Allocate(id, 6 * MiB));  // one 20 MiB segment
  EXPECT_EQ(a.reserved_bytes(), 20 * MiB);
  a.Free(1);
  a.Free(0);  // merges with the freed middle block: 12 MiB free at offset 0
  ASSERT_TRUE(a.Allocate(3, 12 * MiB));
  EXPECT_EQ(a.reserved_bytes(), 20 * MiB);
  a.Free(3);
  a.Free(2);
  EXPECT_EQ(a.allocated_bytes(), 0);
  EXPECT_EQ(a.reserved_bytes(), 20 * MiB);  // cached, not returned
}

TEST(CachingAllocator, FragmentationReservesMoreThanIsEverAllocated) {
  CachingAllocator a;
  ASSERT_TRUE(a.Allocate(0, 100 * MiB));
  ASSERT_TRUE(a.Allocate(1, 100 * MiB));
  a.Free(0);
  ASSERT_TRUE(a.Allocate(2, 150 * MiB));  // the cached 100 MiB block does not hold it
  EXPECT_EQ(a.peak_allocated_bytes(), 250 * MiB);
  EXPECT_EQ(a.peak_reserved_bytes(), 350 * MiB);
  // Best fit: 90 MiB takes the cached 100 MiB block (10 MiB split off), not a new one.
  ASSERT_TRUE(a.Allocate(3, 90 * MiB));
  EXPECT_EQ(a.reserved_bytes(), 350 * MiB);
}

TEST(CachingAllocator, ReleasesWhollyFreeSegmentsBeforeFailing) {
  CachingAllocator a(300 * MiB);
  ASSERT_TRUE(a.Allocate(0, 100 * MiB));
  a.Free(0);
  ASSERT_TRUE(a.Allocate(1, 250 * MiB));  // 350 would pass 300: the free 100 MiB goes first
  EXPECT_EQ(a.reserved_bytes(), 250 * MiB);
  EXPECT_EQ(a.peak_reserved_bytes(), 250 * MiB);
  EXPECT_FALSE(a.Allocate(2, 100 * MiB));  // nothing cached to release
  EXPECT_FALSE(a.Allocate(1, 10));         // an id in use
}

// Steps on the allocator: the persistent allocations once, the step's events
// again and again; reserved grows in the first steps only, and what a step
// leaves allocated is freed at its end.
TEST(CachingAllocator, StepsReachAFixedReservedPeak) {
  const std::vector<AllocatorEvent> events = {{0, 40 * MiB},  // a weight (persistent)
                                              {1, 100 * MiB}, {2, 100 * MiB}, {1, 0},  // a forward
                                              {3, 150 * MiB}, {2, 0},         {3, 0},
                                              {4, 30 * MiB}};  // a backward; 4 left allocated
  const AllocatorPeaks one = StepsOnCachingAllocator(events, 1, 0, 1);
  EXPECT_TRUE(one.fits);
  EXPECT_EQ(one.allocated_bytes, 290 * MiB);
  EXPECT_EQ(one.reserved_bytes, 390 * MiB);
  // Step 2: 1 and 2 take the cached 100 MiB blocks, 3 the 150 MiB one, 4 a 100
  // MiB block (split: 70 MiB left): nothing new is reserved.
  const AllocatorPeaks three = StepsOnCachingAllocator(events, 1, 0, 3);
  EXPECT_EQ(three.reserved_bytes, 390 * MiB);
  EXPECT_FALSE(StepsOnCachingAllocator(events, 1, 200 * MiB, 3).fits);
}

}  // namespace
}  // namespace ssdtrain::sim

// Megatron-LM's interleaved 1F1B (traces/whole_step.h): each stage's order of
// chunk passes, the chunks it holds at once, and what interleaving requires.
// The expected orders are written out by hand from Megatron's rules (
// forward_backward_pipelining_with_interleaving, microbatch group size p):
// forward step k runs micro-batch (k / (p·v))·p + k mod p on chunk
// (k mod (p·v)) / p, backward step k the same micro-batch on chunk
// v − 1 − (k mod (p·v)) / p; warm-up (p − stage − 1)·2 + (v − 1)·p forward steps,
// then forward k + warm-up and backward k alternate, then the other backwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "traces/whole_step.h"

namespace ssdtrain::traces {
namespace {

// "F0.1" is micro-batch 0's forward on chunk 1; "B7.0" micro-batch 7's backward on chunk 0.
std::string Written(const std::vector<StageTask>& order) {
  std::string out;
  for (const StageTask& t : order) {
    if (!out.empty()) out.push_back(' ');
    out.push_back(t.forward ? 'F' : 'B');
    out.append(std::to_string(t.micro_batch)).push_back('.');
    out.append(std::to_string(t.chunk));
  }
  return out;
}

TEST(InterleavedOrder, TwoStagesTwoChunksEightMicroBatchesAsMegatron) {
  // p = 2, v = 2, groups of 2 micro-batches: forward steps 0.0 1.0 0.1 1.1 2.0
  // 3.0 2.1 3.1 ..., backward steps 0.1 1.1 0.0 1.0 2.1 3.1 2.0 3.0 ...
  // Stage 0 warms up with (2 − 0 − 1)·2 + 1·2 = 4 forwards, stage 1 with 2.
  EXPECT_EQ(Written(StageOrder(Schedule::kInterleaved, 2, 0, 8, 2)),
            "F0.0 F1.0 F0.1 F1.1 "
            "F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 F4.0 B2.1 F5.0 B3.1 "
            "F4.1 B2.0 F5.1 B3.0 F6.0 B4.1 F7.0 B5.1 F6.1 B4.0 F7.1 B5.0 "
            "B6.1 B7.1 B6.0 B7.0");
  EXPECT_EQ(Written(StageOrder(Schedule::kInterleaved, 2, 1, 8, 2)),
            "F0.0 F1.0 "
            "F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 "
            "F4.0 B2.0 F5.0 B3.0 F4.1 B4.1 F5.1 B5.1 F6.0 B4.0 F7.0 B5.0 "
            "F6.1 B6.1 F7.1 B7.1 "
            "B6.0 B7.0");
}

TEST(InterleavedOrder, FourStagesTwoChunksEightMicroBatchesAsMegatron) {
  // p = 4, v = 2, groups of 4: forward steps 0.0 1.0 2.0 3.0 0.1 1.1 2.1 3.1
  // 4.0 5.0 6.0 7.0 4.1 5.1 6.1 7.1, backward steps 0.1 1.1 2.1 3.1 0.0 1.0 2.0
  // 3.0 4.1 5.1 6.1 7.1 4.0 5.0 6.0 7.0; warm-up 10, 8, 6, 4 forwards.
  EXPECT_EQ(Written(StageOrder(Schedule::kInterleaved, 4, 0, 8, 2)),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 "
            "F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 "
            "B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(Written(StageOrder(Schedule::kInterleaved, 4, 1, 8, 2)),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 "
            "F4.0 B0.1 F5.0 B1.1 F6.0 B2.1 F7.0 B3.1 F4.1 B0.0 F5.1 B1.0 F6.1 B2.0 F7.1 B3.0 "
            "B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(Written(StageOrder(Schedule::kInterleaved, 4, 2, 8, 2)),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 "
            "F2.1 B0.1 F3.1 B1.1 F4.0 B2.1 F5.0 B3.1 F6.0 B0.0 F7.0 B1.0 F4.1 B2.0 F5.1 B3.0 "
            "F6.1 B4.1 F7.1 B5.1 "
            "B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(Written(StageOrder(Schedule::kInterleaved, 4, 3, 8, 2)),
            "F0.0 F1.0 F2.0 F3.0 "
            "F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 F7.0 B3.0 "
            "F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 "
            "B4.0 B5.0 B6.0 B7.0");
}

TEST(InterleavedOrder, StageZeroHoldsMoreThanOneFOneB) {
  // Megatron's count: warm-up plus one, (p − i − 1)·2 + (v − 1)·p + 1 chunks on
  // stage i. p = 4, v = 2: 11, 9, 7, 5 chunks; stage 0's 11 chunks are 5.5
  // micro-batches' activations (p + (p − 1)/v), where 1F1B holds 4.
  for (int64_t stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(ChunksInFlight(Schedule::kInterleaved, 4, stage, 8, 2), 11 - 2 * stage);
    EXPECT_EQ(ChunksInFlight(Schedule::kOneFOneB, 4, stage, 8), 4 - stage);
  }
  // p = 2, v = 2: 5 and 3 chunks. p = 4, v = 4, m = 8: 2·3 + 3·4 + 1 = 19.
  EXPECT_EQ(ChunksInFlight(Schedule::kInterleaved, 2, 0, 8, 2), 5);
  EXPECT_EQ(ChunksInFlight(Schedule::kInterleaved, 2, 1, 8, 2), 3);
  EXPECT_EQ(ChunksInFlight(Schedule::kInterleaved, 4, 0, 8, 4), 19);
  // m = p: the warm-up (2·3 + 4 = 10) reaches all m·v = 8 chunk steps: every
  // chunk is forwarded before the first backward.
  EXPECT_EQ(ChunksInFlight(Schedule::kInterleaved, 4, 0, 4, 2), 8);
}

// ChunksInFlight's closed form against the order it stands for, walked: the
// most chunks forwarded and not yet backwarded, for every schedule and shape.
TEST(InterleavedOrder, ChunksInFlightIsTheMostTheOrderHolds) {
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB, Schedule::kInterleaved}) {
    for (int64_t p = 1; p <= 8; ++p) {
      for (int64_t m = 1; m <= 24; ++m) {
        for (int64_t v = 1; v <= (schedule == Schedule::kInterleaved ? 4 : 1); ++v) {
          for (int64_t stage = 0; stage < p; ++stage) {
            int64_t held = 0, most = 0;
            for (const StageTask& t : StageOrder(schedule, p, stage, m, v)) {
              held += t.forward ? 1 : -1;
              most = std::max(most, held);
            }
            EXPECT_EQ(ChunksInFlight(schedule, p, stage, m, v), most)
                << ToString(schedule) << " p " << p << " stage " << stage << " m " << m << " v "
                << v;
          }
        }
      }
    }
  }
}

TEST(InterleavedOrder, EveryChunkOfEveryMicroBatchRunsOnceEachWay) {
  for (int64_t p : {2, 3, 4}) {
    for (int64_t v : {2, 3}) {
      for (int64_t m : {p, 2 * p, 3 * p}) {
        for (int64_t stage = 0; stage < p; ++stage) {
          const auto order = StageOrder(Schedule::kInterleaved, p, stage, m, v);
          ASSERT_EQ(order.size(), static_cast<size_t>(2 * m * v));
          std::vector<int> seen(static_cast<size_t>(2 * m * v), 0);
          for (const StageTask& t : order) {
            ASSERT_GE(t.chunk, 0);
            ASSERT_LT(t.chunk, v);
            const auto at =
                static_cast<size_t>((t.forward ? 0 : m * v) + t.chunk * m + t.micro_batch);
            // A chunk's backward comes after its forward.
            if (!t.forward) {
              EXPECT_EQ(seen[static_cast<size_t>(t.chunk * m + t.micro_batch)], 1);
            }
            ++seen[at];
          }
          for (int n : seen) EXPECT_EQ(n, 1);
        }
      }
    }
  }
}

TEST(HeldByOtherChunks, EachChunkHoldsOneVthOfAMicroBatch) {
  // 11 chunks of v = 2 beside one micro-batch's own 2: 9 halves of 4000 bytes.
  EXPECT_EQ(HeldByOtherChunks(4000, 11, 2), 18000);
  // Rounded up: 3 thirds of 1000 bytes is 1000; 1 third is 334.
  EXPECT_EQ(HeldByOtherChunks(1000, 6, 3), 1000);
  EXPECT_EQ(HeldByOtherChunks(1000, 4, 3), 334);
  // v = 1 is the plain count, (k − 1) micro-batches; none at k <= v.
  EXPECT_EQ(HeldByOtherChunks(4000, 4, 1), 12000);
  EXPECT_EQ(HeldByOtherChunks(4000, 2, 2), 0);
}

TEST(InterleavedError, NamesWhatInterleavingRequires) {
  EXPECT_EQ(InterleavedError(4, 8, 2, 24), "");
  EXPECT_EQ(InterleavedError(4, 8, 1, 24), "needs at least 2 model chunks per stage, got 1");
  EXPECT_EQ(InterleavedError(1, 8, 2, 24), "needs at least 2 pipeline stages, got pp = 1");
  EXPECT_EQ(InterleavedError(4, 8, 4, 24),
            "the model's 24 layers do not divide by pp x v = 4 x 4 = 16 (each chunk holds layers "
            "/ (pp x v) layers)");
  EXPECT_EQ(InterleavedError(4, 6, 2, 24),
            "the 6 micro-batches are not a multiple of pp = 4 (Megatron-LM interleaves groups of "
            "pp micro-batches)");
}

}  // namespace
}  // namespace ssdtrain::traces

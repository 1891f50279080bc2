// What calibrate times: the copy sizes, from the trace's offload candidates.
#include "exec/calibrate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "exec/tests/replay_test_util.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

TEST(CopySizes, WithoutTracesOneLargeCopy) {
  EXPECT_EQ(CopySizes({}), (std::vector<CopySize>{{int64_t{64} << 20, 1}}));
}

// The tiny GPT's candidates, counted by storage size independently: every
// size the step copies, most bytes first, at most 8 of them.
TEST(CopySizes, TheTraceCandidatesStoragesMostBytesFirst) {
  const traces::Trace trace = testing::TinyGptTrace();
  std::map<int64_t, int64_t> expected;
  for (traces::TensorId id : traces::OffloadCandidates(trace)) {
    const traces::TensorId root = trace.StorageOf(id);
    ASSERT_EQ(trace.tensor(root).alias_of, std::nullopt);
    ++expected[trace.tensor(root).bytes];
  }
  ASSERT_GE(expected.size(), 2u);
  const std::vector<CopySize> sizes = CopySizes({trace});
  ASSERT_EQ(sizes.size(), std::min<size_t>(expected.size(), 8));
  int64_t covered = 0, total = 0;
  for (const auto& [bytes, n] : expected) total += bytes * n;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(sizes[i].count, expected.at(sizes[i].bytes)) << sizes[i].bytes;
    if (i > 0) {
      EXPECT_GE(sizes[i - 1].bytes * sizes[i - 1].count, sizes[i].bytes * sizes[i].count);
    }
    covered += sizes[i].bytes * sizes[i].count;
  }
  if (expected.size() <= 8) {
    EXPECT_EQ(covered, total);
  }
}

// A trace without candidates (every rank skips it alike) falls through to the next.
TEST(CopySizes, FirstTraceWithCandidates) {
  traces::Trace empty = testing::TinyGptTrace();
  for (traces::Tensor& t : empty.tensors) t.offloadable = false;
  const traces::Trace trace = testing::TinyGptTrace(2);
  EXPECT_EQ(CopySizes({empty, trace}), CopySizes({trace}));
  EXPECT_NE(CopySizes({trace}), CopySizes({testing::TinyGptTrace()}));
}

}  // namespace
}  // namespace ssdtrain::exec

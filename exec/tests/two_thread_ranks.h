// Two thread ranks replaying one plan (testing::ReplayOnThreadRanks), each in
// its own temporary folder, for the tensor- and expert-parallel rank tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "exec/replay.h"
#include "exec/tests/io_test_util.h"
#include "exec/tests/replay_test_util.h"

namespace ssdtrain::exec::testing {

struct TwoRanks {
  TempDir dir[2];
  Result<ReplayResult> result[2] = {Status::Internal("not run"), Status::Internal("not run")};

  // Replays `plan` verified, in data-parallel groups of `dp`, rank 1's first
  // write failing with EIO when `fail_write`.
  void Run(const traces::Trace& trace, const traces::Plan& plan, int dp, bool fail_write) {
    auto results =
        ReplayOnThreadRanks(trace, plan, dp, {dir[0].path(), dir[1].path()}, fail_write ? 1 : -1);
    for (int r = 0; r < 2; ++r) result[r] = std::move(results[static_cast<size_t>(r)]);
  }

  // Rank 1 failed with its EIO; rank 0, woken by its abort, with "rank 1
  // failed: " and that message; neither left a file.
  void ExpectRankOnesEioStoppedBoth() const {
    ASSERT_FALSE(result[1].ok());
    EXPECT_NE(result[1].status().message().find("Input/output error"), std::string::npos)
        << result[1].status().ToString();
    ASSERT_FALSE(result[0].ok());
    EXPECT_EQ(result[0].status().message(), "rank 1 failed: " + result[1].status().message());
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(ListTree(dir[r].path()).empty()) << r;
  }
};

}  // namespace ssdtrain::exec::testing

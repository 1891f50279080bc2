// Data-parallel ranks in one process: each rank a thread running a real replay
// (CPU backend, real files), joined by an in-process StepSync that keeps the
// protocol of exec/step_sync.h. The MPI implementation (app/mpi_sync.cc) is
// run by the CLI test under mpirun.
#include <gtest/gtest.h>

#include <barrier>
#include <cstring>
#include <thread>

#include "exec/fault_backend.h"
#include "exec/replay.h"
#include "exec/step_sync.h"
#include "exec/tests/io_test_util.h"
#include "exec/tests/replay_test_util.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using testing::CpuOptions;
using testing::ListTree;
using testing::TempDir;
using testing::TinyGptTrace;

// n threads' StepSync: Agree and AllReduceSum meet at a barrier, as MPI's
// collectives would; a rank that skipped one would leave the others waiting
// (the test would hang, not pass).
class ThreadRanks {
 public:
  explicit ThreadRanks(int n)
      : n_(n), barrier_(n), statuses_(static_cast<size_t>(n)), buffers_(static_cast<size_t>(n)) {}

  class Rank final : public StepSync {
   public:
    Rank(ThreadRanks& all, int rank) : all_(all), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return all_.n_; }
    Status Agree(const Status& local) override {
      all_.statuses_[static_cast<size_t>(rank_)] = local;
      all_.barrier_.arrive_and_wait();
      Status out = Status::Ok();
      for (int r = 0; r < all_.n_; ++r) {
        const Status& st = all_.statuses_[static_cast<size_t>(r)];
        if (st.ok()) continue;
        out = local.ok()
                  ? Status::Unavailable("rank " + std::to_string(r) + " failed: " + st.message())
                  : local;
        break;
      }
      all_.barrier_.arrive_and_wait();  // nobody overwrites a status still being read
      ++agreements;
      return out;
    }
    Status AllReduceSum(void* host, int64_t count, traces::DType dtype) override {
      if (dtype != traces::DType::kFp32) return Status::Unavailable("test ranks sum fp32 only");
      all_.buffers_[static_cast<size_t>(rank_)] = static_cast<float*>(host);
      all_.barrier_.arrive_and_wait();
      if (rank_ == 0) {
        for (int r = 1; r < all_.n_; ++r) {
          for (int64_t i = 0; i < count; ++i) all_.buffers_[0][i] += all_.buffers_[r][i];
        }
        for (int r = 1; r < all_.n_; ++r) {
          std::memcpy(all_.buffers_[r], all_.buffers_[0], static_cast<size_t>(count) * 4);
        }
      }
      all_.barrier_.arrive_and_wait();
      ++allreduces;
      return Status::Ok();
    }
    int agreements = 0, allreduces = 0;

   private:
    ThreadRanks& all_;
    int rank_;
  };

 private:
  int n_;
  std::barrier<> barrier_;
  std::vector<Status> statuses_;
  std::vector<float*> buffers_;
};

struct RankRun {
  TempDir dir;
  Result<ReplayResult> result = Status::Internal("not run");
};

// Replays `plan` on two thread ranks; `fault` (when set) is rank `faulty`'s
// only fault.
void RunTwoRanks(const traces::Trace& trace, const traces::Plan& plan, RankRun runs[2],
                 ThreadRanks::Rank* ranks[2], int faulty = -1, FaultRule fault = {}) {
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      ReplayOptions o = CpuOptions(runs[r].dir.path());
      o.sync = ranks[r];
      o.cpu_pin_threads = false;  // two ranks on one machine
      if (r == faulty) {
        o.make_io_backend = [fault]() -> std::unique_ptr<IoBackend> {
          FaultOptions f;
          f.rules.push_back(fault);
          auto inner = MakeIoBackend(BackendKind::kPosix, 32, nullptr);
          return std::make_unique<FaultBackend>(std::move(*inner), f);
        };
      }
      runs[r].result = Replay(trace, plan, o, "offload-all");
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(ReplayRanks, EachStepSumsTheGradientsOnEveryRank) {
  const traces::Trace trace = TinyGptTrace(1, 128);
  ThreadRanks all(2);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  ThreadRanks::Rank* ranks[2] = {&r0, &r1};
  RankRun runs[2];
  RunTwoRanks(trace, traces::OffloadAllPlan(trace), runs, ranks);
  int weight_gradients = 0;
  for (const traces::Tensor& t : trace.tensors) {
    if (t.kind == traces::TensorKind::kGradient && t.alias_of == std::nullopt &&
        traces::IsWeightGradient(trace, t)) {
      ++weight_gradients;
    }
  }
  ASSERT_GT(weight_gradients, 0);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(runs[r].result.ok()) << runs[r].result.status().ToString();
    EXPECT_GT(runs[r].result->allreduce_ns, 0);
    EXPECT_TRUE(ListTree(runs[r].dir.path()).empty());
    // Set-up, then per step (warm-up + 1): before the gradients and at its end.
    EXPECT_EQ(ranks[r]->agreements, 1 + 2 * 2);
    EXPECT_EQ(ranks[r]->allreduces, 2 * weight_gradients);
  }
}

TEST(ReplayRanks, AWriteErrorOnOneRankStopsBothAndLeavesNoFiles) {
  // Rank 1's third write fails in the warm-up step's forward pass; rank 0 is
  // told at the agreement before the gradients and stops too.
  const traces::Trace trace = TinyGptTrace(1, 128);
  ThreadRanks all(2);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  ThreadRanks::Rank* ranks[2] = {&r0, &r1};
  RankRun runs[2];
  RunTwoRanks(trace, traces::OffloadAllPlan(trace), runs, ranks, /*faulty=*/1,
              FaultRule{IoOp::kWrite, 2, FaultKind::kEio, 1});
  ASSERT_FALSE(runs[1].result.ok());
  EXPECT_EQ(runs[1].result.status().code(), Status::Code::kIoError);
  ASSERT_FALSE(runs[0].result.ok());
  EXPECT_NE(runs[0].result.status().message().find("rank 1 failed: "), std::string::npos)
      << runs[0].result.status().ToString();
  EXPECT_NE(runs[0].result.status().message().find(runs[1].result.status().message()),
            std::string::npos);
  EXPECT_EQ(r0.allreduces, 0);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(ListTree(runs[r].dir.path()).empty());
}

TEST(ReplayRanks, AReadErrorInTheMeasuredStepStopsBoth) {
  // Rank 0's reads fail from the warm-up's tenth on (backward): rank 1 learns
  // of it at the agreement before that step's gradients.
  const traces::Trace trace = TinyGptTrace(1, 128);
  ThreadRanks all(2);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  ThreadRanks::Rank* ranks[2] = {&r0, &r1};
  RankRun runs[2];
  RunTwoRanks(trace, traces::OffloadAllPlan(trace), runs, ranks, /*faulty=*/0,
              FaultRule{IoOp::kRead, 9, FaultKind::kEio, 1000});
  ASSERT_FALSE(runs[0].result.ok());
  ASSERT_FALSE(runs[1].result.ok());
  EXPECT_NE(runs[1].result.status().message().find("rank 0 failed: "), std::string::npos)
      << runs[1].result.status().ToString();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(ListTree(runs[r].dir.path()).empty());
}

}  // namespace
}  // namespace ssdtrain::exec

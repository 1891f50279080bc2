// The MPI ranks' protocol (exec/step_sync.h, app/mpi_sync.cc) under mpirun:
// each test runs one scenario of tests/mpi_rank_scenarios.cc on two ranks and
// reads the line each rank prints. A fault on one rank must end both with its
// message; a mismatched collective hangs instead, which the hang guard turns
// into a failure. Built only with MPI (SSDTRAIN_HAVE_MPI).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cmake/build_paths.h"
#include "tests/cli_util.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;

// A scenario ends in seconds; one still running after this has hung (two
// ranks left in different collectives). Generous: a loaded machine must not
// turn a slow run into a hang.
constexpr int kHangGuardSeconds = 180;
// The scenarios past MPI's int count move gigabytes through shared memory:
// 20-35 s each alone on the 2-core VM, over a minute two at once. They take
// turns (an flock on one file in the temp directory, so ctest -j runs them
// one after the other, each holding about 6 GiB) under a guard of their own.
constexpr int kLargeHangGuardSeconds = 600;
// timeout(1)'s exit status when it had to stop the command.
constexpr int kTimedOut = 124;

class MpiRanks : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-mpi-ranks-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  testing::CliResult Run(const std::string& scenario, int guard_seconds = kHangGuardSeconds) {
    // Root in containers and CI: Open MPI asks for both variables.
    return testing::Shell("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout " +
                          std::to_string(guard_seconds) + " mpirun --oversubscribe -np 2 " +
                          std::string(ConfiguredBinaryDir()) + "/tests/mpi_rank_scenarios " +
                          scenario + " " + dir_.string());
  }
  // A large scenario, one at a time across processes (flock(1) on a shared file).
  // glibc's malloc asks for transparent huge pages on its mmap'd chunks (the
  // reports' gigabyte strings): 4 KiB page faults cost about 7 s per 2 GiB on
  // this project's VM (the gather 16 s alone without it, 5 s with it).
  testing::CliResult RunLarge(const std::string& scenario) {
    const std::string lock = (fs::temp_directory_path() / "ssdtrain-mpi-large.lock").string();
    return testing::Shell("flock " + lock +
                          " env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                          "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 timeout " +
                          std::to_string(kLargeHangGuardSeconds) +
                          " mpirun --oversubscribe -x GLIBC_TUNABLES -np 2 " +
                          std::string(ConfiguredBinaryDir()) + "/tests/mpi_rank_scenarios " +
                          scenario + " " + dir_.string());
  }
  // What rank `rank` printed after "rank R: " ("" when it printed nothing).
  static std::string Said(const testing::CliResult& r, int rank) {
    const std::string prefix = "rank " + std::to_string(rank) + ": ";
    for (size_t at = 0; at < r.output.size();) {
      size_t end = r.output.find('\n', at);
      if (end == std::string::npos) end = r.output.size();
      const std::string line = r.output.substr(at, end - at);
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
      at = end + 1;
    }
    return "";
  }
  // Rank 1 failed with a message containing `cause`, and rank 0 ended with
  // that message, named as rank 1's; no rank hung; nothing left on disk.
  void ExpectBothEndWithRankOnesFailure(const testing::CliResult& r, const std::string& cause) {
    ASSERT_NE(r.exit_code, kTimedOut) << "hung: " << r.output;
    const std::string one = Said(r, 1), zero = Said(r, 0);
    ASSERT_EQ(one.rfind("error: ", 0), 0u) << r.output;
    EXPECT_NE(one.find(cause), std::string::npos) << r.output;
    EXPECT_NE(zero.find("rank 1 failed: " + one.substr(7)), std::string::npos) << r.output;
    for (const char* rank : {"rank-0", "rank-1"}) {
      EXPECT_TRUE(fs::is_empty(dir_ / rank)) << rank << ": files left";
    }
  }
  // Both ranks said ok, and none hung.
  static void ExpectBothOk(const testing::CliResult& r) {
    ASSERT_NE(r.exit_code, kTimedOut) << "hung: " << r.output;
    EXPECT_EQ(Said(r, 0), "ok") << r.output;
    EXPECT_EQ(Said(r, 1), "ok") << r.output;
  }
  // Both ranks said ok, none hung, and nothing is left on disk.
  void ExpectBothOkAndNothingLeft(const testing::CliResult& r) {
    ExpectBothOk(r);
    for (const char* rank : {"rank-0", "rank-1"}) {
      EXPECT_TRUE(fs::is_empty(dir_ / rank)) << rank << ": files left";
    }
  }
  // `scenario` fails rank 1's first offload write with EIO: both end with its message.
  void ExpectAnEioOnRankOneEndsBoth(const std::string& scenario) {
    auto r = Run(scenario);
    ExpectBothEndWithRankOnesFailure(r, "step 0: ");
    EXPECT_NE(Said(r, 1).find("Input/output error"), std::string::npos) << r.output;
  }
  // True when this machine has `bytes` of memory available (MemAvailable).
  static bool MemoryAvailable(int64_t bytes) {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    int64_t kib = 0;
    while (meminfo >> key >> kib) {
      if (key == "MemAvailable:") return kib * 1024 >= bytes;
      meminfo.ignore(64, '\n');
    }
    return false;
  }
  fs::path dir_;
};

TEST_F(MpiRanks, ACopyBackFailingBetweenGradientAllReducesEndsBothWithItsMessage) {
  // Rank 1's first gradient copy back to the device fails after that
  // gradient's all-reduce, while more gradients remain to be summed: rank 0
  // must not be left in the next all-reduce while rank 1 agrees.
  auto r = Run("gradient-copy-back-fails");
  ExpectBothEndWithRankOnesFailure(r, "back to the device after its all-reduce: injected");
}

TEST_F(MpiRanks, AFailedByteCheckOnTheLastStepEndsBothWithItsMessage) {
  // Rank 1's check that the engine moved the bytes its cache counted fails
  // on the last step: rank 0 must not go on to gather the reports while
  // rank 1 agrees on its failure.
  auto r = Run("last-steps-byte-check-fails");
  ExpectBothEndWithRankOnesFailure(r, "step 1: the engine moved");
}

// Two ranks of one tensor-parallel group (tiny GPT at tp 2): their
// collectives exchange real pieces, each checked by CRC32C and, verified,
// against the sum of the group's patterns.
TEST_F(MpiRanks, ATensorParallelGroupReplaysVerified) {
  ExpectBothOkAndNothingLeft(Run("tp-replays"));
}

TEST_F(MpiRanks, AnEioOnOneTensorParallelRanksWriteEndsBothWithItsMessage) {
  // Rank 1's first offload write fails while rank 0 goes on to the next
  // collective of the pair, where it waits for rank 1's piece: rank 1's
  // abort must end that wait.
  ExpectAnEioOnRankOneEndsBoth("tp-write-fails");
}

TEST_F(MpiRanks, ACorruptAllReducePayloadEndsBothWithTheReceiversMessage) {
  // Rank 0 flips a byte of each collective piece after its checksum: rank 1
  // finds the first (an all-reduce's) wrong on arrival.
  auto r = Run("tp-payload-corrupt");
  ExpectBothEndWithRankOnesFailure(r, "all_reduce piece from rank 0 arrived with CRC32C");
}

TEST_F(MpiRanks, ACorruptPieceOfAnAsyncCollectiveEndsBothWhileItsGemmRuns) {
  // The first column-parallel backward all-reduce, exchanged beside the
  // weight gradient (exec/replay_beside.cc): rank 1 finds rank 0's piece
  // wrong on arrival, and both end with its message, nothing left.
  auto r = Run("tp-async-payload-corrupt");
  ExpectBothEndWithRankOnesFailure(r, "all_reduce piece from rank 0 arrived with CRC32C");
  EXPECT_NE(Said(r, 1).find(".in.grad_reduced.all_reduce"), std::string::npos) << r.output;
}

TEST_F(MpiRanks, AWrongContributionThatChecksumsFailsVerification) {
  // Rank 0 flips a byte before the checksum: the piece arrives as sent, but
  // rank 1's verification finds it is not rank 0's pattern.
  auto r = Run("tp-contribution-wrong");
  ExpectBothEndWithRankOnesFailure(r, "verify: op 1 (embedding.out_reduced.all_reduce");
  EXPECT_NE(Said(r, 1).find("the contribution of rank 0 differs from its pattern at byte "),
            std::string::npos)
      << r.output;
}

// Two ranks of one expert-parallel group (tiny-moe at dp 2, ep 2): the MoE
// dispatch and combine exchange real pieces, each checked by CRC32C and,
// verified, against its sender's patterns.
TEST_F(MpiRanks, AnExpertParallelGroupReplaysVerified) {
  ExpectBothOkAndNothingLeft(Run("ep-replays"));
}

TEST_F(MpiRanks, AnEioOnOneExpertParallelRanksWriteEndsBothWithItsMessage) {
  // Rank 1 fails at its first offload write while rank 0 waits in an
  // all-to-all for rank 1's piece: rank 1's abort must end that wait.
  ExpectAnEioOnRankOneEndsBoth("ep-write-fails");
}

TEST_F(MpiRanks, ACorruptAllToAllPayloadEndsBothWithTheReceiversMessage) {
  // Rank 0 flips a byte of each piece after its checksum: rank 1 finds the
  // first (the first MoE layer's dispatch) wrong on arrival.
  auto r = Run("ep-payload-corrupt");
  ExpectBothEndWithRankOnesFailure(r, "all_to_all piece from rank 0 arrived with CRC32C");
  EXPECT_NE(Said(r, 1).find("moe.dispatch.all_to_all"), std::string::npos) << r.output;
}

TEST_F(MpiRanks, AnAllToAllPieceThatChecksumsButIsNotTheSendersFailsVerification) {
  auto r = Run("ep-pieces-wrong");
  ExpectBothEndWithRankOnesFailure(r, "verify: op ");
  EXPECT_NE(Said(r, 1).find("the piece of rank 0 differs from its sender's pattern at byte "),
            std::string::npos)
      << r.output;
}

// Context parallelism's ring (tiny-gpt, flash attention, cp 2) and ZeRO-3
// (dp 2): a write failing on one rank ends both while the other waits for
// its ring message or its shard; a ring message that checksums but is not
// the sender's K/V fails verification; a corrupt shard fails its CRC32C.
TEST_F(MpiRanks, AnEioOnOneContextParallelRanksWriteEndsBothWithItsMessage) {
  ExpectAnEioOnRankOneEndsBoth("cp-write-fails");
}

TEST_F(MpiRanks, AnEioOnOneZero3RanksWriteEndsBothWithItsMessage) {
  ExpectAnEioOnRankOneEndsBoth("zero3-write-fails");
}

TEST_F(MpiRanks, ARingMessageThatChecksumsButIsNotTheSendersKvFailsVerification) {
  auto r = Run("cp-ring-wrong");
  ExpectBothEndWithRankOnesFailure(r, "verify: op ");
  EXPECT_NE(Said(r, 1).find("kv1.cp_ring, micro-batch 0): the ring's message from rank 0 is not "
                            "its K/V's patterns"),
            std::string::npos)
      << r.output;
}

TEST_F(MpiRanks, ACorruptZeroGatherPieceEndsBothWithTheReceiversMessage) {
  auto r = Run("zero3-payload-corrupt");
  ExpectBothEndWithRankOnesFailure(r, "all_gather piece from rank 0 arrived with CRC32C");
  EXPECT_NE(Said(r, 1).find("zero_all_gather"), std::string::npos) << r.output;
}

TEST_F(MpiRanks, PipelineTagsOfAnyMicroBatchArriveAsSent) {
  // Micro-batch 2047's gradient 7 (whose former 15-bit tag was the abort's)
  // and micro-batch 1,000,000's gradient 31.
  auto r = Run("large-micro-batch-tags");
  ExpectBothOk(r);
}

// The large scenarios hold about 6 GiB on the two ranks together.
constexpr int64_t kLargeScenarioMemory = int64_t{8} << 30;

TEST_F(MpiRanks, AMessagePastMpisIntCountArrivesWhole) {
  if (!MemoryAvailable(kLargeScenarioMemory)) GTEST_SKIP() << "needs 8 GiB of free memory";
  auto r = RunLarge("large-message");
  ExpectBothOk(r);
}

TEST_F(MpiRanks, ReportsPastMpisIntCountInAllAreGatheredWhole) {
  if (!MemoryAvailable(kLargeScenarioMemory)) GTEST_SKIP() << "needs 8 GiB of free memory";
  auto r = RunLarge("large-gather");
  ExpectBothOk(r);
}

}  // namespace
}  // namespace ssdtrain

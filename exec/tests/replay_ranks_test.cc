// Ranks in one process: each rank a thread running a real replay (CPU
// backend, real files), joined by an in-process StepSync that keeps the
// protocol of exec/step_sync.h: data-parallel ranks summing gradients, and
// pipeline stages sending activations and gradients. The MPI implementation
// (app/mpi_sync.cc) is run by the CLI test under mpirun.
#include <gtest/gtest.h>

#include <barrier>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "cmake/build_paths.h"
#include "exec/fault_backend.h"
#include "exec/replay.h"
#include "exec/step_sync.h"
#include "exec/tests/io_test_util.h"
#include "exec/tests/replay_test_util.h"
#include "exec/tests/thread_ranks.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "traces/dp_buckets.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using testing::CpuOptions;
using testing::ListTree;
using testing::TempDir;
using testing::TinyGptTrace;

using testing::ThreadRanks;

traces::Plan DataParallel(traces::Plan plan) {
  plan.dp = 2;
  return plan;
}

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
  RunTwoRanks(trace, DataParallel(traces::OffloadAllPlan(trace)), runs, ranks);
  // Tiny GPT's gradients fit one bucket of 40 M parameters: one all-reduce
  // per step, of all of them.
  const traces::BucketTable table = traces::GradientBuckets(trace, 2);
  ASSERT_EQ(table.buckets.size(), 1u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(runs[r].result.ok()) << runs[r].result.status().ToString();
    EXPECT_GT(runs[r].result->allreduce_ns, 0);
    EXPECT_TRUE(ListTree(runs[r].dir.path()).empty());
    // Set-up, then one per step (warm-up + 1) at its end.
    EXPECT_EQ(ranks[r]->agreements, 1 + 2);
    EXPECT_EQ(ranks[r]->allreduces, 2);
    ASSERT_EQ(runs[r].result->gradient_buckets.size(), 1u);
    EXPECT_EQ(runs[r].result->gradient_buckets[0].bytes, table.bytes);
  }
}

TEST(ReplayRanks, AWriteErrorOnOneRankStopsBothAndLeavesNoFiles) {
  // Rank 1's third write fails in the warm-up step's forward pass; it still
  // makes the step's one bucket all-reduce, which rank 0 joins in its
  // backward, and rank 0 is told at the step's agreement and stops too.
  const traces::Trace trace = TinyGptTrace(1, 128);
  ThreadRanks all(2);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  ThreadRanks::Rank* ranks[2] = {&r0, &r1};
  RankRun runs[2];
  RunTwoRanks(trace, DataParallel(traces::OffloadAllPlan(trace)), runs, ranks, /*faulty=*/1,
              FaultRule{IoOp::kWrite, 2, FaultKind::kEio, 1});
  ASSERT_FALSE(runs[1].result.ok());
  EXPECT_EQ(runs[1].result.status().code(), Status::Code::kIoError);
  ASSERT_FALSE(runs[0].result.ok());
  EXPECT_NE(runs[0].result.status().message().find("rank 1 failed: "), std::string::npos)
      << runs[0].result.status().ToString();
  EXPECT_NE(runs[0].result.status().message().find(runs[1].result.status().message()),
            std::string::npos);
  EXPECT_EQ(r0.allreduces, 1);
  EXPECT_EQ(r1.allreduces, 1);
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
  RunTwoRanks(trace, DataParallel(traces::OffloadAllPlan(trace)), runs, ranks, /*faulty=*/0,
              FaultRule{IoOp::kRead, 9, FaultKind::kEio, 1000});
  ASSERT_FALSE(runs[0].result.ok());
  ASSERT_FALSE(runs[1].result.ok());
  EXPECT_NE(runs[1].result.status().message().find("rank 0 failed: "), std::string::npos)
      << runs[1].result.status().ToString();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(ListTree(runs[r].dir.path()).empty());
}

// Pipeline stages: tiny GPT at micro-batch 1, sequence 64 (fp32, h = 256),
// cut into 2 stages of 2 layers, 4 micro-batches under 1F1B, every saved
// activation offloaded; rank r runs stage r (dp = 1).
constexpr int64_t kMicroBatches = 4;
constexpr int64_t kSeq = 64;                                // short: seconds under TSan too
constexpr int64_t kStageMessageBytes = 1 * kSeq * 256 * 4;  // b × s × h × fp32

traces::Plan StagePlan(const traces::Trace& stage) {
  traces::Plan plan = traces::OffloadAllPlan(stage);
  plan.pp = 2;
  plan.dp = 1;
  plan.num_micro_batches = kMicroBatches;
  plan.schedule = "1f1b";
  return plan;
}

// Runs `body(rank)` on two threads, rank 0 and rank 1.
template <typename Body>
void OnTwoThreads(Body body) {
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) threads[r] = std::thread([&body, r] { body(r); });
  for (std::thread& t : threads) t.join();
}

// Replays stage r on rank r with --verify; `fault` (when set) is rank
// `faulty`'s only fault.
void RunTwoStages(RankRun runs[2], ThreadRanks::Rank* ranks[2], int faulty = -1,
                  FaultRule fault = {}) {
  const traces::Trace stages[2] = {TinyGptTrace(1, kSeq, 2, 0), TinyGptTrace(1, kSeq, 2, 1)};
  OnTwoThreads([&](int r) {
    ReplayOptions o = CpuOptions(runs[r].dir.path());
    o.sync = ranks[r];
    o.verify = true;
    o.cpu_pin_threads = false;
    if (r == faulty) {
      o.make_io_backend = [fault]() -> std::unique_ptr<IoBackend> {
        FaultOptions f;
        f.rules.push_back(fault);
        auto inner = MakeIoBackend(BackendKind::kPosix, 32, nullptr);
        return std::make_unique<FaultBackend>(std::move(*inner), f);
      };
    }
    runs[r].result = Replay(stages[r], StagePlan(stages[r]), o, "stage plan");
  });
}

TEST(ReplayStages, EachMicroBatchsActivationGoesForwardAndItsGradientBack) {
  // Per step, stage 0 sends 4 activations (one per micro-batch) of
  // 1 × 64 × 256 × 4 = 64 KiB and receives 4 gradients of the same size;
  // stage 1 the other way round. Verified: every received tensor held the
  // sender's pattern (and its CRC32C matched).
  ThreadRanks all(2, /*dp=*/1);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  ThreadRanks::Rank* ranks[2] = {&r0, &r1};
  RankRun runs[2];
  RunTwoStages(runs, ranks);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(runs[r].result.ok()) << "rank " << r << ": " << runs[r].result.status().ToString();
    const ReplayResult& x = *runs[r].result;
    EXPECT_TRUE(x.verified);
    EXPECT_EQ(x.stage, r);
    EXPECT_EQ(x.pipeline.messages_sent, kMicroBatches);
    EXPECT_EQ(x.pipeline.messages_received, kMicroBatches);
    EXPECT_EQ(x.pipeline.bytes_sent, kMicroBatches * kStageMessageBytes);
    EXPECT_EQ(x.pipeline.bytes_received, kMicroBatches * kStageMessageBytes);
    EXPECT_TRUE(ListTree(runs[r].dir.path()).empty());
    // Two steps (warm-up + 1) of 4 sends and 4 receives; set-up, then one
    // agreement per step; no abort.
    EXPECT_EQ(ranks[r]->sends, 2 * kMicroBatches);
    EXPECT_EQ(ranks[r]->receives, 2 * kMicroBatches);
    EXPECT_EQ(ranks[r]->agreements, 1 + 2);
    EXPECT_EQ(ranks[r]->aborts, 0);
  }
}

// Stage `stage` of two of tiny-gpt narrowed to hidden 32 (2 heads, vocab 128,
// one block a stage, sequence 8, micro-batch 1): an op's work is then far below
// its issue, stream and message hand-offs. At tiny-gpt's width (hidden 256, two
// blocks a stage, vocab 2048) each micro-batch's GEMMs and weight-sized reads
// made 2,100 micro-batches cost 40 CPU seconds, and 504 s under ASan.
traces::Trace NarrowGptStage(int64_t stage) {
  const std::string path = std::string(ConfiguredSourceDir()) + "/configs/models/tiny-gpt.json";
  auto config = models::LoadModelConfig(path);
  if (!config.ok()) throw std::runtime_error(config.status().ToString());
  config->hidden = 32;
  config->heads = 2;
  config->layers = 2;
  config->vocab = 128;
  models::ConfigOverrides o;
  o.micro_batch = 1;
  o.seq_len = 8;
  o.pp = 2;
  auto applied = models::ApplyOverrides(*config, o, path);
  if (!applied.ok()) throw std::runtime_error(applied.status().ToString());
  auto trace = models::BuildTrace(*applied, stage);
  if (!trace.ok()) throw std::runtime_error(trace.status().ToString());
  return std::move(*trace);
}

TEST(ReplayStages, MoreMicroBatchesThanFifteenBitTagsHoldStillReplay) {
  // 2,100 micro-batches (the former tag scheme, (micro-batch × 2 + gradient)
  // × 8 + index under MPI's guaranteed 32767, held 2,047 and refused the
  // replay), every activation kept: each stage sends and receives one
  // message per micro-batch each step, 8 × 32 × 4 = 1 KiB each, and checks
  // each received one's tag (micro-batch, kind, index), size and CRC32C.
  constexpr int64_t kManyMicroBatches = 2100;
  const traces::Trace stages[2] = {NarrowGptStage(0), NarrowGptStage(1)};
  ThreadRanks all(2, /*dp=*/1);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  ThreadRanks::Rank* ranks[2] = {&r0, &r1};
  RankRun runs[2];
  OnTwoThreads([&](int r) {
    ReplayOptions o = CpuOptions(runs[r].dir.path());
    o.sync = ranks[r];
    o.cpu_pin_threads = false;
    o.steps = 1;
    traces::Plan plan = traces::KeepAllPlan(stages[r]);
    plan.pp = 2;
    plan.dp = 1;
    plan.num_micro_batches = kManyMicroBatches;
    plan.schedule = "1f1b";
    runs[r].result = Replay(stages[r], plan, o, "keep");
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(runs[r].result.ok()) << "rank " << r << ": " << runs[r].result.status().ToString();
    EXPECT_EQ(runs[r].result->pipeline.messages_sent, kManyMicroBatches);
    EXPECT_EQ(runs[r].result->pipeline.messages_received, kManyMicroBatches);
    EXPECT_EQ(runs[r].result->pipeline.bytes_sent, kManyMicroBatches * 8 * 32 * 4);
    // Warm-up and measured step: every message through the ranks' queues.
    EXPECT_EQ(ranks[r]->sends, 2 * kManyMicroBatches);
    EXPECT_EQ(ranks[r]->receives, 2 * kManyMicroBatches);
  }
}

TEST(ReplayStages, TwoStagesOfTwoReplicasPairNeighboursAndSumPerStage) {
  // pp = 2 × dp = 2: rank r runs stage r / 2, so ranks 0 and 1 (stage 0) send
  // to ranks 2 and 3 (stage 1), 4 messages of 64 KiB each way per step, and
  // each stage's pair sums its own gradients: every rank one all-reduce per
  // bucket of its stage (one: a stage of tiny GPT is far under 40 M
  // parameters) per step (warm-up + 1).
  const traces::Trace stages[2] = {TinyGptTrace(1, kSeq, 2, 0), TinyGptTrace(1, kSeq, 2, 1)};
  ThreadRanks all(4, /*dp=*/2);
  std::vector<std::unique_ptr<ThreadRanks::Rank>> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(std::make_unique<ThreadRanks::Rank>(all, r));
  RankRun runs[4];
  std::thread threads[4];
  for (int r = 0; r < 4; ++r) {
    threads[r] = std::thread([&, r] {
      ReplayOptions o = CpuOptions(runs[r].dir.path());
      o.sync = ranks[static_cast<size_t>(r)].get();
      o.cpu_pin_threads = false;
      traces::Plan plan = StagePlan(stages[r / 2]);
      plan.dp = 2;
      runs[r].result = Replay(stages[r / 2], plan, o, "stage plan");
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(runs[r].result.ok()) << "rank " << r << ": " << runs[r].result.status().ToString();
    EXPECT_EQ(runs[r].result->stage, r / 2);
    EXPECT_EQ(runs[r].result->pipeline.bytes_sent, kMicroBatches * kStageMessageBytes);
    EXPECT_EQ(runs[r].result->pipeline.bytes_received, kMicroBatches * kStageMessageBytes);
    const auto buckets = static_cast<int>(traces::GradientBuckets(stages[r / 2], 2).buckets.size());
    EXPECT_EQ(buckets, 1);
    EXPECT_EQ(ranks[static_cast<size_t>(r)]->allreduces, 2 * buckets);
    EXPECT_TRUE(ListTree(runs[r].dir.path()).empty());
  }
}

TEST(ReplayStages, AMessageOutOfOrderIsAnErrorNamingBoth) {
  // Rank 0 stands in for stage 0 and sends micro-batch 1's activation first:
  // stage 1's first recv expects micro-batch 0's and stops.
  const traces::Trace stage1 = TinyGptTrace(1, kSeq, 2, 1);
  ThreadRanks all(2, /*dp=*/1);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  RankRun run;
  Status rank0 = Status::Ok();
  OnTwoThreads([&](int r) {
    if (r == 0) {
      ASSERT_TRUE(r0.Agree(Status::Ok()).ok());  // set-up
      std::vector<uint8_t> bytes(kStageMessageBytes + 16, 0);
      ASSERT_TRUE(r0.SendAsync(1, PipelineTag{1, false, 0}, bytes.data(),
                               static_cast<int64_t>(bytes.size()))
                      .ok());
      rank0 = r0.Agree(Status::Ok());  // where stage 0 would agree before its gradients
      return;
    }
    ReplayOptions o = CpuOptions(run.dir.path());
    o.sync = &r1;
    o.cpu_pin_threads = false;
    run.result = Replay(stage1, StagePlan(stage1), o, "stage plan");
  });
  ASSERT_FALSE(run.result.ok());
  const std::string& message = run.result.status().message();
  EXPECT_NE(message.find("expected the activation 0 of micro-batch 0 (65536 bytes) from rank 0, "
                         "but its next message is the activation 0 of micro-batch 1"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("mb0.stage_input.recv"), std::string::npos) << message;
  EXPECT_NE(rank0.message().find("rank 1 failed: "), std::string::npos) << rank0.ToString();
  EXPECT_TRUE(ListTree(run.dir.path()).empty());
}

TEST(ReplayStages, BytesChangedOnTheWayAreAnErrorNamingTheOpAndMicroBatch) {
  // Stage 1's third send (the gradient of micro-batch 2) loses a bit.
  ThreadRanks all(2, /*dp=*/1);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  ThreadRanks::Rank* ranks[2] = {&r0, &r1};
  r1.flip_byte_of_send = 2;
  RankRun runs[2];
  RunTwoStages(runs, ranks);
  ASSERT_FALSE(runs[0].result.ok());
  EXPECT_EQ(runs[0].result.status().code(), Status::Code::kCorruption);
  const std::string& message = runs[0].result.status().message();
  EXPECT_NE(message.find("mb2.stage_output.grad.recv, micro-batch 2): the gradient 0 of "
                         "micro-batch 2 from rank 1 arrived with CRC32C"),
            std::string::npos)
      << message;
  ASSERT_FALSE(runs[1].result.ok());
  EXPECT_NE(runs[1].result.status().message().find("rank 0 failed: "), std::string::npos)
      << runs[1].result.status().ToString();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(ListTree(runs[r].dir.path()).empty());
}

TEST(ReplayStages, AFailureOnOneStageWakesTheOtherWaitingForItsMessage) {
  // Stage 1's first write fails (micro-batch 0's forward). Stage 0 runs two
  // forwards (1F1B's warm-up on 2 stages is 1, then one more) and then waits
  // for micro-batch 0's gradient, which never comes: stage 1's abort ends
  // that wait with stage 1's message, and both meet at one agreement.
  ThreadRanks all(2, /*dp=*/1);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  ThreadRanks::Rank* ranks[2] = {&r0, &r1};
  RankRun runs[2];
  RunTwoStages(runs, ranks, /*faulty=*/1, FaultRule{IoOp::kWrite, 0, FaultKind::kEio, 1});
  ASSERT_FALSE(runs[1].result.ok());
  EXPECT_EQ(runs[1].result.status().code(), Status::Code::kIoError);
  ASSERT_FALSE(runs[0].result.ok());
  EXPECT_EQ(runs[0].result.status().message(),
            "rank 1 failed: " + runs[1].result.status().message());
  EXPECT_EQ(r1.aborts, 1);
  // Set-up, then the one after the failure.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r]->agreements, 2);
    EXPECT_TRUE(ListTree(runs[r].dir.path()).empty());
  }
}

}  // namespace
}  // namespace ssdtrain::exec

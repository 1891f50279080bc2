// `mpirun ssdtrain replay --model ...` on MPI (Open MPI) over pipeline
// stages: tiny-gpt's stages on their ranks, the activations and gradients
// sent between them, verified; a disk full on one stage ending both with its
// message; each stage's measured peaks its predicted ones to the byte (even
// and uneven splits, several micro-batches in flight); a rank count other
// than pp x dp refused. Built only with MPI (SSDTRAIN_HAVE_MPI).
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli_util.h"
#include "tests/replay_ranks.h"
#include "tests/replay_ranks_fixture.h"
#include "traces/dp_buckets.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;
using testing::Shell;
using testing::SourceDir;
using testing::SsdtrainBinary;

using testing::ReplayRanksCli;

// Two pipeline stages: tiny-gpt at micro-batch 2, sequence 256 (fp32, h =
// 256), 2 layers a stage, 4 micro-batches under 1F1B, the ssdtrain policy
// (`ssdtrain plan --pp 2`, which writes stage 1's plan into the plan file).
class ReplayStagesCli : public ReplayRanksCli {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ssdtrain-stages-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "offload");
    model_ = SourceDir() + "/configs/models/tiny-gpt.json";
    auto planned = RunSsdtrain("plan --model " + model_ + " --hardware " + SourceDir() +
                               "/configs/hardware/cpu-local.json --gpus 2 --pp 2 --tp 1 "
                               "--num-micro-batches 4 --schedule 1f1b --policy ssdtrain "
                               "--micro-batch 2 --seq-len 256 -o " +
                               File("plan.json"));
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    // The binary as it runs: `ssdtrain` on the PATH, else its absolute path.
    EXPECT_NE(planned.output.find("replay this plan: mpirun -np 2 "), std::string::npos)
        << planned.output;
    EXPECT_NE(planned.output.find("ssdtrain replay --model"), std::string::npos) << planned.output;
  }
  // Returns what `plan` printed.
  std::string ExpectEveryStageHoldsItsPredictedPeak(int stages, int m, const std::string& policy);
};

TEST_F(ReplayStagesCli, EachStageReceivesWhatTheOtherSentVerifiedAndLeavesNoFiles) {
  // Per step, each of the 4 micro-batches sends one activation forward and
  // one gradient back, each 2 × 256 × 256 × 4 = 512 KiB: 2 MiB each way.
  constexpr int64_t kBytesEachWay = 4 * 2 * 256 * 256 * 4;
  auto r = MpiReplay(2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = traces::ReadStepReport(File("run.json"));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(report->verified.has_value());
  EXPECT_TRUE(*report->verified);
  ASSERT_TRUE(report->layout.has_value());
  EXPECT_EQ(report->layout->parallel.pp, 2);
  EXPECT_EQ(report->layout->parallel.dp, 1);
  const nlohmann::json& ranks = report->extra.at("ranks");
  ASSERT_EQ(ranks.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].at("stage").get<int>(), r);
    EXPECT_TRUE(ranks[r].at("verified").get<bool>());
    const nlohmann::json& p = ranks[r].at("pipeline");
    EXPECT_EQ(p.at("messages_sent").get<int64_t>(), 4);
    EXPECT_EQ(p.at("bytes_sent").get<int64_t>(), kBytesEachWay);
    // What this stage received is what the other sent.
    EXPECT_EQ(p.at("bytes_received"), ranks[1 - r].at("pipeline").at("bytes_sent"));
    EXPECT_EQ(p.at("messages_received"), ranks[1 - r].at("pipeline").at("messages_sent"));
    EXPECT_GT(ranks[r].at("ssd_bytes_written").get<int64_t>(), 0);
  }
  // The whole step takes as long as its slowest rank.
  EXPECT_EQ(report->metrics.step_time_ns, std::max(ranks[0].at("step_time_ns").get<int64_t>(),
                                                   ranks[1].at("step_time_ns").get<int64_t>()));
  EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
}

TEST_F(ReplayStagesCli, ADiskFullOnOneStageMidStepEndsBothWithItsMessage) {
  // Stage 1's directory is a 1 MiB tmpfs: its first offload write of the
  // warm-up step fails (disk full), while stage 0 goes on to wait for
  // micro-batch 0's gradient; stage 1's abort ends that wait.
  fs::create_directories(File("offload/rank-1"));
  if (::mount("tmpfs", File("offload/rank-1").c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "mounting a tmpfs needs root: " << std::strerror(errno);
  }
  auto r = MpiReplay(2, "--allow-buffered-io");
  ::umount(File("offload/rank-1").c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("ssdtrain replay: error: rank 1 failed: step 0: disk full"),
            std::string::npos)
      << r.output;
  // Every rank ends by its own error path: no crash (a message still read
  // from a rank that had freed it crashed both before sends kept a copy).
  EXPECT_EQ(r.output.find("signal"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(File("offload/rank-1")));
  EXPECT_FALSE(fs::exists(File("offload/rank-0")));
  EXPECT_FALSE(fs::exists(File("run.json")));
}

TEST_F(ReplayStagesCli, TwoStagesOfTwoReplicasOnFourRanks) {
  // pp 2 × dp 2 at micro-batch 1, sequence 128: rank r runs stage r / 2 as
  // replica r % 2; each rank sends 4 × 1 × 128 × 256 × 4 = 512 KiB each way
  // to its stage neighbour (rank r ± 2), and each stage's pair sums its
  // gradients over its own group.
  auto planned =
      RunSsdtrain("plan --model " + model_ + " --hardware " + SourceDir() +
                  "/configs/hardware/cpu-local.json --gpus 4 --pp 2 --dp 2 --tp 1 --zero-stage 1 "
                  "--num-micro-batches 4 --schedule 1f1b --policy ssdtrain "
                  "--micro-batch 1 --seq-len 128 -o " +
                  File("plan.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto r = MpiReplay(4);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = traces::ReadStepReport(File("run.json"));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->verified.value_or(false));
  const nlohmann::json& ranks = report->extra.at("ranks");
  ASSERT_EQ(ranks.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ranks[r].at("stage").get<int>(), r / 2);
    EXPECT_EQ(ranks[r].at("dp_index").get<int>(), r % 2);
    EXPECT_EQ(ranks[r].at("pipeline").at("bytes_sent").get<int64_t>(), 4 * 1 * 128 * 256 * 4);
    EXPECT_EQ(ranks[r].at("pipeline").at("bytes_received").get<int64_t>(), 4 * 1 * 128 * 256 * 4);
    EXPECT_GT(ranks[r].at("allreduce_ns").get<int64_t>(), 0);
  }
  EXPECT_TRUE(fs::is_empty(File("offload")));
}

// Plans `stages` pipeline stages of tiny-gpt at micro-batch 2, sequence 256,
// `m` micro-batches under 1F1B with `policy`, replays them on as many ranks,
// and checks that every stage's measured peaks equal the prediction's for that
// stage, on the CPU backend's memory as calibrate records it (64-byte arena
// granularity, the GEMM workspace counted); the eviction points make them
// independent of this machine's timing. Under 1F1B stage i holds min(pp − i, m)
// micro-batches; middle stages run stage 1's plan (sim/stage_plans.h).
std::string ReplayStagesCli::ExpectEveryStageHoldsItsPredictedPeak(int stages, int m,
                                                                   const std::string& policy) {
  const Status written = testing::WriteReplayHardware(
      SourceDir() + "/configs/hardware/cpu-local.json", File("hw.json"));
  if (!written.ok()) {
    ADD_FAILURE() << written.ToString();
    return "";
  }
  auto planned =
      RunSsdtrain("plan --model " + model_ + " --hardware " + File("hw.json") + " --gpus " +
                  std::to_string(stages) + " --pp " + std::to_string(stages) +
                  " --dp 1 --tp 1 --num-micro-batches " + std::to_string(m) +
                  " --schedule 1f1b --policy " + policy + " --micro-batch 2 --seq-len 256 -o " +
                  File("plan.json") + " --prediction " + File("predicted.json"));
  if (planned.exit_code != 0) {
    ADD_FAILURE() << planned.output;
    return planned.output;
  }
  auto r = MpiReplay(stages);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto report = traces::ReadStepReport(File("run.json"));
  if (!report.ok()) {
    ADD_FAILURE() << report.status().ToString();
    return planned.output;
  }
  EXPECT_TRUE(report->verified.value_or(false));
  auto predicted = traces::ReadStepReport(File("predicted.json"));
  if (!predicted.ok()) {
    ADD_FAILURE() << predicted.status().ToString();
    return planned.output;
  }
  const nlohmann::json& peaks = predicted->extra.at("details").at("stages");
  const nlohmann::json& ranks = report->extra.at("ranks");
  EXPECT_EQ(peaks.size(), static_cast<size_t>(stages));
  if (ranks.size() != static_cast<size_t>(stages) || peaks.size() != ranks.size()) {
    ADD_FAILURE() << "ranks " << ranks.size() << ", predicted stages " << peaks.size();
    return planned.output;
  }
  for (int s = 0; s < stages; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    EXPECT_EQ(ranks[s].at("stage").get<int>(), s);
    EXPECT_EQ(peaks[s].at("stage").get<int>(), s);
    EXPECT_EQ(peaks[s].at("in_flight").get<int>(), std::min(stages - s, m));
    EXPECT_EQ(ranks[s].at("peak_device_bytes"), peaks[s].at("peak_gpu_bytes"));
    EXPECT_EQ(ranks[s].at("peak_activation_bytes"), peaks[s].at("peak_activation_bytes"));
    EXPECT_GT(ranks[s].at("ssd_bytes_written").get<int64_t>(), 0);
  }
  EXPECT_TRUE(fs::is_empty(File("offload")));
  return planned.output;
}

TEST_F(ReplayStagesCli, FourStagesEachHoldTheirPredictedPeakToTheByte) {
  ExpectEveryStageHoldsItsPredictedPeak(4, 4, "ssdtrain");
}

// An uneven pipeline split (traces/layout.h): tiny-gpt's 4 layers over pp 3,
// which does not divide them, as 1 | 2 | 1 (the planner's split, Megatron's
// --decoder-first/last-pipeline-num-layers 1). Each rank builds its own
// stage's blocks from the plan, and holds that stage's predicted peaks to the
// byte; the plan's "trace for this plan" line builds stage 0's trace.
TEST_F(ReplayStagesCli, AnUnevenSplitOfThreeStagesHoldsEachStagesPredictedPeak) {
  const std::string planned = ExpectEveryStageHoldsItsPredictedPeak(3, 3, "ssdtrain");
  EXPECT_NE(planned.find(" pp 3 (blocks 1|2|1) dp 1"), std::string::npos) << planned;
  const std::string::size_type at = planned.find(" trace --model ");
  ASSERT_NE(at, std::string::npos) << planned;
  const std::string line = planned.substr(at, planned.find('\n', at) - at);
  EXPECT_NE(line.find("--pp 3 --pp-first-layers 1 --pp-last-layers 1"), std::string::npos) << line;
  auto plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->pp_first_layers, 1);
  EXPECT_EQ(plan->pp_last_layers, 1);
  auto traced = RunSsdtrain("trace --model " + model_ +
                            " --micro-batch 2 --seq-len 256 --tp 1 --pp 3 --pp-first-layers 1 "
                            "--pp-last-layers 1 --stage 0 -o " +
                            File("t0.json"));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  auto t0 = traces::ReadTrace(File("t0.json"));
  ASSERT_TRUE(t0.ok()) << t0.status().ToString();
  EXPECT_EQ(t0->header.stage_layers, 1);
  EXPECT_EQ(traces::Fingerprint(*t0), plan->trace_fingerprint);
}

// Stage 0 holds two of the eight micro-batches at once, each offloading all.
TEST_F(ReplayStagesCli, TwoStagesOfEightMicroBatchesHoldTheirPredictedPeakToTheByte) {
  ExpectEveryStageHoldsItsPredictedPeak(2, 8, "offload-ssd");
}

TEST_F(ReplayStagesCli, RanksOtherThanPpTimesDpAreRefused) {
  auto r = MpiReplay(3);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(
      r.output.find(
          "tp × cp × pp × dp = 1 × 1 × 2 × 1 = 2, but mpirun started 3 ranks; start mpirun -np 2"),
      std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::is_empty(File("offload")));
}

// A GPT of 54.6 M parameters (h 1024, 4 layers, vocabulary 4096, fp32) at
// micro-batch 1, sequence 32, two micro-batches, dp 2: its gradients fill two
// Megatron buckets of max(4e7, 1e6·2) = 40 M parameters (traces/dp_buckets.h;
// tests/dp_buckets_test.cc has the closed form). The simulator's buckets (the
// prediction's timeline) and the ones the executor all-reduced (rank 0's
// report) are the same bytes in the same order; the peaks are the
// prediction's to the byte, the gradients' host copies being host memory.
TEST_F(ReplayRanksCli, BucketsOfAModelOverFortyMillionParametersAreTheSimulatorsBytesInOrder) {
  ASSERT_TRUE(UseMidGpt());
  auto planned = RunSsdtrain("plan --model " + model_ + " --hardware " + File("hw.json") +
                             " --gpus 2 --dp 2 --tp 1 --pp 1 --zero-stage 0 --policy keep "
                             "--micro-batch 1 --num-micro-batches 2 -o " +
                             File("plan.json") + " --prediction " + File("predicted.json") +
                             " --timeline " + File("predicted-timeline.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  std::vector<int64_t> predicted = testing::PredictedBucketBytes(File("predicted-timeline.json"));
  // 4 bytes a parameter: 41 986 048 and 12 627 968 parameters.
  EXPECT_EQ(predicted, (std::vector<int64_t>{4 * 41'986'048, 4 * 12'627'968}));

  auto r = MpiReplay(2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = traces::ReadStepReport(File("run.json"));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->verified.value_or(false));
  std::vector<int64_t> measured;
  std::vector<traces::OpId> after;
  for (const nlohmann::json& b : report->extra.at("gradient_buckets")) {
    measured.push_back(b.at("bytes").get<int64_t>());
    after.push_back(b.at("after_original_op").get<traces::OpId>());
    EXPECT_EQ(b.at("micro_batch").get<int64_t>(), 1);  // the last micro-batch's backward
    EXPECT_LE(b.at("posted_ns").get<int64_t>(), b.at("done_ns").get<int64_t>());
  }
  EXPECT_EQ(measured, predicted);
  // Each went to host memory right after the op that completes it in the
  // table both sides use: bucket 0 after block 0's fc2, under the backward
  // still to run.
  auto traced = RunSsdtrain("trace --model " + model_ + " --micro-batch 1 --seq-len 32 -o " +
                            File("trace.json"));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  auto trace = traces::ReadTrace(File("trace.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  const traces::BucketTable table = traces::GradientBuckets(*trace, 2);
  std::vector<traces::OpId> complete_after;
  for (const traces::GradientBucket& b : table.buckets) complete_after.push_back(b.complete_after);
  EXPECT_EQ(after, complete_after);
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(trace->op(after[0]).name, "L0.fc2.wgrad");
  auto prediction = traces::ReadStepReport(File("predicted.json"));
  ASSERT_TRUE(prediction.ok()) << prediction.status().ToString();
  const nlohmann::json& peak = prediction->extra.at("details").at("stages").at(0);
  for (const nlohmann::json& rank : report->extra.at("ranks")) {
    EXPECT_EQ(rank.at("peak_device_bytes"), peak.at("peak_gpu_bytes"));
    EXPECT_EQ(rank.at("peak_activation_bytes"), peak.at("peak_activation_bytes"));
  }
  EXPECT_TRUE(fs::is_empty(File("offload")));
}

// `plan --ddp local` (Megatron's --DDP-impl local) records it, and its
// replay posts no bucket's all-reduce before the backward has ended on the
// device: after the op that completes the last bucket (one micro-batch, so
// the report's op times are the whole step's, from the same step start as
// the posts). mid-gpt's first bucket completes well before that op.
TEST_F(ReplayRanksCli, LocalDdpPostsEveryBucketAfterTheBackward) {
  ASSERT_TRUE(UseMidGpt());
  auto planned = RunSsdtrain("plan --model " + model_ + " --hardware " + File("hw.json") +
                             " --gpus 2 --dp 2 --tp 1 --pp 1 --zero-stage 0 --ddp local "
                             "--policy keep --micro-batch 1 --num-micro-batches 1 -o " +
                             File("plan.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find("local DDP"), std::string::npos) << planned.output;
  auto plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->ddp, "local");
  auto r = MpiReplay(2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto report = traces::ReadStepReport(File("run.json"));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->verified.value_or(false));
  const nlohmann::json& buckets = report->extra.at("gradient_buckets");
  ASSERT_EQ(buckets.size(), 2u);
  const auto last = buckets.back().at("after_original_op").get<traces::OpId>();
  int64_t backward_end = -1;
  for (const traces::OpTiming& t : report->ops) {
    if (t.op == last) backward_end = t.end_ns;
  }
  ASSERT_GE(backward_end, 0) << "op " << last << " not in the report";
  for (const nlohmann::json& b : buckets) {
    EXPECT_GE(b.at("posted_ns").get<int64_t>(), backward_end) << b.dump();
  }
}

}  // namespace
}  // namespace ssdtrain

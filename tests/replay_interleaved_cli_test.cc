// `mpirun -np 2 ssdtrain replay --model ... --plan ...` of an interleaved 1F1B
// plan (traces/whole_step.h, traces/chunks.h): tiny-gpt at pp 2 × v 2, each
// rank holding its stage's two model chunks and running them in Megatron-LM's
// order, each chunk boundary a message to the neighbouring rank (from the last
// stage back to stage 0 for the next chunk). Kept and offloaded to the SSD at
// the plan's eviction points, each replays verified, leaves no files, and
// every rank's memory peaks are its stage's prediction to the byte; the step
// time is printed beside the prediction, not gated. Built only with MPI
// (SSDTRAIN_HAVE_MPI).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/cli_util.h"
#include "tests/replay_ranks.h"
#include "traces/io.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::RunSsdtrain;

constexpr int kStages = 2, kChunks = 2, kMicroBatches = 4;
// Each micro-batch crosses v·p − 1 chunk boundaries each way, half of them
// from each rank: 3.
constexpr int kSentPerMicroBatch = (kChunks * kStages - 1) * 2 / kStages;
// One activation or gradient between chunks: micro-batch 2 × sequence 256 ×
// hidden 256 × 4 bytes (fp32).
constexpr int64_t kMessageBytes = 2 * 256 * 256 * 4;

class ReplayInterleavedCli : public testing::ReplayRanksTest {
 protected:
  ReplayInterleavedCli() : ReplayRanksTest("interleaved-replay-cli") {}

  // Plans tiny-gpt (4 layers: one per chunk) at micro-batch 2, sequence 256,
  // 4 micro-batches, interleaved pp 2 × v 2 with `policy`, checks that plan
  // prints the replay line, and replays it on 2 ranks, one measured step,
  // verified.
  void PlanAndReplay(const std::string& policy) {
    auto planned = RunSsdtrain(
        "plan --model " + Model("tiny-gpt") + " --hardware " + File("hw.json") +
        " --gpus 2 --pp 2 --tp 1 --dp 1 --num-micro-batches " + std::to_string(kMicroBatches) +
        " --schedule interleaved --virtual-stages 2 --policy " + policy +
        " --micro-batch 2 --seq-len 256 -o " + File("plan.json") + " --prediction " +
        File("predicted.json"));
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    EXPECT_NE(planned.output.find("replay this plan: mpirun -np 2 "), std::string::npos)
        << planned.output;
    auto r = testing::MpiReplay(kStages, Model("tiny-gpt"), File("plan.json"), File("offload"),
                                File("run.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_NO_FATAL_FAILURE(ReadReports());
    std::printf("interleaved pp 2 x v 2, %s: step %.3f ms measured, %.3f ms predicted\n",
                policy.c_str(), report_.metrics.step_time_ns / 1e6,
                predicted_.metrics.step_time_ns / 1e6);
  }

  // Both ranks verified, each with its stage's predicted peaks to the byte
  // (the simulator's: its micro-batch with the unrolled step's static peaks,
  // traces/step_peaks.h; the activations are the replay's planned ones, its
  // traces::ComputeStaticPeaks of the same unrolled step), and the messages of every chunk
  // boundary: each micro-batch crosses v·p − 1 = 3 boundaries each way, stage
  // 0 sending two activations (virtual stage 0 to 1, 2 to 3) and one gradient
  // (2 to 1), stage 1 one activation (1 to 2, the wrap) and two gradients (3
  // to 2, 1 to 0).
  void ExpectEveryRankHoldsItsPrediction() {
    EXPECT_TRUE(report_.verified.value_or(false));
    const nlohmann::json& ranks = report_.extra.at("ranks");
    const nlohmann::json& stages = predicted_.extra.at("details").at("stages");
    ASSERT_EQ(ranks.size(), static_cast<size_t>(kStages));
    ASSERT_EQ(stages.size(), static_cast<size_t>(kStages));
    for (int s = 0; s < kStages; ++s) {
      SCOPED_TRACE("stage " + std::to_string(s));
      const nlohmann::json& rank = ranks[s];
      EXPECT_EQ(rank.at("stage").get<int>(), s);
      EXPECT_TRUE(rank.at("verified").get<bool>());
      // Megatron's count: (p − s − 1)·2 + (v − 1)·p + 1 chunks on stage s.
      EXPECT_EQ(stages[s].at("in_flight").get<int>(), (kStages - s - 1) * 2 + kStages + 1);
      EXPECT_EQ(rank.at("peak_device_bytes"), stages[s].at("peak_gpu_bytes"));
      EXPECT_EQ(rank.at("peak_activation_bytes"), stages[s].at("peak_activation_bytes"));
      EXPECT_EQ(rank.at("peak_activation_bytes"), rank.at("planned_peak_activation_bytes"));
      const nlohmann::json& p = rank.at("pipeline");
      EXPECT_EQ(p.at("messages_sent").get<int64_t>(), kMicroBatches * kSentPerMicroBatch);
      EXPECT_EQ(p.at("bytes_sent").get<int64_t>(),
                kMicroBatches * kSentPerMicroBatch * kMessageBytes);
      EXPECT_EQ(p.at("bytes_received"), ranks[1 - s].at("pipeline").at("bytes_sent"));
    }
    EXPECT_TRUE(fs::is_empty(File("offload"))) << "rank directories or files left";
  }
};

TEST_F(ReplayInterleavedCli, KeptChunksOnTwoRanksHoldTheirPredictedPeaks) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("keep"));
  ExpectEveryRankHoldsItsPrediction();
}

TEST_F(ReplayInterleavedCli, OffloadedChunksOnTwoRanksEvictWherePlanned) {
  ASSERT_NO_FATAL_FAILURE(PlanAndReplay("offload-ssd"));
  ExpectEveryRankHoldsItsPrediction();
  for (const nlohmann::json& rank : report_.extra.at("ranks")) {
    EXPECT_GT(rank.at("ssd_bytes_written").get<int64_t>(), 0);
  }
}

}  // namespace
}  // namespace ssdtrain

// Predicted against published (scripts/published.sh): Narayanan et al. SC21
// Table 1, the ten weak-scaling runs of configs/published/megatron-sc21-table1.json,
// each planned at its published layout on configs/hardware/dgx-a100-80gb.json.
// The test runs the script itself, so the figures it holds are the script's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "models/model_config.h"
#include "tests/cli_util.h"
#include "traces/io.h"

namespace ssdtrain {
namespace {

using testing::Shell;
using testing::SourceDir;

nlohmann::json Table() {
  Result<nlohmann::json> j =
      traces::ReadJsonFile(SourceDir() + "/configs/published/megatron-sc21-table1.json");
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? *j : nlohmann::json::object();
}

models::ModelConfig ModelOf(const nlohmann::json& run) {
  const std::string path =
      SourceDir() + "/configs/models/" + run.at("model").get<std::string>() + ".json";
  Result<models::ModelConfig> c = models::LoadModelConfig(path);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : models::ModelConfig{};
}

// The paper's count: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), and the table's
// time is F / (GPUs · TFLOP/s), about ±0.4% from the integer TFLOP/s.
TEST(PublishedRuns, TimesFollowFromThePapersFlopFormula) {
  const nlohmann::json table = Table();
  ASSERT_EQ(table.at("runs").size(), 10u);
  for (const nlohmann::json& run : table.at("runs")) {
    const models::ModelConfig c = ModelOf(run);
    const double b = run.at("global_batch").get<double>(), s = static_cast<double>(c.seq_len);
    const double l = static_cast<double>(c.layers), h = static_cast<double>(c.hidden);
    const double v = static_cast<double>(c.vocab);
    const double flops = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
    const double seconds =
        flops / (run.at("gpus").get<double>() * run.at("tflops_per_gpu").get<double>() * 1e12);
    const double published = run.at("seconds_per_iteration").get<double>();
    EXPECT_NEAR(seconds, published, 0.005 * published) << run.at("model");
    EXPECT_EQ(c.seq_len, 2048);
    EXPECT_EQ(c.vocab, 51200);
    EXPECT_EQ(c.dtype, "fp16");
    EXPECT_EQ(
        run.at("gpus").get<int64_t>() % (run.at("tp").get<int64_t>() * run.at("pp").get<int64_t>()),
        0)
        << run.at("model");
    // examples/sc21/run_table_1.sh at 6985e589: DDP=local where pp > 1, torch's otherwise.
    EXPECT_EQ(run.at("ddp").get<std::string>(),
              run.at("pp").get<int64_t>() > 1 ? "local" : "overlapped")
        << run.at("model");
  }
}

// The figures docs/PERFORMANCE.md reports, rounded up to the next half
// percent: a change that moves a prediction away from the published times
// fails here. The median was 5.2% (worst 8.6%) while a full recompute ran each
// two-output op of a block twice (once per output: the bias-dropout-adds, and
// with them the projection and fc2 GEMMs whose outputs they read, the
// attention dropout): since a recompute rebuilds all of an op's outputs in one
// run (traces::RebuiltAlongside), a block is recomputed once, as Megatron's
// checkpointed layer is, and every run predicts 2-4 points faster: median
// 8.2%, worst 11.0% (the 76.1B run), every run faster than published. Since
// a re-run rebuilds a row-parallel GEMM's output with its in-place all-reduce
// (traces::StorageInfo::writers), as Megatron's checkpointed layer runs it,
// the tp > 1 runs predict 2-8 points slower: median 3.8%, worst 10.7% (the
// 1.7B run at tp 1, which has no all-reduce in its blocks); 3.6% since the
// last backward beside the DDP buckets runs on the SMs they leave.
constexpr double kMedianBound = 0.04;
constexpr double kWorstBound = 0.11;  // 10.7%: the 1.7B run
// The same for today's tables, where they stand (docs/PERFORMANCE.md):
// torchtitan's 10.1% / 12.0% (Llama-2-13B sel-op), every run predicted fast,
// since its attention runs on FlashAttention-2's A100 curves with its causal
// mask (the table's attention_kernel: flash2): 4.8% / 7.9% before, on the one
// attention figure, all pairs at 0.73 of peak; 8.4% / 13.4% before its block
// ran as torchtitan's eager PyTorch does (rotary complex, gqa repeat, the 70B
// runs' norm eager); 11.6% / 19.9% before its gradients were reduce-scattered
// in fp32 and its gathers copied out, as FSDP2 does. NeMo's 13.2% / 17.6%
// (GPT-3 5B), every run predicted fast: 19.0% / 23.8% before the DGX H100
// preset's GEMMs ran at a sustained figure (730 TFLOP/s at 8192^3 over 60 s,
// where 792 was a short run's best shape), 24.7% / 30.5% before each run's
// attention ran on its fused kernel's curves with its causal mask
// (ModelConfig::attention_kernel: flash2, the 175B runs cudnn), 18.5% before
// the three runs with ub_tp_comm_overlap had their tensor-parallel collectives
// hidden as Transformer Engine's userbuffers hide them. Now 14.3% / 19.4%
// (GPT-3 175B on 128 GPUs): the column-parallel layers' backward collectives
// run beside their GEMMs as Transformer Engine's Linear runs them without
// userbuffers, hiding what the model had exposed (13.2% / 17.6% before).
// Korthikanti et al. (MLSys 2023) Table 5, Megatron-LM of 2022 on the same
// Selene nodes: 2.4% / 5.8% (the 1T model at full recompute); predicted
// slow by 0.5-8.4% before the column-parallel backward all-reduces ran beside
// the weight gradients, as that Megatron-LM runs them (the SC21 runs' did
// not), 3.1% / 6.0% before a full recompute ran its all-reduces again.
// Since the compute beside a NCCL collective runs on the SMs its channels
// leave (the tier's collective_sms: 24 inside a DGX's NVLink domain, 16
// across the network): torchtitan 8.2% / 10.1% (its GEMMs beside FSDP's
// gathers and reduce-scatters across nodes), MLSys 2023 3.1% / 6.5% (the
// weight gradients beside the async all-reduces inside a node, the 1T model
// at full recompute the worst), NeMo 14.2% / 17.9%, SC21 unchanged.
constexpr double kMlsysMedianBound = 0.035;
constexpr double kMlsysWorstBound = 0.07;
constexpr double kTitanMedianBound = 0.085;
constexpr double kTitanWorstBound = 0.105;
constexpr double kNemoMedianBound = 0.145;
constexpr double kNemoWorstBound = 0.18;
// torchtitan's published memory (max reserved) against the caching allocator's
// model: -2.4% and -1.1%; the target, 5%, holds each run.
constexpr double kMemoryBound = 0.05;

class PublishedRunsCli : public testing::CliTest {
 protected:
  PublishedRunsCli() : CliTest("published") {}
};

TEST_F(PublishedRunsCli, EveryRunIsPlannedAtItsLayoutAndFitsItsGpu) {
  const std::string out = File("published.json");
  const testing::CliResult r = Shell("SSDTRAIN_BIN=" + testing::SsdtrainBinary() + " " +
                                     SourceDir() + "/scripts/published.sh --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<nlohmann::json> report = traces::ReadJsonFile(out);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const nlohmann::json table = Table();
  const nlohmann::json& rows = report->at("rows");
  ASSERT_EQ(rows.size(), table.at("runs").size());
  int planned = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& row = rows[i];
    const nlohmann::json& run = table.at("runs")[i];
    const std::string status = row.at("status");
    if (status != "ok") {
      // The interleaved schedule exists: every run is planned.
      ADD_FAILURE() << run.at("model") << ": " << status;
      continue;
    }
    ++planned;
    // The plan is the published layout: m = global batch / (micro-batch · dp).
    const int64_t dp = row.at("dp");
    const nlohmann::json& planned = row.at("planned_layout");
    EXPECT_EQ(planned.at("tp"), run.at("tp"));
    EXPECT_EQ(planned.at("pp"), run.at("pp"));
    EXPECT_EQ(planned.at("dp").get<int64_t>(), dp);
    EXPECT_EQ(planned.at("micro_batch"), run.at("micro_batch"));
    EXPECT_EQ(row.at("planned_ddp"), run.at("ddp")) << row.at("model");
    // Megatron-LM of 2021: the backward all-reduces after their GEMMs.
    EXPECT_FALSE(row.at("planned_tp_backward_overlap").get<bool>()) << row.at("model");
    EXPECT_EQ(dp * run.at("tp").get<int64_t>() * run.at("pp").get<int64_t>(),
              run.at("gpus").get<int64_t>());
    EXPECT_EQ(row.at("micro_batches").get<int64_t>() * run.at("micro_batch").get<int64_t>() * dp,
              run.at("global_batch").get<int64_t>());
    // Fits the preset's usable memory: 80 GiB less its 4 GiB reserve.
    EXPECT_LE(row.at("peak_GiB").get<double>(), 76.0) << row.at("model");
    EXPECT_GT(row.at("predicted_s").get<double>(), 0);
  }
  EXPECT_EQ(planned, 10);  // all ten, the interleaved ones at their published schedule
  const nlohmann::json& stats = report->at("statistics");
  EXPECT_EQ(stats.at("runs").get<int>(), planned);
  // Where the prediction stands (docs/PERFORMANCE.md, "Published runs"); the
  // issue's target is 5% median and 10% worst over all ten runs.
  EXPECT_LE(stats.at("median_abs_error").get<double>(), kMedianBound);
  EXPECT_LE(stats.at("worst_abs_error").get<double>(), kWorstBound);

  // Korthikanti et al. (MLSys 2023): every run planned at its layout, the
  // tp > 1 backward all-reduces beside the weight gradients; the errors where
  // docs/PERFORMANCE.md has them.
  const nlohmann::json mlsys_table =
      *traces::ReadJsonFile(SourceDir() + "/configs/published/megatron-mlsys23-table5.json");
  const nlohmann::json& mlsys = report->at("mlsys23");
  ASSERT_EQ(mlsys.at("rows").size(), mlsys_table.at("runs").size());
  for (const nlohmann::json& row : mlsys.at("rows")) {
    SCOPED_TRACE(row.at("model").get<std::string>() + " " + row.at("recompute").dump() + " on " +
                 row.at("gpus").dump());
    ASSERT_EQ(row.at("status"), "ok");
    EXPECT_TRUE(row.at("planned_tp_backward_overlap").get<bool>());
    EXPECT_EQ(row.at("schedule"), row.at("virtual_stages").get<int>() > 1 ? "interleaved" : "1f1b");
    EXPECT_LE(row.at("peak_GiB").get<double>(), 76.0);
  }
  EXPECT_EQ(mlsys.at("statistics").at("runs").get<int>(), 9);
  EXPECT_LE(mlsys.at("statistics").at("median_abs_error").get<double>(), kMlsysMedianBound);
  EXPECT_LE(mlsys.at("statistics").at("worst_abs_error").get<double>(), kMlsysWorstBound);

  // torchtitan's FSDP runs: every run planned, its Llama block as torchtitan
  // builds it (projections separate, rotary complex, gqa repeat), at ZeRO-3 over all 64 ranks
  // within the A100's 76 GiB: none as keep, full as recompute-full, sel-layer as recompute-full on
  // one block in 2, sel-op as recompute-sac; the errors where docs/PERFORMANCE.md has them.
  const nlohmann::json titan_table =
      *traces::ReadJsonFile(SourceDir() + "/configs/published/torchtitan-64xa100.json");
  const nlohmann::json& titan = report->at("torchtitan");
  ASSERT_EQ(titan.at("rows").size(), titan_table.at("runs").size());
  for (const nlohmann::json& row : titan.at("rows")) {
    const std::string recompute = row.at("recompute").get<std::string>();
    SCOPED_TRACE(row.at("model").get<std::string>() + " " + recompute);
    ASSERT_EQ(row.at("status"), "ok");
    EXPECT_EQ(row.at("policy"), recompute == "none"        ? "keep"
                                : recompute == "sel-layer" ? "recompute-full --recompute-every 2"
                                : recompute == "sel-op"    ? "recompute-sac"
                                                           : "recompute-full");
    EXPECT_LE(row.at("peak_GiB").get<double>(), 76.0);
    EXPECT_GT(row.at("predicted_tokens_per_s_per_gpu").get<double>(), 0.0);
    EXPECT_EQ(row.at("attention_kernel"), "flash2");  // SDPA's flash backend
  }
  EXPECT_EQ(titan.at("statistics").at("runs").get<int>(), 8);
  EXPECT_EQ(titan.at("statistics").at("excluded").get<int>(), 0);
  EXPECT_LE(titan.at("statistics").at("median_abs_error").get<double>(), kTitanMedianBound);
  EXPECT_LE(titan.at("statistics").at("worst_abs_error").get<double>(), kTitanWorstBound);
  // What torchtitan reports out of memory (Llama-2-70B sel-op at local batch 2
  // on 80 GB) finds no plan within the A100's 76 GiB at that layout.
  ASSERT_EQ(titan.at("out_of_memory").size(), titan_table.at("out_of_memory").size());
  for (const nlohmann::json& row : titan.at("out_of_memory")) {
    EXPECT_EQ(row.at("status"), "does not fit") << row.dump();
    EXPECT_GT(row.value("needs_GiB", 0.0), 76.0) << row.dump();
  }

  // torchtitan's published memory (max reserved, 96 GB H100s): every run
  // planned at its layout, the caching allocator's reserved peak at least the
  // allocated one (its rounding and cached blocks), within the GPU and within
  // 5% of the published figure (torchtitan's block and loss as it runs them:
  // projections separate, rotary complex, gqa repeat, norm eager, cross_entropy torch).
  const nlohmann::json memory_table =
      *traces::ReadJsonFile(SourceDir() + "/configs/published/torchtitan-h100-memory.json");
  const nlohmann::json& memory = report->at("torchtitan_memory");
  ASSERT_EQ(memory.at("rows").size(), memory_table.at("runs").size());
  for (const nlohmann::json& row : memory.at("rows")) {
    ASSERT_EQ(row.at("status"), "ok") << row.dump();
    EXPECT_GT(row.at("reserved_GiB").get<double>(), row.at("allocated_GiB").get<double>());
    EXPECT_LE(row.at("reserved_GiB").get<double>(), 96.0);
    EXPECT_LE(std::abs(row.at("error").get<double>()), kMemoryBound) << row.dump();
  }

  // NeMo 24.07's FP8 runs on DGX H100: every run listed at its layout, planned
  // with --fp8 delayed where it fits the H100's 76 GiB (a run that does not
  // says so on its row); the errors where docs/PERFORMANCE.md has them. All
  // nine fit with bf16 gradients, as NeMo's examples set grad_sync_dtype (with
  // fp32 ones five do not: GPT-3 20B would need 94.6 GiB).
  const nlohmann::json nemo_table =
      *traces::ReadJsonFile(SourceDir() + "/configs/published/nemo-24.07-dgx-h100.json");
  const nlohmann::json& nemo = report->at("nemo");
  ASSERT_EQ(nemo.at("rows").size(), nemo_table.at("runs").size());
  int nemo_planned = 0;
  for (const nlohmann::json& row : nemo.at("rows")) {
    SCOPED_TRACE(row.at("model").get<std::string>() + " on " + row.at("gpus").dump());
    const std::string status = row.at("status");
    if (status != "ok") {
      EXPECT_EQ(status.rfind("does not fit", 0), 0u) << status;
      continue;
    }
    ++nemo_planned;
    // The launcher's ub_tp_comm_overlap: GPT-3 20B, Llama-2 70B and Llama-3 70B.
    const std::string model = row.at("model");
    EXPECT_EQ(row.at("tp_comm_overlap").get<bool>(),
              model == "nemo-gpt3-20b" || model == "llama-2-70b" || model == "llama-3-70b");
    // NVTE_FUSED_ATTN: the launcher's 0 (flash-attn 2), the 175B example's 1 (cuDNN).
    EXPECT_EQ(row.at("attention_kernel").get<std::string>(),
              model == "nemo-gpt3-175b" ? "cudnn" : "flash2");
    EXPECT_LE(row.at("peak_GiB").get<double>(), 76.0);
    EXPECT_GT(row.at("predicted_tokens_per_s_per_gpu").get<double>(), 0.0);
  }
  EXPECT_EQ(nemo_planned, 9);
  EXPECT_EQ(nemo.at("statistics").at("runs").get<int>(), nemo_planned);
  EXPECT_LE(nemo.at("statistics").at("median_abs_error").get<double>(), kNemoMedianBound);
  EXPECT_LE(nemo.at("statistics").at("worst_abs_error").get<double>(), kNemoWorstBound);
}

}  // namespace
}  // namespace ssdtrain

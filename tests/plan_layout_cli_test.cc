// End to end: `ssdtrain plan`'s layouts — pinned layouts and their replay
// commands, ZeRO-1 plans, impossible pins, `plan --trace` at the trace's own
// shape — and the compare loop refusing a prediction of another layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "tests/cli_util.h"
#include "tests/plan_cli.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::PlanCli;
using testing::RunSsdtrain;

// Pins fix the layout; the search covers the rest. tiny-gpt has 4 layers and 4
// heads: on 8 GPUs, --tp 2 --pp 2 leaves dp = 8 / (2·2) = 2, and --global-batch
// 16 at micro-batch 2 gives m = 16 / (2·2) = 4 micro-batches.
TEST_F(PlanCli, PinnedLayoutIsThePlansLayoutAndPrintsItsReplayCommand) {
  CliResult r =
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 8 --tp 2 --pp 2 --micro-batch 2 --global-batch 16 "
                  "--schedule gpipe --policy keep --zero-stage 1 -o " +
                  File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->tp, 2);
  EXPECT_EQ(plan->pp, 2);
  EXPECT_EQ(plan->dp, 2);
  EXPECT_EQ(plan->micro_batch, 2);
  EXPECT_EQ(plan->num_micro_batches, 4);
  EXPECT_EQ(plan->schedule, "gpipe");
  // tp × pp × dp = 2 × 2 × 2 ranks, each building its own shard's trace
  // from the config; stage 1's plan travels in the plan file.
  EXPECT_NE(r.output.find("replay this plan: mpirun -np 8 " +
                          fs::canonical(testing::SsdtrainBinary()).string() + " replay --model " +
                          Model("tiny-gpt") + " --plan " + File("plan.json")),
            std::string::npos)
      << r.output;
  ASSERT_EQ(plan->extra.at("stage_plans").size(), 1u);
  EXPECT_EQ(plan->extra.at("stage_plans")[0].at("stage").get<int>(), 1);
  // --num-micro-batches pins m directly.
  r = RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 2 --pp 2 --num-micro-batches 3 --policy keep -o " + File("p2.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  plan = traces::ReadPlan(File("p2.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->pp, 2);
  EXPECT_EQ(plan->num_micro_batches, 3);
  EXPECT_EQ(plan->schedule, "1f1b");
}

// A ZeRO-1 plan (tiny-gpt on 2 GPUs, dp 2, --zero-stage 1) carries its zero
// stage through the plan file, says so on its summary line, and its trace is
// the one `ssdtrain trace` builds with the flags it prints and the one
// `ssdtrain replay --model` rebuilds: each rank holds half the Adam state,
// so the fingerprint is that of the sharded trace, not the config's.
TEST_F(PlanCli, ZeroOnePlanRoundTripsAndReplayRebuildsItsTrace) {
  const std::string model = Model("tiny-gpt");
  CliResult r = RunSsdtrain("plan --model " + model + " --hardware " + Hardware("cpu-local") +
                            " --gpus 2 --dp 2 --zero-stage 1 --micro-batch 1 --seq-len 128 "
                            "--num-micro-batches 1 --policy keep -o " +
                            File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp 2 ZeRO-1 (1 micro-batches)"), std::string::npos) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->zero_stage, 1);
  EXPECT_EQ(plan->dp, 2);
  const std::string trace_flags = " --dp 2 --zero-stage 1";
  const size_t at = r.output.find("trace for this plan: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string command = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(command.find(trace_flags), std::string::npos) << command;
  ASSERT_EQ(RunSsdtrain("trace --model " + model + " --micro-batch 1 --seq-len 128" + trace_flags +
                        " -o " + File("t.json"))
                .exit_code,
            0);
  Result<traces::Trace> t = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(traces::Fingerprint(*t), plan->trace_fingerprint);
  fs::create_directories(File("offload"));
  // One process replays the dp 2 plan's rank only when asked (--single-rank).
  r = RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") + " --dir " +
                  File("offload") + " --backend cpu --steps 1 --single-rank -o " +
                  File("run.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::StepReport> run = traces::ReadStepReport(File("run.json"));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->trace_fingerprint, plan->trace_fingerprint);
}

// Context parallelism end to end: tiny-gpt with flash attention planned at cp 2
// on 4 GPUs prints and records cp 2 and the trace command that builds its
// trace (256 / 2 tokens a rank), says the plan does not replay yet, and the
// replay refuses it naming the plan and cp, leaving nothing in its directory;
// the standard-attention model refuses --cp naming the flag and why.
TEST_F(PlanCli, ContextParallelPlanRecordsCpAndItsReplayRunsOnItsRanks) {
  const std::string model = Edited(Model("tiny-gpt"), "tiny-gpt-flash.json", [](nlohmann::json& j) {
    j["name"] = "tiny-gpt-flash";
    j["attention"] = "flash";
  });
  CliResult r = RunSsdtrain(
      "plan --model " + model + " --hardware " + Hardware("cpu-local") +
      " --gpus 4 --cp 2 --tp 1 --pp 1 --micro-batch 4 --zero-stage 0 --policy keep -o " +
      File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("micro-batch 4 tp 1 cp 2 pp 1 dp 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--tp 1 --pp 1 --cp 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("replay this plan: mpirun -np 4 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("context rank (r / tp) % cp"), std::string::npos) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->cp, 2);
  EXPECT_EQ(plan->dp, 2);
  ASSERT_EQ(RunSsdtrain("trace --model " + model + " --micro-batch 4 --cp 2 -o " + File("t.json"))
                .exit_code,
            0);
  Result<traces::Trace> t = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->header.cp, 2);
  EXPECT_EQ(traces::Fingerprint(*t), plan->trace_fingerprint);
  fs::create_directories(File("offload"));
  r = RunSsdtrain("replay --model " + model + " --plan " + File("plan.json") + " --dir " +
                  File("offload") + " --backend cpu --steps 1 -o " + File("run.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // One process is one rank of four: refused, naming the mpirun line.
  EXPECT_NE(r.output.find(File("plan.json") + ": its layout runs on tp × cp × pp × dp = 1 × 2 × "
                                              "1 × 2 = 4 ranks, but this replay is one process; "
                                              "run it under `mpirun -np 4"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::is_empty(File("offload")));
  EXPECT_FALSE(fs::exists(File("run.json")));
  r = RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 2 --cp 2 -o " + File("p2.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--cp 2: context parallelism needs attention flash"), std::string::npos)
      << r.output;
  r = RunSsdtrain("trace --model " + Model("tiny-gpt") + " --cp 2 -o " + File("t2.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cp: 2: context parallelism needs attention flash"), std::string::npos)
      << r.output;
}

TEST_F(PlanCli, ImpossiblePinsAreRejectedNamingTheFlagAndWhy) {
  const std::string base = "plan --model " + Model("tiny-gpt") + " --hardware " +
                           Hardware("cpu-local") + " --policy keep -o " + File("plan.json") + " ";
  const std::pair<std::string, std::string> cases[] = {
      // 4 layers, 4 heads.
      // pp 3 splits them 1 | 2 | 1 (traces::DefaultUnevenSplit); a pinned
      // split must add up.
      {"--gpus 3 --pp 3 --pp-first-layers 3",
       "--pp-first-layers: first 3, last 0 of 4 layers over pp 3 leaves 1 blocks for 2 stages "
       "(each needs at least one)"},
      {"--gpus 3 --pp-last-layers 1", "--pp-last-layers 1: needs --pp"},
      {"--gpus 3 --pp 3 --pp-first-layers 1 --schedule interleaved",
       "--schedule interleaved: not modelled with an uneven pipeline split"},
      {"--gpus 3 --tp 3", "--tp 3: 3 does not divide heads 4"},
      {"--gpus 8 --tp 2 --pp 2 --dp 4",
       "--tp 2 x --pp 2 x --dp 4 = 16 GPUs, but --gpus 8: tp x cp x pp x dp must equal the GPUs"},
      {"--gpus 6 --pp 4", "--pp 4: does not divide --gpus 6"},
      {"--gpus 2 --micro-batch 2 --num-micro-batches 3 --global-batch 8",
       "--global-batch 8: must be --micro-batch x --num-micro-batches x dp = 6 x dp"},
  };
  for (const auto& [flags, message] : cases) {
    CliResult r = RunSsdtrain(base + flags);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
    EXPECT_FALSE(fs::exists(File("plan.json"))) << flags;
  }
}

// A pp that does not divide the layers splits them unevenly (tiny-gpt's 4 over
// pp 3: 1 | 2 | 1): the summary line gives the blocks, --compare's layout
// column marks the split with u, the plan file records it.
TEST_F(PlanCli, AnUnevenSplitIsPrintedAndRecorded) {
  CliResult r =
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 3 --pp 3 --compare -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" pp 3 (blocks 1|2|1) dp 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" 1/3u/1 "), std::string::npos) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->pp_first_layers, 1);
  EXPECT_EQ(plan->pp_last_layers, 1);
  // Pinned, the split is the pin's, 1 | 1 | 2 (the last stage the larger).
  r = RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 3 --pp 3 --pp-first-layers 1 --pp-last-layers 2 --policy keep -o " +
                  File("p2.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" pp 3 (blocks 1|1|2) dp 1"), std::string::npos) << r.output;
}

// An encoder-decoder model does not interleave (models::PipelineStagesRefusal):
// T5-11B on 64 A100s searches pipelined layouts without the interleaved
// schedule (before, the search built such a stage's chunks and failed whole:
// "tensor encoder.relative_bias.out of chunk 0's forward is read by
// L2.attn.qk of chunk 2"), and a pinned interleaving is refused naming --pp.
TEST_F(PlanCli, AnEncoderDecoderModelIsPlannedWithoutInterleaving) {
  const std::string base = "plan --model " + Model("t5-11b") + " --hardware " +
                           Hardware("a100-pcie-40gb-4x-980pro") + " --gpus 64 ";
  CliResult r = RunSsdtrain(base + "--policy keep -o " + File("t5.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("t5.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_NE(plan->schedule, "interleaved");
  r = RunSsdtrain(base + "--pp 2 --schedule interleaved --virtual-stages 2 -o " + File("t5i.json"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--pp 2: an encoder-decoder model does not interleave"),
            std::string::npos)
      << r.output;
}

// `plan --trace` takes the trace's shape: tiny-gpt traced at tp 2 plans, with
// no layout flags, at tp 2, pp 1 and the trace's micro-batch 4 on tp·pp = 2
// GPUs; --gpus 4 adds data parallelism, dp = 4 / (2·1) = 2.
TEST_F(PlanCli, TraceAtTp2PlansAtItsOwnShapeWithNoFlags) {
  ASSERT_EQ(
      RunSsdtrain("trace --model " + Model("tiny-gpt") + " --tp 2 -o " + File("t.json")).exit_code,
      0);
  CliResult r = RunSsdtrain("plan --trace " + File("t.json") + " --hardware " +
                            Hardware("cpu-local") + " --policy keep -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tiny-gpt on 2 x cpu-local"), std::string::npos) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->tp, 2);
  EXPECT_EQ(plan->pp, 1);
  EXPECT_EQ(plan->dp, 1);
  EXPECT_EQ(plan->micro_batch, 4);

  r = RunSsdtrain("plan --trace " + File("t.json") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 4 --policy keep -o " + File("dp2.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  plan = traces::ReadPlan(File("dp2.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->tp, 2);
  EXPECT_EQ(plan->dp, 2);
  // tp × dp = 2 × 2 ranks, each replaying the trace's shard.
  EXPECT_NE(r.output.find("replay this plan: mpirun -np 4 " +
                          fs::canonical(testing::SsdtrainBinary()).string() + " replay --trace " +
                          File("t.json")),
            std::string::npos)
      << r.output;
}

// Stage 1 of tiny-gpt at tp 2, pp 2 plans with no layout flags on 2·2 = 4
// GPUs at tp 2, pp 2; the plan is for that trace (its fingerprint and tensor
// ids), and the replay it prints runs that one stage alone.
TEST_F(PlanCli, TraceOfOnePipelineStagePlansAtItsOwnShapeWithNoFlags) {
  ASSERT_EQ(RunSsdtrain("trace --model " + Model("tiny-gpt") + " --tp 2 --pp 2 --stage 1 -o " +
                        File("t.json"))
                .exit_code,
            0);
  CliResult r = RunSsdtrain("plan --trace " + File("t.json") + " --hardware " +
                            Hardware("cpu-local") + " --policy keep -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tiny-gpt on 4 x cpu-local"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(stage 1 of 2 alone"), std::string::npos) << r.output;
  Result<traces::Trace> trace = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->tp, 2);
  EXPECT_EQ(plan->pp, 2);
  EXPECT_EQ(plan->dp, 1);
  EXPECT_EQ(plan->micro_batch, 4);
  EXPECT_TRUE(traces::ValidatePlan(*plan, *trace, File("plan.json")).ok());
}

// A layout flag that contradicts the trace (tiny-gpt at tp 2, pp 2, micro-batch
// 4, sequence 256) is refused, naming the flag and the trace's value; one that
// agrees is accepted.
TEST_F(PlanCli, FlagThatContradictsTheTraceIsRefusedNamingBoth) {
  ASSERT_EQ(
      RunSsdtrain("trace --model " + Model("tiny-gpt") + " --tp 2 --pp 2 -o " + File("t.json"))
          .exit_code,
      0);
  const std::string base = "plan --trace " + File("t.json") + " --hardware " +
                           Hardware("cpu-local") + " --policy keep -o " + File("plan.json") + " ";
  const std::string trace = "contradicts the trace " + File("t.json");
  const std::pair<std::string, std::string> cases[] = {
      {"--tp 1", "--tp 1 " + trace + " (captured at tp 2: header.tp)"},
      {"--pp 4", "--pp 4 " + trace + " (captured at pp 2: header.pp)"},
      {"--micro-batch 8", "--micro-batch 8 " + trace + " (captured at micro-batch 4"},
      {"--seq-len 128", "--seq-len 128 " + trace + " (captured at sequence length 256"},
      {"--gpus 2", "--gpus 2 " + trace + " (captured at tp 2 and pp 2"},
  };
  for (const auto& [flags, message] : cases) {
    CliResult r = RunSsdtrain(base + flags);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << "\n" << r.output;
    EXPECT_FALSE(fs::exists(File("plan.json"))) << flags;
  }
  CliResult r = RunSsdtrain(base + "--tp 2 --pp 2 --gpus 4");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// The loop refuses to compare different steps: a replay of a one-micro-batch
// plan against the prediction of the same plan compares; against a whole-step
// prediction of 4 micro-batches it exits 1 naming the field.
TEST_F(PlanCli, CompareRefusesAPredictionOfAnotherLayout) {
  const std::string model = Model("tiny-gpt"), hw = Hardware("cpu-local");
  ASSERT_EQ(RunSsdtrain("trace --model " + model + " -o " + File("t.json")).exit_code, 0);
  // tiny-gpt's config has micro-batch 4: one micro-batch per step.
  CliResult r = RunSsdtrain("plan --model " + model + " --hardware " + hw +
                            " --micro-batch 4 --global-batch 4 --policy keep -o " +
                            File("one.json") + " --prediction " + File("pred-one.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // One unit family on the headline: GiB for memory and for the SSD's bytes per step.
  const size_t at = r.output.rfind('\n', r.output.find("SSD writes")) + 1;
  const std::string headline = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(headline.find("GiB/step"), std::string::npos) << r.output;
  EXPECT_EQ(headline.find(" GB"), std::string::npos) << r.output;
  // cpu-local is a preset: the plan says to calibrate before a replay here (issue 30 item 4).
  EXPECT_NE(r.output.find("note: " + hw + " is not calibrated (no gpu.replay_workspace)"),
            std::string::npos)
      << r.output;
  const std::string binary = fs::canonical(testing::SsdtrainBinary()).string();
  EXPECT_NE(r.output.find("run `" + binary + " calibrate --dir OFFLOAD_DIR -o hw.json` first"),
            std::string::npos)
      << r.output;
  // The next commands run as printed: they name this build's binary, which is
  // not on PATH as "ssdtrain" here (issue 30 item 7).
  const std::string said = "trace for this plan: ";
  const size_t from = r.output.find(said);
  ASSERT_NE(from, std::string::npos) << r.output;
  const std::string next =
      r.output.substr(from + said.size(), r.output.find('\n', from) - from - said.size());
  EXPECT_EQ(next.rfind(binary + " trace ", 0), 0u) << next;
  EXPECT_EQ(testing::Shell(next + " -o " + File("again.json")).exit_code, 0) << next;
  EXPECT_NE(r.output.find("replay this plan: " + binary + " replay --model "), std::string::npos)
      << r.output;
  r = RunSsdtrain("plan --model " + model + " --hardware " + hw +
                  " --micro-batch 4 --num-micro-batches 4 --policy keep -o " + File("four.json") +
                  " --prediction " + File("pred-four.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::create_directories(File("offload"));
  r = RunSsdtrain("replay --trace " + File("t.json") + " --plan " + File("one.json") + " --dir " +
                  File("offload") + " --backend cpu --steps 1 -o " + File("run.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::StepReport> run = traces::ReadStepReport(File("run.json"));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  ASSERT_TRUE(run->layout.has_value());
  traces::ReportLayout one_micro_batch;  // tp, pp, dp 1; one micro-batch, 1f1b
  one_micro_batch.micro_batch = 4;
  EXPECT_EQ(*run->layout, one_micro_batch);

  // Both sides name each op as the trace names it.
  Result<traces::Trace> trace = traces::ReadTrace(File("t.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  Result<traces::StepReport> pred = traces::ReadStepReport(File("pred-one.json"));
  ASSERT_TRUE(pred.ok()) << pred.status().ToString();
  for (const traces::StepReport* report : {&*run, &*pred}) {
    ASSERT_EQ(report->ops.size(), trace->ops.size()) << report->kind;
    for (const traces::OpTiming& t : report->ops) {
      EXPECT_EQ(t.name, trace->ops.at(t.op).name) << report->kind << " op " << t.op;
    }
  }
  r = RunSsdtrain("compare --prediction " + File("pred-one.json") + " --measured " +
                  File("run.json") + " --worst 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // The worst op is named by index and name (issue 30 item 7).
  const std::string worst_header = "ops with the largest absolute error\n";
  const size_t table = r.output.find(worst_header);
  ASSERT_NE(table, std::string::npos) << r.output;
  std::istringstream rows(r.output.substr(r.output.find('\n', table + worst_header.size()) + 1));
  traces::OpId worst = traces::kNoOp;
  std::string worst_name;
  rows >> worst >> worst_name;
  ASSERT_GE(worst, 0) << r.output;
  ASSERT_LT(static_cast<size_t>(worst), trace->ops.size()) << r.output;
  EXPECT_EQ(worst_name, trace->ops[worst].name) << r.output;
  // The sign of the error is stated (issue 30 item 7).
  EXPECT_NE(r.output.find("error = (predicted - measured) / measured: + where the prediction is "
                          "above the measurement"),
            std::string::npos)
      << r.output;
  r = RunSsdtrain("compare --prediction " + File("pred-four.json") + " --measured " +
                  File("run.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("layout differs (num_micro_batches 4 vs 1"), std::string::npos)
      << r.output;
  // A replay runs its plan's whole step: a 2-micro-batch plan (of a small
  // shape, for speed under the sanitizers) and its run agree on the layout.
  ASSERT_EQ(RunSsdtrain("trace --model " + model + " --micro-batch 1 --seq-len 128 -o " +
                        File("t-small.json"))
                .exit_code,
            0);
  r = RunSsdtrain("plan --model " + model + " --hardware " + hw +
                  " --micro-batch 1 --seq-len 128 --num-micro-batches 2 --policy keep -o " +
                  File("two.json") + " --prediction " + File("pred-two.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunSsdtrain("replay --trace " + File("t-small.json") + " --plan " + File("two.json") +
                  " --dir " + File("offload") + " --backend cpu --steps 1 -o " +
                  File("run-two.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = RunSsdtrain("compare --prediction " + File("pred-two.json") + " --measured " +
                  File("run-two.json"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // A report without a layout cannot be checked: refused, naming the file.
  const std::string old =
      Edited(File("pred-one.json"), "old.json", [](nlohmann::json& j) { j.erase("layout"); });
  r = RunSsdtrain("compare --prediction " + old + " --measured " + File("run.json"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("old.json: layout: missing"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ssdtrain

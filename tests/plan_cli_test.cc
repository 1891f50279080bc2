// End to end: `ssdtrain plan` and `ssdtrain simulate` on tiny-gpt (the CPU
// backend's model) and on a paper configuration, the prediction file's step
// report shape, and the CLI's handling of bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "models/build_trace.h"
#include "models/model_config.h"
#include "tests/cli_util.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::RunSsdtrain;
using testing::SourceDir;

constexpr int64_t kGiB = int64_t{1} << 30;

class PlanCli : public testing::CliTest {
 protected:
  PlanCli() : CliTest("plan-cli") {}
  // A copy of a shipped config with one field changed.
  std::string Edited(const std::string& path, const std::string& name,
                     const std::function<void(nlohmann::json&)>& edit) const {
    Result<nlohmann::json> j = traces::ReadJsonFile(path);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    edit(*j);
    EXPECT_TRUE(traces::WriteJsonFile(*j, File(name)).ok());
    return File(name);
  }
};

// tiny-gpt on cpu-local under a 0.1 GiB budget (keep needs 0.17 GiB, the
// weights, their gradients and Adam state 0.056 GiB): the plan fits, its placements
// validate against the trace `ssdtrain trace` builds with the flags the plan
// prints, its files are relative "t<id>.bin", and `ssdtrain simulate` on that
// trace and plan predicts the same step as the plan's own prediction.
TEST_F(PlanCli, TinyGptPlanUnderASmallBudgetIsAcceptedByItsTrace) {
  const std::string budget_flag = "--memory-budget 0.1";
  CliResult r = RunSsdtrain(
      "plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") + " " +
      budget_flag + " --micro-batch 4 --policy offload-ssd -o " + File("plan.json") +
      " --prediction " + File("pred.json") + " --timeline " + File("tl.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The progress lines and the trace command.
  EXPECT_NE(r.output.find("plan: simulated mb=4 tp=1 pp=1 dp=1"), std::string::npos) << r.output;
  // The SSD line speaks the headline's units: sizes in GiB, the bytes per step
  // as "GiB/step" with the same figure; drive rates in GB/s, said once to be
  // 1e9 B/s (issue 30 item 6).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("SSD writes ([0-9.]+) GiB/step\n")))
      << r.output;
  const std::string per_step = m[1].str();
  const size_t ssd = r.output.find("\nSSD: ");
  ASSERT_NE(ssd, std::string::npos) << r.output;
  const std::string ssd_line = r.output.substr(ssd + 1, r.output.find('\n', ssd + 1) - ssd - 1);
  EXPECT_TRUE(std::regex_search(ssd_line, std::regex("\\([0-9.]+ GiB per micro-batch")))
      << ssd_line;
  EXPECT_NE(ssd_line.find(" GB/s (1e9 B/s) of writes per GPU; its drives write "),
            std::string::npos)
      << ssd_line;
  EXPECT_NE(ssd_line.find("; this plan writes " + per_step + " GiB/step"), std::string::npos)
      << ssd_line;
  EXPECT_FALSE(std::regex_search(ssd_line, std::regex(" GB[^/]|GB$"))) << ssd_line;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("ssdtrain trace (--model [^\n]*)")))
      << r.output;
  CliResult t = RunSsdtrain("trace " + m[1].str() + " -o " + File("trace.json"));
  ASSERT_EQ(t.exit_code, 0) << t.output;

  Result<traces::Trace> trace = traces::ReadTrace(File("trace.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(traces::ValidatePlan(*plan, *trace, File("plan.json")).ok());
  EXPECT_EQ(plan->policy, "offload-ssd");
  ASSERT_FALSE(plan->placements.empty());
  for (const traces::Placement& p : plan->placements) {
    EXPECT_EQ(p.file, "t" + std::to_string(p.tensor) + ".bin");
  }
  ASSERT_TRUE(plan->prediction.has_value());
  EXPECT_LE(plan->prediction->peak_gpu_bytes, static_cast<int64_t>(0.1 * kGiB));
  EXPECT_GT(plan->prediction->ssd_bytes_written, 0);

  // The prediction file is a step report over the same trace.
  Result<traces::StepReport> pred = traces::ReadStepReport(File("pred.json"));
  ASSERT_TRUE(pred.ok()) << pred.status().ToString();
  EXPECT_EQ(pred->kind, "prediction");
  EXPECT_EQ(pred->model, "tiny-gpt");
  EXPECT_EQ(pred->trace_fingerprint, traces::Fingerprint(*trace));
  EXPECT_EQ(pred->policy, "offload-ssd");
  EXPECT_EQ(pred->source, "cpu-local");
  EXPECT_EQ(pred->metrics.step_time_ns, plan->prediction->step_time_ns);
  for (const char* lane : {"compute", "d2h", "h2d", "ssd_write", "ssd_read"}) {
    EXPECT_EQ(pred->lane_busy_ns.count(lane), 1u) << lane;
  }
  EXPECT_GT(pred->lane_busy_ns.at("ssd_write"), 0);
  ASSERT_EQ(pred->ops.size(), trace->ops.size());  // every op of the one stage ran
  for (size_t i = 0; i < pred->ops.size(); ++i) {
    EXPECT_EQ(pred->ops[i].op, static_cast<traces::OpId>(i));
    EXPECT_EQ(pred->ops[i].name, trace->ops[i].name);
    EXPECT_LE(pred->ops[i].start_ns, pred->ops[i].end_ns);
  }
  // The plan carries the same report.
  EXPECT_EQ(plan->extra.at("prediction_report"), traces::ToJson(*pred));
  EXPECT_TRUE(fs::file_size(File("tl.json")) > 0);

  CliResult s =
      RunSsdtrain("simulate --trace " + File("trace.json") + " --plan " + File("plan.json") +
                  " --hardware " + Hardware("cpu-local") + " -o " + File("sim.json"));
  ASSERT_EQ(s.exit_code, 0) << s.output;
  Result<traces::StepReport> sim = traces::ReadStepReport(File("sim.json"));
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_EQ(sim->metrics.step_time_ns, pred->metrics.step_time_ns);
  EXPECT_EQ(sim->metrics.peak_gpu_bytes, pred->metrics.peak_gpu_bytes);
  EXPECT_EQ(sim->trace_fingerprint, pred->trace_fingerprint);
}

// The default search (`auto`: every policy) on tiny-gpt finds a plan under the
// same budget, and --rok prints one row per policy (6 fixed + optimal).
TEST_F(PlanCli, AutoSearchFitsTheBudgetAndPrintsTheRokCurve) {
  CliResult r =
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --memory-budget 0.1 --rok -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("recompute-offload-keep curve"), std::string::npos) << r.output;
  for (const char* policy : {"keep", "recompute-full", "recompute-selective", "offload-host",
                             "offload-ssd", "ssdtrain", "optimal"}) {
    EXPECT_TRUE(
        std::regex_search(r.output, std::regex(std::string("\n +") + policy +
                                               " +[0-9.]+ +[0-9.]+ +[0-9.]+  (yes|no: [^\n]+)\n")))
        << policy << "\n"
        << r.output;
  }
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(plan->prediction.has_value());
  EXPECT_LE(plan->prediction->peak_gpu_bytes, static_cast<int64_t>(0.1 * kGiB));
  EXPECT_EQ(plan->extra.at("rok").size(), 7u);
}

// --rok marks the points over the budget: tiny-gpt at micro-batch 4 on
// cpu-local, under 0.1 GiB, where keep needs 0.17 GiB (its row says "no: ...
// over budget", its JSON point fits false with over_budget_bytes = peak −
// budget) and the plan's own policy fits.
TEST_F(PlanCli, RokMarksThePointsOverTheBudget) {
  CliResult r =
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --memory-budget 0.1 --micro-batch 4 --rok -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("budget 0.10 GiB per GPU"), std::string::npos) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("\n +keep +0\\.1[0-9] +[0-9.]+ +[0-9.]+  no: [0-9.]+ [GM]iB over "
                           "budget\n")))
      << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const int64_t budget = static_cast<int64_t>(0.1 * kGiB);
  bool keep_seen = false, chosen_fits = false;
  for (const nlohmann::json& e : plan->extra.at("rok")) {
    const int64_t peak = e.at("peak_gpu_bytes").get<int64_t>();
    EXPECT_EQ(e.at("fits").get<bool>(), peak <= budget) << e.dump();
    EXPECT_EQ(e.at("over_budget_bytes").get<int64_t>(), std::max<int64_t>(0, peak - budget))
        << e.dump();
    if (e.at("policy") == "keep") {
      keep_seen = true;
      EXPECT_FALSE(e.at("fits").get<bool>()) << e.dump();
    }
    if (e.at("policy") == plan->policy) chosen_fits = e.at("fits").get<bool>();
  }
  EXPECT_TRUE(keep_seen);
  EXPECT_TRUE(chosen_fits) << plan->policy;
}

// A paper configuration end to end: gpt-h8192-l4 on the paper's two A100s
// under the adaptive rule, then simulated from the trace it names.
TEST_F(PlanCli, PaperConfigPlansAndSimulates) {
  CliResult r = RunSsdtrain("plan --model " + Model("ssdtrain-gpt-h8192-l4") + " --hardware " +
                            Hardware("a100-pcie-ssdtrain-paper") +
                            " --gpus 2 --micro-batch 16 --policy ssdtrain -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("policy ssdtrain"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("ssdtrain trace (--model [^\n]*)")));
  ASSERT_EQ(RunSsdtrain("trace " + m[1].str() + " -o " + File("trace.cbor")).exit_code, 0);
  CliResult s = RunSsdtrain("simulate --trace " + File("trace.cbor") + " --plan " +
                            File("plan.json") + " --hardware " +
                            Hardware("a100-pcie-ssdtrain-paper") + " -o " + File("sim.json"));
  ASSERT_EQ(s.exit_code, 0) << s.output;
  Result<traces::StepReport> sim = traces::ReadStepReport(File("sim.json"));
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_EQ(sim->policy, "ssdtrain");
  EXPECT_EQ(sim->source, "a100-pcie-ssdtrain-paper");
  EXPECT_GT(sim->metrics.ssd_bytes_written, 0);
  EXPECT_GT(sim->metrics.ssd_lifetime_days, 0);
}

// `ssdtrain replay` has no host-offload path: on cpu-local (no pinned pool) the
// default search never places a tensor in host memory, and --no-host-offload
// keeps host memory out of the search on a GPU config that has a pinned pool.
TEST_F(PlanCli, PlansForReplayHaveNoHostOffload) {
  auto host_placements = [](const traces::Plan& plan) {
    int n = 0;
    for (const traces::Placement& p : plan.placements) {
      n += p.action == traces::TensorAction::kOffloadHost ? 1 : 0;
    }
    return n;
  };
  CliResult r = RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " +
                            Hardware("cpu-local") + " --memory-budget 0.1 -o " + File("plan.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_FALSE(plan->placements.empty());
  EXPECT_EQ(host_placements(*plan), 0);

  const std::string a100 = "plan --model " + Model("ssdtrain-gpt-h8192-l4") + " --hardware " +
                           Hardware("a100-pcie-ssdtrain-paper") + " --micro-batch 16 ";
  r = RunSsdtrain(a100 + "--policy optimal --no-host-offload -o " + File("a.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  plan = traces::ReadPlan(File("a.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(host_placements(*plan), 0);
  r = RunSsdtrain(a100 + "--policy offload-host --no-host-offload -o " + File("b.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("host offload is excluded"), std::string::npos) << r.output;
}

TEST_F(PlanCli, ZeroBandwidthHardwareIsRejectedNamingFileAndField) {
  const std::string hw = Edited(Hardware("cpu-local"), "zero.json",
                                [](nlohmann::json& j) { j["storage"]["drive"]["write_GBps"] = 0; });
  CliResult r = RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + hw + " -o " +
                            File("plan.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("zero.json: storage.drive.write_GBps: must be > 0, got 0"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(File("plan.json")));
}

// 0.05 GiB is below tiny-gpt's weights, weight gradients and Adam state:
// 3.75 M fp32 parameters · (4 + 4 + 8) bytes = 57 MiB = 0.056 GiB.
TEST_F(PlanCli, BudgetBelowTheWeightsSaysHowMuchTheyNeed) {
  CliResult r =
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --memory-budget 0.05 -o " + File("plan.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("the weights, gradients and optimizer state alone need 0\\.056 GiB "
                           "per GPU.*more than the 0\\.050 GiB budget")))
      << r.output;
  EXPECT_FALSE(fs::exists(File("plan.json")));
}

// 0.065 GiB holds the static state (0.056 GiB) but no policy's peak (the
// lowest, offloading every activation, is about 0.077 GiB): the error names
// the lowest-memory plan and what it still needs.
TEST_F(PlanCli, ModelThatFitsUnderNoPolicyStatesTheMemoryStillNeeded) {
  CliResult r =
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --memory-budget 0.065 --micro-batch 4 -o " + File("plan.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("does not fit on 1 GPUs of cpu-local under any policy: the "
                           "lowest-memory plan found \\([a-z-]+, micro-batch 4, tp 1, pp 1\\) "
                           "needs 0\\.[0-9]+ GiB per GPU on stage 0, which holds 1 "
                           "micro-batch\\(es\\) at once, 0\\.[0-9]+ GiB more than the 0\\.065 "
                           "GiB budget")))
      << r.output;
  EXPECT_FALSE(fs::exists(File("plan.json")));
}

TEST_F(PlanCli, MorePipelineStagesThanLayersIsRejected) {
  // In the model config: pp 8 over 4 layers.
  const std::string model =
      Edited(Model("tiny-gpt"), "pp8.json", [](nlohmann::json& j) { j["pp"] = 8; });
  CliResult r = RunSsdtrain("plan --model " + model + " --hardware " + Hardware("cpu-local") +
                            " -o " + File("plan.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("pp8.json: pp:"), std::string::npos) << r.output;
  // In a plan given to simulate: pp 99 over 4 layers.
  ASSERT_EQ(RunSsdtrain("trace --model " + Model("tiny-gpt") + " -o " + File("t.json")).exit_code,
            0);
  ASSERT_EQ(
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --micro-batch 4 --policy keep -o " + File("plan.json"))
          .exit_code,
      0);
  const std::string plan =
      Edited(File("plan.json"), "pp99.json", [](nlohmann::json& j) { j["pp"] = 99; });
  CliResult s = RunSsdtrain("simulate --trace " + File("t.json") + " --plan " + plan +
                            " --hardware " + Hardware("cpu-local") + " -o " + File("sim.json"));
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_NE(s.output.find("pp = 99 is more pipeline stages than the model's 4 layers"),
            std::string::npos)
      << s.output;
}

TEST_F(PlanCli, SimulateRejectsAPlanForAnotherTrace) {
  ASSERT_EQ(
      RunSsdtrain("trace --model " + Model("tiny-gpt") + " --micro-batch 2 -o " + File("t.json"))
          .exit_code,
      0);
  ASSERT_EQ(
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --micro-batch 4 --policy offload-ssd -o " + File("plan.json"))
          .exit_code,
      0);
  CliResult s = RunSsdtrain("simulate --trace " + File("t.json") + " --plan " + File("plan.json") +
                            " --hardware " + Hardware("cpu-local") + " -o " + File("sim.json"));
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_NE(s.output.find("plan.json"), std::string::npos) << s.output;
  EXPECT_FALSE(fs::exists(File("sim.json")));
}

// Pins fix the layout; the search covers the rest. tiny-gpt has 4 layers and 4
// heads: on 8 GPUs, --tp 2 --pp 2 leaves dp = 8 / (2·2) = 2, and --global-batch
// 16 at micro-batch 2 gives m = 16 / (2·2) = 4 micro-batches.
TEST_F(PlanCli, PinnedLayoutIsThePlansLayoutAndPrintsItsReplayCommand) {
  CliResult r =
      RunSsdtrain("plan --model " + Model("tiny-gpt") + " --hardware " + Hardware("cpu-local") +
                  " --gpus 8 --tp 2 --pp 2 --micro-batch 2 --global-batch 16 "
                  "--schedule gpipe --policy keep -o " +
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

TEST_F(PlanCli, ImpossiblePinsAreRejectedNamingTheFlagAndWhy) {
  const std::string base = "plan --model " + Model("tiny-gpt") + " --hardware " +
                           Hardware("cpu-local") + " --policy keep -o " + File("plan.json") + " ";
  const std::pair<std::string, std::string> cases[] = {
      // 4 layers, 4 heads.
      {"--gpus 3 --pp 3", "--pp 3: does not divide the model's 4 layers"},
      {"--gpus 3 --tp 3", "--tp 3: does not divide the model's 4 attention heads"},
      {"--gpus 8 --tp 2 --pp 2 --dp 4",
       "--tp 2 x --pp 2 x --dp 4 = 16 GPUs, but --gpus 8: dp x tp x pp must equal the GPUs"},
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
  EXPECT_EQ(*run->layout, (traces::ReportLayout{4, 1, 1, 1, 1, "1f1b"}));

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

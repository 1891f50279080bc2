// End to end: `ssdtrain plan` and `ssdtrain simulate` on tiny-gpt (the CPU
// backend's model) and on a paper configuration, the prediction file's step
// report shape, and the CLI's handling of bad input. Pinned layouts, ZeRO-1
// and `plan --trace` are in plan_layout_cli_test.cc.
#include "tests/plan_cli.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "tests/cli_util.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/report.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;
using testing::CliResult;
using testing::PlanCli;
using testing::RunSsdtrain;

constexpr int64_t kGiB = int64_t{1} << 30;

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
// same budget, and --rok prints one row per policy (6 fixed, megatron-offload
// and optimal; megatron-offload not simulated where offload-host does not fit).
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
  // cpu-local has no pinned pool to spare: offload-host moves nothing and does
  // not fit, so auto does not simulate megatron-offload (a subset of its
  // tensors) and says why.
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex("\n +megatron-offload +- +- +-  not simulated: offload-host does not "
                           "fit at this layout, and megatron-offload moves a subset of its "
                           "tensors to the same pinned pool\n")))
      << r.output;
  Result<traces::Plan> plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_TRUE(plan->prediction.has_value());
  EXPECT_LE(plan->prediction->peak_gpu_bytes, static_cast<int64_t>(0.1 * kGiB));
  EXPECT_EQ(plan->extra.at("rok").size(), 8u);
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
    if (!e.value("simulated", true)) continue;  // megatron-offload, where offload-host does not fit
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

// On cpu-local (no pinned pool) the default search never places a tensor in
// host memory, and --no-host-offload keeps host memory out of the search on a
// GPU config that has a pinned pool. (A plan that has host placements replays
// through the executor's host copies: megatron_offload_cli_test.cc.)
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

}  // namespace
}  // namespace ssdtrain

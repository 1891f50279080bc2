// The planner's invariants (tests/planner_invariants.h) in the suite: every
// GPU hardware preset under every policy, auto included, on models from 1.3B
// to 175B at 8 to 4096 GPUs, each scale on one preset. scripts/planner-sweep.sh
// runs every model config at every GPU count. And torchtitan's Llama block and
// loss at 16384 GPUs.
#include "tests/planner_invariants.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "traces/io.h"

namespace ssdtrain::testing {
namespace {

struct Scale {
  const char* model;
  int64_t gpus;
};

// Each preset runs one scale: every scale of the first eight on one preset, the
// two presets of one GPU that differ only in their drives (the A100 40GB PCIe
// pair, the 4x and 8x gen5 H100 and H200 nodes) at different scales, and
// today's nodes (DGX H200, DGX B200, GB200 NVL72: issue 39) at scales of their
// own. The whole product runs in scripts/planner-sweep.sh: here a second preset
// per scale cost as much again (the optimal and auto searches of the large
// scales take tens of seconds each on a 2-core machine). A preset added to
// configs/hardware without a line here fails the test, naming it.
struct PresetScale {
  const char* preset;
  Scale scale;
};
constexpr PresetScale kScaleOf[] = {
    {"a100-pcie-40gb-4x-980pro", {"llama-3-8b", 64}},
    {"a100-pcie-40gb-ssdtrain-paper", {"gpt-175b", 4096}},
    {"a100-pcie-ssdtrain-paper", {"llama-2-7b", 512}},
    {"dgx-a100-80gb", {"bert-large", 4096}},
    {"dgx-h100", {"gpt-1.3b", 8}},
    {"h100-sxm-4x-gen5-nvme", {"gpt-13b", 512}},
    {"h100-sxm-8x-gen5-nvme", {"t5-11b", 64}},
    {"h200-sxm-4x-gen5-nvme", {"gpt-175b", 512}},
    {"h200-sxm-8x-gen5-nvme", {"llama-3-8b", 64}},
    {"dgx-h200", {"llama-2-13b", 64}},
    {"dgx-b200", {"llama-3-8b", 512}},
    {"gb200-nvl72", {"llama-3-8b", 4096}},
};

std::vector<std::string> GpuPresets() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(ConfiguredSourceDir()) +
                                                           "/configs/hardware")) {
    if (e.path().extension() == ".json" && !e.path().filename().string().starts_with("cpu")) {
      out.push_back(e.path().stem().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Search time is a benchmark figure (bench/sim_bench, scripts/planner-sweep.sh
// holds every search to 10 s), never this test's verdict: here the limit is a
// hang watchdog, forty times the longest search measured in the suite (7.5 s,
// with the rest of the suite beside it), so that no load of this shared machine
// can fail it (ASan ran one search of the a100 paper preset past 60 s).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SSDTRAIN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SSDTRAIN_SANITIZED 1
#endif
#endif
#ifdef SSDTRAIN_SANITIZED
constexpr double kHangGuardSeconds = 1800;
#else
constexpr double kHangGuardSeconds = 300;
#endif

class PlannerInvariants : public ::testing::TestWithParam<std::string> {};

// `model` on `gpus` of `preset` under every policy (`fp8`: that FP8 recipe):
// every violation a failure, every policy's summary line printed.
void ExpectInvariants(const std::string& model, const std::string& preset, int64_t gpus,
                      const std::string& fp8 = "") {
  const SweepCase c{std::string(ConfiguredSourceDir()) + "/configs/models/" + model + ".json",
                    std::string(ConfiguredSourceDir()) + "/configs/hardware/" + preset + ".json",
                    gpus,
                    AllPlannerPolicies(),
                    kHangGuardSeconds,
                    /*defer_grad_sync=*/false,
                    fp8};
  const SweepOutcome o = CheckPlannerInvariants(c);
  for (const std::string& v : o.violations) ADD_FAILURE() << v;
  for (const std::string& l : o.lines) std::cout << l << "\n";
  EXPECT_EQ(o.lines.size(), c.policies.size());
}

TEST_P(PlannerInvariants, EveryReturnedPlanFitsEveryStageAndAutoIsFastest) {
  const auto entry = std::find_if(std::begin(kScaleOf), std::end(kScaleOf),
                                  [](const PresetScale& e) { return GetParam() == e.preset; });
  ASSERT_NE(entry, std::end(kScaleOf))
      << "configs/hardware/" << GetParam()
      << ".json has no scale in planner_invariants_test.cc's kScaleOf: add one";
  ExpectInvariants(entry->scale.model, GetParam(), entry->scale.gpus);
}

// FP8 at a scale it is planned for: Llama-3-8B in delayed scaling on 64
// DGX H100 GPUs, every policy (its FP8 weight copies, ZeRO-3 left out). The
// same check at Llama-3-70B took 80-100 s here: scripts/planner-sweep.sh
// --fp8 covers the larger models.
TEST(PlannerInvariantsFp8, Llama3_8bOn64H100s) {
  ExpectInvariants("llama-3-8b", "dgx-h100", 64, "delayed");
}

// torchtitan's Llama at the scale it is planned for: Llama-3-8B with
// torchtitan's block and loss (projections "separate", cross_entropy "torch",
// tp 1) on 16384 DGX H100 GPUs, every policy and recompute-sac (its per-op
// checkpointing with holds, and every recompute policy's re-run points), auto
// against them all.
TEST(PlannerInvariantsTorchtitan, Llama3_8bBlockAndLossOn16384H100s) {
  nlohmann::json config =
      *traces::ReadJsonFile(std::string(ConfiguredSourceDir()) + "/configs/models/llama-3-8b.json");
  config["name"] = "llama-3-8b-torchtitan";
  config["projections"] = "separate";
  config["cross_entropy"] = "torch";
  config["tp"] = 1;
  config["sequence_parallel"] = false;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ssdtrain-titan-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "llama-3-8b-torchtitan.json").string();
  std::ofstream(path) << config.dump(1);
  std::vector<std::string> policies = AllPlannerPolicies();
  policies.insert(policies.end() - 1, "recompute-sac");  // before auto
  const SweepCase c{path,
                    std::string(ConfiguredSourceDir()) + "/configs/hardware/dgx-h100.json",
                    16384,
                    policies,
                    kHangGuardSeconds,
                    /*defer_grad_sync=*/false,
                    /*fp8=*/""};
  const SweepOutcome o = CheckPlannerInvariants(c);
  std::filesystem::remove_all(dir);
  for (const std::string& v : o.violations) ADD_FAILURE() << v;
  for (const std::string& l : o.lines) std::cout << l << "\n";
  EXPECT_EQ(o.lines.size(), policies.size());
}

INSTANTIATE_TEST_SUITE_P(GpuPresets, PlannerInvariants, ::testing::ValuesIn(GpuPresets()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace ssdtrain::testing

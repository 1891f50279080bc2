// `ssdtrain plan --policy megatron-offload --offload-modules ...` (Megatron-Core's
// fine-grained activation offloading, sim/policy.h) planned for tiny-moe on the
// CPU backend's calibrated preset with a pinned host pool, and replayed on the
// executor's host-offload path: the plan moves exactly the storages its
// modules' backward ops read (traces::OffloadModuleOf) of at least 1,048,576
// elements, to host memory only; the replay is verified, its host bytes are
// those storages' bytes, and its peaks are the prediction's to the byte. With
// --no-host-offload the policy is refused, and plan --compare shows it.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "sim/policy.h"
#include "tests/cli_util.h"
#include "tests/replay_ranks.h"
#include "traces/io.h"
#include "traces/op_scope.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/uniform_plans.h"

namespace ssdtrain {
namespace {

using testing::RunSsdtrain;

const std::string kShape = " --seq-len 256 --micro-batch 4";
const std::string kModules = "core_attn,attn_proj,expert_fc1,moe_act";

class MegatronOffloadCli : public testing::ReplayRanksTest {
 protected:
  MegatronOffloadCli() : ReplayRanksTest("megatron-offload-cli") {}
  void SetUp() override {
    ReplayRanksTest::SetUp();
    std::ifstream in(File("hw.json"));
    nlohmann::json hw = nlohmann::json::parse(in);
    hw["host_memory"]["pinned_GiB"] = 2;  // cpu-local has no pinned pool
    std::ofstream(File("hw.json")) << hw.dump(2);
  }
};

TEST_F(MegatronOffloadCli, ItsModulesSavedTensorsReplayThroughHostMemory) {
  auto traced =
      RunSsdtrain("trace --model " + Model("tiny-moe") + kShape + " -o " + File("trace.json"));
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  auto trace = traces::ReadTrace(File("trace.json"));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  // The storages the chosen modules' backward ops read, large enough.
  const std::set<std::string_view> modules = {"core_attn", "attn_proj", "expert_fc1", "moe_act"};
  std::set<traces::TensorId> expected;
  int64_t expected_bytes = 0;
  for (traces::TensorId t : traces::OffloadCandidates(*trace)) {
    const traces::Tensor& storage = trace->tensor(trace->StorageOf(t));
    bool read = false;
    for (const traces::Tensor& member : trace->tensors) {
      if (trace->StorageOf(member.id) != storage.id) continue;
      for (traces::OpId c : member.consumers) {
        const traces::Op& op = trace->op(c);
        read = read || (op.phase == traces::Phase::kBackward &&
                        modules.count(traces::OffloadModuleOf(op)) > 0);
      }
    }
    if (read && storage.bytes >= sim::kMegatronMinOffloadElements * 4) {  // fp32
      expected.insert(storage.id);
      expected_bytes += storage.bytes;
    }
  }
  ASSERT_FALSE(expected.empty());

  auto planned =
      RunSsdtrain("plan --model " + Model("tiny-moe") + " --hardware " + File("hw.json") + kShape +
                  " --num-micro-batches 2 --policy megatron-offload --offload-modules " + kModules +
                  " -o " + File("plan.json") + " --prediction " + File("predicted.json"));
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto plan = traces::ReadPlan(File("plan.json"));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->policy, "megatron-offload");
  std::set<traces::TensorId> placed;
  for (const traces::Placement& p : plan->placements) {
    EXPECT_EQ(p.action, traces::TensorAction::kOffloadHost);
    placed.insert(trace->StorageOf(p.tensor));
  }
  EXPECT_EQ(placed, expected);

  auto run = RunSsdtrain("replay --model " + Model("tiny-moe") + " --plan " + File("plan.json") +
                         " --backend cpu --dir " + File("offload") + " --steps 1 --verify -o " +
                         File("run.json"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(File("run.json"));
  const nlohmann::json report = nlohmann::json::parse(in);
  EXPECT_TRUE(report.at("verified").get<bool>());
  // Each of the 2 micro-batches copies those storages out and back once.
  const nlohmann::json& cache = report.at("extra").at("cache");
  EXPECT_EQ(cache.at("bytes_to_host").get<int64_t>(), 2 * expected_bytes) << cache.dump();
  EXPECT_EQ(cache.at("bytes_from_host").get<int64_t>(), 2 * expected_bytes);
  EXPECT_EQ(cache.at("bytes_written").get<int64_t>(), 0);
  std::ifstream pin(File("predicted.json"));
  const nlohmann::json predicted = nlohmann::json::parse(pin);
  EXPECT_EQ(report.at("peak_device_bytes"), predicted.at("peak_gpu_bytes"));
  EXPECT_EQ(report.at("peak_activation_bytes"), predicted.at("peak_activation_bytes"));
}

TEST_F(MegatronOffloadCli, IsRefusedWithoutHostOffloadAndShownByCompare) {
  auto r =
      RunSsdtrain("plan --model " + Model("tiny-moe") + " --hardware " + File("hw.json") + kShape +
                  " --policy megatron-offload --no-host-offload -o " + File("p.json"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--policy megatron-offload: host offload is excluded"), std::string::npos)
      << r.output;
  r = RunSsdtrain("plan --model " + Model("tiny-moe") + " --hardware " + File("hw.json") + kShape +
                  " --offload-modules fused_group_mlp -o " + File("p.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("fused_group_mlp"), std::string::npos) << r.output;
  r = RunSsdtrain("plan --model " + Model("tiny-moe") + " --hardware " + File("hw.json") + kShape +
                  " --compare --json " + File("c.json") + " -o " + File("p.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("megatron-offload"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ssdtrain

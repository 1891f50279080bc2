// recompute-sac, torchtitan's per-op selective checkpointing, on a Llama
// block as torchtitan builds it (projections "separate"): which tensors it
// recomputes, keeps and holds (sim/sac_policy.cc), and the simulator and the
// executor (CPU backend, verified) running its plan alike: each recomputed
// op once a micro-batch, the saved ops never again, the peaks equal to the
// byte. Also the separate block itself (the same GEMM FLOPs as the fused one)
// and the hold's validity rule (traces/storage_plan.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "exec/replay.h"
#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "tests/fast_io_cpu.h"
#include "tests/micro_gpt.h"
#include "tests/micro_trace.h"
#include "tests/recompute_runs.h"
#include "tests/verified_replay.h"
#include "traces/storage_plan.h"

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;

nlohmann::json MicroLlama(const std::string& projections, int64_t zero_stage) {
  nlohmann::json j = testing::MicroGptConfig();
  j["name"] = "micro-llama";
  j["family"] = "llama";
  j["attention"] = "flash";
  j["hidden"] = 256;
  j["heads"] = 4;
  j["seq_len"] = 128;
  j["projections"] = projections;
  j["zero_stage"] = zero_stage;
  return j;
}

traces::Trace Build(const nlohmann::json& j) { return testing::BuildMicroTrace(j); }

const traces::Op* OpNamed(const traces::Trace& t, const std::string& name) {
  for (const traces::Op& op : t.ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

TEST(SeparateProjections, SameGemmFlopsAsTheFusedBlockInTorchtitansOps) {
  const traces::Trace fused = Build(MicroLlama("fused", 0));
  const traces::Trace separate = Build(MicroLlama("separate", 0));
  auto gemm_flops = [](const traces::Trace& t) {
    int64_t flops = 0;
    for (const traces::Op& op : t.ops) flops += op.kind == traces::OpKind::kGemm ? op.flops : 0;
    return flops;
  };
  EXPECT_EQ(gemm_flops(fused), gemm_flops(separate));
  for (const char* name : {"L1.wq", "L1.wk", "L1.wv", "L1.w1", "L1.silu", "L1.w3", "L1.gate_mul",
                           "L1.w2", "L1.ln1.out.grad_sum_q", "L1.ln2.out.grad_sum"}) {
    EXPECT_NE(OpNamed(separate, name), nullptr) << name;
  }
  EXPECT_EQ(OpNamed(separate, "L1.qkv"), nullptr);
  EXPECT_NE(OpNamed(fused, "L1.qkv"), nullptr);
}

TEST(SeparateProjections, RefusedOutsideLlamaAndAboveTp1) {
  nlohmann::json gpt = testing::MicroGptConfig();
  gpt["projections"] = "separate";
  auto bad = models::ModelConfigFromJson(gpt, "micro-gpt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("projections: separate is only modelled for the llama"),
            std::string::npos)
      << bad.status().message();
  nlohmann::json tp2 = MicroLlama("separate", 0);
  tp2["tp"] = 2;
  bad = models::ModelConfigFromJson(tp2, "micro-llama");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tp: projections separate is modelled at tp 1 only"),
            std::string::npos)
      << bad.status().message();
  nlohmann::json unknown = MicroLlama("split", 0);
  bad = models::ModelConfigFromJson(unknown, "micro-llama");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("projections: unknown value \"split\""), std::string::npos)
      << bad.status().message();
}

// torchtitan's rule on its block: of wq, wk, wv, wo, w1, w3, w2 (in forward
// order) the 1st, 3rd, 5th and 7th saved, and the attention; the rest of the
// block recomputed; wq's and w2's outputs, which autograd does not save, held.
TEST(SacPolicy, SavesEveryOtherGemmOfATorchtitanBlock) {
  const traces::Trace t = Build(MicroLlama("separate", 0));
  const sim::HardwareOptions hw = testing::FastIoCpu();
  auto plan = sim::MakeFixedPlan("recompute-sac", t, hw, sim::BasePlan(t));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->policy, "recompute-sac");
  std::set<std::string> recomputed;
  std::map<std::string, std::string> held;  // tensor -> the op it is held until
  for (const traces::Placement& p : plan->placements) {
    const traces::Tensor& tensor = t.tensor(p.tensor);
    if (tensor.layer != 1) continue;
    if (p.action == traces::TensorAction::kRecompute) recomputed.insert(tensor.name);
    if (p.hold_until != traces::kNoOp) held[tensor.name] = t.op(p.hold_until).name;
  }
  EXPECT_EQ(recomputed,
            (std::set<std::string>{"L1.ln1.out", "L1.q_rot", "L1.k_rot", "L1.attn_out.out",
                                   "L1.ln2.out", "L1.silu.out", "L1.w3.out", "L1.act.out"}));
  // The block is re-run whole where backward first reads a recomputed tensor
  // (w2's weight gradient reads the gated product), every recomputed tensor
  // rebuilt there (prefetch_before), as torch.utils.checkpoint re-runs the
  // block at its first unpack. wq's output is held until that re-run, whose
  // rotary reads it; w2's until the block's backward starts (nothing re-reads it).
  const traces::Op* first_backward = nullptr;
  for (const traces::Op& op : t.ops) {
    if (op.layer == 1 && op.phase == traces::Phase::kBackward) {
      first_backward = &op;
      break;
    }
  }
  ASSERT_NE(first_backward, nullptr);
  EXPECT_EQ(held, (std::map<std::string, std::string>{{"L1.wq.out", "L1.w2.wgrad"},
                                                      {"L1.w2.out", first_backward->name}}));
  for (const traces::Placement& p : plan->placements) {
    if (t.tensor(p.tensor).layer != 1 || p.action != traces::TensorAction::kRecompute) continue;
    ASSERT_NE(p.prefetch_before, traces::kNoOp) << t.tensor(p.tensor).name;
    EXPECT_EQ(t.op(p.prefetch_before).name, "L1.w2.wgrad") << t.tensor(p.tensor).name;
  }
}

using SacReplay = testing::VerifiedReplayTest;

// The simulator and the executor run the plan alike: the same recompute runs,
// each op once a micro-batch, wq, wv, w1, w2 and the attention never again;
// the peaks equal to the byte; and the holds cost what they hold (the same
// plan without them re-runs wq for the rotary and holds less).
TEST_F(SacReplay, SimulationAndReplayRunTheSameRecomputeToTheByte) {
  for (int64_t zero_stage : {0, 3}) {
    SCOPED_TRACE("ZeRO " + std::to_string(zero_stage));
    const traces::Trace t = Build(MicroLlama("separate", zero_stage));
    const sim::HardwareOptions hw = testing::FastIoCpu();
    auto plan = sim::MakeFixedPlan("recompute-sac", t, hw, sim::BasePlan(t));
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    sim::SimulateOptions so;
    so.record_timeline = true;
    auto predicted = sim::Simulate(t, *plan, hw, so);
    ASSERT_TRUE(predicted.ok()) << predicted.status().message();
    auto run = exec::Replay(t, *plan, Verified(), "recompute-sac");
    ASSERT_TRUE(run.ok()) << run.status().message();
    EXPECT_TRUE(run->verified);
    const std::map<std::string, int> simulated = testing::SimulatedRecomputes(predicted->timeline);
    EXPECT_EQ(simulated, testing::ReplayedRecomputes(run->timeline));
    for (const auto& [op, runs] : simulated) EXPECT_EQ(runs, 1) << op;
    for (const char* op :
         {"L1.ln1", "L1.wk", "L1.rotary", "L1.proj", "L1.w3", "L1.silu", "L1.gate_mul"}) {
      EXPECT_EQ(simulated.count(op), 1u) << op;
    }
    for (const char* op : {"L1.wq", "L1.wv", "L1.attn.flash", "L1.w1", "L1.w2"}) {
      EXPECT_EQ(simulated.count(op), 0u) << op;
    }
    EXPECT_EQ(run->metrics.peak_activation_bytes, predicted->metrics.peak_activation_bytes);
    EXPECT_EQ(run->metrics.peak_gpu_bytes, predicted->metrics.peak_gpu_bytes);

    traces::Plan unheld = *plan;
    for (traces::Placement& p : unheld.placements) p.hold_until = traces::kNoOp;
    so.record_timeline = true;
    auto without = sim::Simulate(t, unheld, hw, so);
    ASSERT_TRUE(without.ok()) << without.status().message();
    EXPECT_EQ(testing::SimulatedRecomputes(without->timeline).count("L1.wq"), 1u);
    EXPECT_LT(without->metrics.peak_activation_bytes, predicted->metrics.peak_activation_bytes);
  }
  EXPECT_TRUE(fs::is_empty(dir_)) << "offload files left behind";
}

TEST(Hold, OnlyAKeptTensorAfterItsProducerOutsideTheOptimizer) {
  const traces::Trace t = Build(MicroLlama("separate", 0));
  const traces::Op* wq = OpNamed(t, "L1.wq");
  const traces::Op* bwd = OpNamed(t, "L1.attn.flash.bwd");
  ASSERT_NE(wq, nullptr);
  ASSERT_NE(bwd, nullptr);
  const traces::TensorId out = wq->outputs.front();
  auto resolve = [&](traces::Placement p) {
    traces::Plan plan = sim::BasePlan(t);
    plan.placements = {p};
    return traces::ResolvePlan(t, plan, "plan");
  };
  traces::Placement hold{out, traces::TensorAction::kKeep, traces::kNoOp, "", 0, 0};
  hold.hold_until = bwd->id;
  auto held = resolve(hold);
  ASSERT_TRUE(held.ok()) << held.status().message();
  EXPECT_EQ(held->of(out).last_use, bwd->id);
  EXPECT_EQ(held->of(out).hold_until, bwd->id);
  bool listed = false;
  for (int i : held->op_inputs[static_cast<size_t>(bwd->id)]) listed |= i == held->IndexOf(out);
  EXPECT_TRUE(listed);

  traces::Placement early = hold;
  early.hold_until = wq->id;
  auto refused = resolve(early);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("placements[0].hold_until: op " +
                                            std::to_string(wq->id) + " must come after"),
            std::string::npos)
      << refused.status().message();
  traces::Placement optimizer = hold;
  for (const traces::Op& op : t.ops) {
    if (op.phase == traces::Phase::kOptimizer) optimizer.hold_until = op.id;
  }
  refused = resolve(optimizer);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("outside the optimizer phase"), std::string::npos);
  traces::Placement recompute = hold;
  recompute.tensor = OpNamed(t, "L1.rotary")->outputs.front();
  recompute.action = traces::TensorAction::kRecompute;
  refused = resolve(recompute);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("hold_until: only a kept tensor is held"),
            std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace ssdtrain

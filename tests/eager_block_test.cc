// torchtitan's eager block kernels (models: rotary "complex", gqa "repeat",
// norm "eager"; models/README.md, "Block kernels"): apply_rotary_emb through
// fp32 complex numbers, three ops each way per tensor; repeat_kv's copies of
// k and v to every query head before attention; its RMSNorm module, each
// step a kernel. What each op moves, to the byte; the refusals; a
// checkpointed block keeping its input, which nothing else saves, for its
// re-run (sim::SetRerunPoints); and the simulator and the executor (CPU
// backend, verified) running keep, recompute-full and recompute-sac plans of
// such a block alike: the same recompute runs, each op once a micro-batch,
// the peaks equal to the byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
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

namespace ssdtrain {
namespace {

namespace fs = std::filesystem;

// torchtitan's Llama block, small: 4 query heads over 2 key/value heads.
nlohmann::json EagerLlama(const std::string& dtype, int64_t kv_heads, int64_t zero_stage = 0) {
  nlohmann::json j = testing::MicroGptConfig();
  j["name"] = "eager-llama";
  j["family"] = "llama";
  j["attention"] = "flash";
  j["hidden"] = 256;
  j["heads"] = 4;
  j["kv_heads"] = kv_heads;
  j["seq_len"] = 128;
  j["dtype"] = dtype;
  j["projections"] = "separate";
  j["rotary"] = "complex";
  j["gqa"] = "repeat";
  j["norm"] = "eager";
  j["zero_stage"] = zero_stage;
  return j;
}

const traces::Op& OpNamed(const traces::Trace& t, const std::string& name) {
  for (const traces::Op& op : t.ops) {
    if (op.name == name) return op;
  }
  ADD_FAILURE() << "no op " << name;
  return t.ops.front();
}

bool HasOp(const traces::Trace& t, const std::string& name) {
  for (const traces::Op& op : t.ops) {
    if (op.name == name) return true;
  }
  return false;
}

struct Moved {
  int64_t read = 0, written = 0;
  bool operator==(const Moved&) const = default;
};
Moved MovedBy(const traces::Op& op) { return {op.bytes_read, op.bytes_written}; }

// Per element of a bf16 q or k: float() reads 2 and writes 4 bytes, the
// complex product 4 and 4, type_as 4 and 2 (20 bytes where the fused kernel
// moves 4); backward the same in reverse. Each op one tensor, q's and k's.
TEST(EagerBlock, ComplexRotaryMovesTwentyBytesAnElementEachWay) {
  const traces::Trace t = testing::BuildMicroTrace(EagerLlama("bf16", 2));
  const int64_t tokens = 128 * 2;                      // seq_len x micro_batch
  const int64_t nq = tokens * 256, nk = tokens * 128;  // q 4 heads of 64, k 2
  for (const auto& [x, n] : {std::pair<std::string, int64_t>{"q", nq}, {"k", nk}}) {
    SCOPED_TRACE(x);
    const std::string r = "L1.rotary." + x;
    EXPECT_EQ(MovedBy(OpNamed(t, r + ".float")), (Moved{2 * n, 4 * n}));
    EXPECT_EQ(MovedBy(OpNamed(t, r + ".complex_mul")), (Moved{4 * n, 4 * n}));
    EXPECT_EQ(MovedBy(OpNamed(t, r + ".type_as")), (Moved{4 * n, 2 * n}));
    EXPECT_EQ(MovedBy(OpNamed(t, r + ".type_as.bwd")), (Moved{2 * n, 4 * n}));
    EXPECT_EQ(MovedBy(OpNamed(t, r + ".complex_mul.bwd")), (Moved{4 * n, 4 * n}));
    EXPECT_EQ(MovedBy(OpNamed(t, r + ".float.bwd")), (Moved{4 * n, 2 * n}));
    EXPECT_EQ(OpNamed(t, r + ".complex_mul").flops, 3 * n);
  }
  EXPECT_FALSE(HasOp(t, "L1.rotary"));
  // The fused kernel it replaces: 2 bytes read and written an element.
  nlohmann::json fused = EagerLlama("bf16", 2);
  fused.erase("rotary");
  const traces::Trace f = testing::BuildMicroTrace(fused);
  EXPECT_EQ(MovedBy(OpNamed(f, "L1.rotary")), (Moved{2 * (nq + nk), 2 * (nq + nk)}));
  EXPECT_FALSE(HasOp(f, "L1.rotary.q.float"));
}

// In fp32, float() and type_as return the tensor itself: the product alone.
TEST(EagerBlock, ComplexRotaryInFp32IsTheProductAlone) {
  const traces::Trace t = testing::BuildMicroTrace(EagerLlama("fp32", 2));
  const int64_t nq = 128 * 2 * 256;
  EXPECT_EQ(MovedBy(OpNamed(t, "L1.rotary.q.complex_mul")), (Moved{4 * nq, 4 * nq}));
  EXPECT_EQ(MovedBy(OpNamed(t, "L1.rotary.q.complex_mul.bwd")), (Moved{4 * nq, 4 * nq}));
  for (const char* op : {"L1.rotary.q.float", "L1.rotary.q.type_as", "L1.rotary.k.float.bwd",
                         "L1.rotary.k.type_as.bwd"}) {
    EXPECT_FALSE(HasOp(t, op)) << op;
  }
}

// repeat_kv: k and v from 2 heads to 4 before attention, which reads the
// copies; backward sums the copies' gradients back. Nothing to copy at
// kv_heads = heads (torchtitan returns the tensor itself).
TEST(EagerBlock, RepeatKvCopiesKeysAndValuesToEveryQueryHead) {
  const traces::Trace t = testing::BuildMicroTrace(EagerLlama("bf16", 2));
  const int64_t kv = 128 * 2 * 128 * 2, full = 2 * kv;  // bf16 bytes of k (or v)
  EXPECT_EQ(MovedBy(OpNamed(t, "L1.attn.repeat_kv")), (Moved{2 * kv, 2 * full}));
  EXPECT_EQ(MovedBy(OpNamed(t, "L1.attn.repeat_kv.bwd")), (Moved{2 * full, 2 * kv}));
  const traces::Op& flash = OpNamed(t, "L1.attn.flash");
  ASSERT_GE(flash.inputs.size(), 3u);
  EXPECT_EQ(t.tensor(flash.inputs[1]).name, "L1.k_rep");
  EXPECT_EQ(t.tensor(flash.inputs[1]).bytes, full);
  EXPECT_EQ(t.tensor(flash.inputs[2]).bytes, full);
  // The attention's FLOPs are the query heads', as without the copies.
  nlohmann::json native = EagerLlama("bf16", 2);
  native.erase("gqa");
  const traces::Trace n = testing::BuildMicroTrace(native);
  EXPECT_EQ(flash.flops, OpNamed(n, "L1.attn.flash").flops);
  EXPECT_FALSE(HasOp(n, "L1.attn.repeat_kv"));
  const traces::Trace mha = testing::BuildMicroTrace(EagerLlama("bf16", 4));
  EXPECT_FALSE(HasOp(mha, "L1.attn.repeat_kv"));
  EXPECT_FALSE(HasOp(mha, "L1.attn.repeat_kv.bwd"));
}

// torchtitan's RMSNorm, per element of a bf16 input: forward x.float() (2 read,
// 4 written), the square (4, 4), the mean (4 read), the product (4, 4),
// type_as (4, 2) and the weight's product (2, 2): 36 bytes where the fused op
// moves 4; backward 92 more, the residual's gradient added after; in fp32
// without the casts. It saves the fp32 copy, the rsqrt and the cast rows, not
// its input.
TEST(EagerBlock, EagerRmsNormRunsEachStepAsAKernel) {
  const traces::Trace t = testing::BuildMicroTrace(EagerLlama("bf16", 2));
  const int64_t n = 128 * 2 * 256, rows = 128 * 2;
  const auto moved = [&](const std::string& step) { return MovedBy(OpNamed(t, "L1.ln1." + step)); };
  EXPECT_EQ(moved("float"), (Moved{2 * n, 4 * n}));
  EXPECT_EQ(moved("pow"), (Moved{4 * n, 4 * n}));
  EXPECT_EQ(moved("mean"), (Moved{4 * n, 4 * rows}));
  EXPECT_EQ(moved("rsqrt"), (Moved{4 * rows, 4 * rows}));
  EXPECT_EQ(moved("mul"), (Moved{4 * n + 4 * rows, 4 * n}));
  EXPECT_EQ(moved("type_as"), (Moved{4 * n, 2 * n}));
  EXPECT_EQ(moved("scale"), (Moved{2 * n + 2 * 256, 2 * n}));
  int64_t backward = 0;
  for (const traces::Op& op : t.ops) {
    // (L1.ln1.out.grad_sum_q and _k sum the projections' input gradients.)
    if (op.phase == traces::Phase::kBackward && op.name.starts_with("L1.ln1.") &&
        !op.name.starts_with("L1.ln1.out.") && op.name != "L1.ln1.in.grad_add") {
      backward += op.bytes_read + op.bytes_written;
    }
  }
  // The per-row values (rsqrt, its gradient) and the weight add a few bytes.
  EXPECT_GE(backward, 92 * n);
  EXPECT_LT(backward, 92 * n + 64 * rows + 16 * 256);
  EXPECT_EQ(MovedBy(OpNamed(t, "L1.ln1.in.grad_add")), (Moved{4 * n, 2 * n}));
  const traces::Op& last = OpNamed(t, "L1.ln1.float.bwd");
  EXPECT_EQ(MovedBy(last), (Moved{4 * n, 2 * n}));
  // Backward reads the fp32 copy, not the input.
  const traces::TensorId input = OpNamed(t, "L1.ln1.float").inputs[0];
  for (traces::OpId c : t.tensor(input).consumers) {
    EXPECT_NE(t.op(c).phase, traces::Phase::kBackward) << t.op(c).name;
  }
  const traces::Trace fp32 = testing::BuildMicroTrace(EagerLlama("fp32", 2));
  EXPECT_FALSE(HasOp(fp32, "L1.ln1.float"));
  EXPECT_FALSE(HasOp(fp32, "L1.ln1.type_as.bwd"));
  EXPECT_EQ(MovedBy(OpNamed(fp32, "L1.ln1.pow")), (Moved{4 * n, 4 * n}));
  nlohmann::json fused = EagerLlama("bf16", 2);
  fused.erase("norm");
  EXPECT_FALSE(HasOp(testing::BuildMicroTrace(fused), "L1.ln1.float"));
}

// recompute-full on the eager block: the block's input, which backward never
// reads (the norm saves its fp32 copy), is kept until the block's re-run
// point, as a checkpoint saves its inputs; without that the re-run would
// rebuild it by re-running the block before, and that one the one before.
TEST(EagerBlock, ACheckpointedBlockHoldsItsInputForItsReRun) {
  const traces::Trace t = testing::BuildMicroTrace(EagerLlama("bf16", 2));
  auto plan = sim::MakeFixedPlan("recompute-full", t, testing::FastIoCpu(), sim::BasePlan(t));
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const traces::TensorId input = t.StorageOf(OpNamed(t, "L1.ln1.float").inputs[0]);
  EXPECT_EQ(t.tensor(input).name, "L0.mlp_out.out");
  traces::OpId held = traces::kNoOp, point = traces::kNoOp;
  for (const traces::Placement& p : plan->placements) {
    if (p.tensor == input) held = p.hold_until;
    if (p.action == traces::TensorAction::kRecompute && t.tensor(p.tensor).layer == 1) {
      point = p.prefetch_before;
    }
  }
  ASSERT_NE(point, traces::kNoOp);
  EXPECT_EQ(held, point);
}

TEST(EagerBlock, RefusedOutsideTheLlamaBlockAndForUnknownValues) {
  const auto message = [](const nlohmann::json& j) {
    auto c = models::ModelConfigFromJson(j, "m.json");
    return c.ok() ? std::string("accepted") : c.status().message();
  };
  nlohmann::json gpt = testing::MicroGptConfig();
  gpt["rotary"] = "complex";
  EXPECT_EQ(message(gpt), "m.json: rotary: complex is only modelled for the llama family, not gpt");
  gpt.erase("rotary");
  gpt["gqa"] = "repeat";
  EXPECT_EQ(message(gpt), "m.json: gqa: repeat is only modelled for the llama family, not gpt");
  gpt.erase("gqa");
  gpt["norm"] = "eager";
  EXPECT_EQ(message(gpt), "m.json: norm: eager is only modelled for the llama family, not gpt");
  nlohmann::json qk = EagerLlama("bf16", 2);
  qk["qk_norm"] = true;
  EXPECT_EQ(message(qk),
            "m.json: norm: eager is not modelled with qk_norm (the per-head norms of q and k run "
            "fused)");
  nlohmann::json unknown = EagerLlama("bf16", 2);
  unknown["rotary"] = "halves";
  EXPECT_NE(message(unknown).find("m.json: rotary: unknown value \"halves\", expected fused or "
                                  "complex"),
            std::string::npos)
      << message(unknown);
  unknown = EagerLlama("bf16", 2);
  unknown["gqa"] = "expand";
  EXPECT_NE(message(unknown).find("m.json: gqa: unknown value \"expand\", expected native or "
                                  "repeat"),
            std::string::npos)
      << message(unknown);
  nlohmann::json mla = EagerLlama("bf16", 4);
  mla["kv_lora_rank"] = 64;
  mla["qk_nope_head_dim"] = 32;
  mla["qk_rope_head_dim"] = 32;
  mla["v_head_dim"] = 64;
  EXPECT_NE(message(mla).find("rotary: complex is not modelled with multi-head latent attention"),
            std::string::npos)
      << message(mla);
}

// Written back only where not the default, and read back equal.
TEST(EagerBlock, FieldsRoundTrip) {
  auto c = models::ModelConfigFromJson(EagerLlama("bf16", 2), "eager-llama");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const nlohmann::json j = models::ToJson(*c);
  EXPECT_EQ(j.at("rotary"), "complex");
  EXPECT_EQ(j.at("gqa"), "repeat");
  EXPECT_EQ(j.at("norm"), "eager");
  auto back = models::ModelConfigFromJson(j, "eager-llama");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->rotary, "complex");
  EXPECT_EQ(back->gqa, "repeat");
  EXPECT_EQ(back->norm, "eager");
  auto plain = models::ModelConfigFromJson(testing::MicroGptConfig(), "micro-gpt");
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_FALSE(models::ToJson(*plain).contains("rotary"));
  EXPECT_FALSE(models::ToJson(*plain).contains("gqa"));
  EXPECT_FALSE(models::ToJson(*plain).contains("norm"));
}

using EagerReplay = testing::VerifiedReplayTest;

// The simulator and the executor run each policy alike on the eager block:
// the same recompute runs, each op at most once a micro-batch (a re-run
// rebuilds the rotary's and the copies' chains once), the peaks equal to the
// byte; in fp32 and bf16, without and with ZeRO-3.
TEST_F(EagerReplay, SimulationAndReplayRunEachPolicyAlikeToTheByte) {
  for (const char* dtype : {"fp32", "bf16"}) {
    for (int64_t zero_stage : {0, 3}) {
      const traces::Trace t = testing::BuildMicroTrace(EagerLlama(dtype, 2, zero_stage));
      const sim::HardwareOptions hw = testing::FastIoCpu();
      for (const char* policy : {"keep", "recompute-full", "recompute-sac"}) {
        SCOPED_TRACE(std::string(dtype) + ", ZeRO " + std::to_string(zero_stage) + ", " + policy);
        auto plan = sim::MakeFixedPlan(policy, t, hw, sim::BasePlan(t));
        ASSERT_TRUE(plan.ok()) << plan.status().message();
        sim::SimulateOptions so;
        so.record_timeline = true;
        auto predicted = sim::Simulate(t, *plan, hw, so);
        ASSERT_TRUE(predicted.ok()) << predicted.status().message();
        auto run = exec::Replay(t, *plan, Verified(), policy);
        ASSERT_TRUE(run.ok()) << run.status().message();
        EXPECT_TRUE(run->verified);
        const std::map<std::string, int> simulated =
            testing::SimulatedRecomputes(predicted->timeline);
        EXPECT_EQ(simulated, testing::ReplayedRecomputes(run->timeline));
        for (const auto& [op, runs] : simulated) EXPECT_EQ(runs, 1) << op;  // one micro-batch
        if (std::string(policy) != "keep") {
          EXPECT_EQ(simulated.count("L1.rotary.k.complex_mul"), 1u);
          EXPECT_EQ(simulated.count("L1.attn.repeat_kv"), 1u);
          EXPECT_EQ(simulated.count("L1.ln1.mul"), 1u);
          EXPECT_EQ(simulated.count("L1.ln1.float"), std::string(dtype) == "bf16" ? 1u : 0u);
          // The block's input is held, not rebuilt by re-running block 0.
          EXPECT_EQ(simulated.count("L0.mlp_out.residual_add"), 0u);
        }
        EXPECT_EQ(run->metrics.peak_activation_bytes, predicted->metrics.peak_activation_bytes);
        EXPECT_EQ(run->metrics.peak_gpu_bytes, predicted->metrics.peak_gpu_bytes);
      }
    }
  }
  EXPECT_TRUE(fs::is_empty(dir_)) << "offload files left behind";
}

}  // namespace
}  // namespace ssdtrain

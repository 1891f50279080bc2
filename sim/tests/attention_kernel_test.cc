// A fused attention kernel's call (traces::AttentionCall) and its price on the
// hardware's curves for the kernel the model names (ModelConfig::attention_kernel,
// gpu.attention_kernels): which calls the builder marks with which mask, that
// they and the kernel survive JSON and Chakra and are checked on read, what
// each mask costs on the DGX H100 preset (sim/op_cost.h), and that a step on
// a kernel differs from one without it by its attention ops' times alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "models/build_trace.h"
#include "models/model_config.h"
#include "sim/hardware.h"
#include "sim/op_cost.h"
#include "sim/simulate.h"
#include "sim/tests/model_traces.h"
#include "traces/chakra.h"
#include "traces/duration.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/validate.h"

namespace ssdtrain::sim {
namespace {

using traces::AttentionMask;
using traces::Op;
using traces::OpKind;

HardwareOptions H100() { return testing::LoadPreset("dgx-h100"); }

// A two-block model of `family` with flash attention, bf16, on kernel `kernel`.
models::ModelConfig Config(const std::string& family, const std::string& kernel = "") {
  models::ModelConfig c;
  c.name = "attention-kernel";
  c.family = family;
  c.hidden = 2048;
  c.heads = 16;
  c.layers = 2;
  if (family == "t5") {
    c.layers = 4;
    c.encoder_layers = 2;
  }
  c.vocab = 32000;
  c.seq_len = 4096;
  c.micro_batch = 1;
  c.attention = "flash";
  c.attention_kernel = kernel;
  c.dtype = "bf16";
  return c;
}

traces::Trace Build(const models::ModelConfig& c) { return testing::BuildModel(c); }

const Op& Named(const traces::Trace& t, const std::string& name) {
  return testing::OpNamed(t, name);
}

// The mask of each fused attention op, by name.
std::vector<std::pair<std::string, AttentionMask>> Calls(const traces::Trace& t) {
  std::vector<std::pair<std::string, AttentionMask>> calls;
  for (const Op& op : t.ops) {
    if (op.kind != OpKind::kAttention) continue;
    EXPECT_TRUE(op.attention.has_value()) << op.name;
    if (op.attention) calls.emplace_back(op.name, op.attention->mask);
  }
  return calls;
}

TEST(AttentionKernelTrace, DecodersAreCausalEncodersAndCrossAttentionAreNot) {
  for (const std::string family : {"gpt", "llama"}) {
    const traces::Trace t = Build(Config(family));
    const std::vector<std::pair<std::string, AttentionMask>> calls = Calls(t);
    ASSERT_EQ(calls.size(), 4u) << family;  // two blocks, forward and backward
    for (const auto& [name, mask] : calls) EXPECT_EQ(mask, AttentionMask::kCausal) << name;
    EXPECT_EQ(Named(t, "L0.attn.flash").attention->seq_len, 4096);
  }
  for (const auto& [name, mask] : Calls(Build(Config("bert")))) {
    EXPECT_EQ(mask, AttentionMask::kFull) << name;
  }
  // T5: the encoder's self-attention sees every token, the decoder's the
  // ones before each query, its cross-attention every encoder output.
  const traces::Trace t5 = Build(Config("t5"));
  EXPECT_EQ(Named(t5, "L0.attn.flash").attention->mask, AttentionMask::kFull);
  EXPECT_EQ(Named(t5, "L0.attn.flash.bwd").attention->mask, AttentionMask::kFull);
  EXPECT_EQ(Named(t5, "L2.attn.flash").attention->mask, AttentionMask::kCausal);
  EXPECT_EQ(Named(t5, "L2.attn.flash.bwd").attention->mask, AttentionMask::kCausal);
  EXPECT_EQ(Named(t5, "L2.cross_attn.flash").attention->mask, AttentionMask::kFull);
  EXPECT_EQ(Named(t5, "L2.cross_attn.flash.bwd").attention->mask, AttentionMask::kFull);
}

TEST(AttentionKernelTrace, ContextParallelismsRingIsCausalOnItsOwnChunksAndHalfElsewhere) {
  models::ModelConfig c = Config("llama");
  c.cp = 4;
  const traces::Trace t = Build(c);
  for (const std::string step : {"L0.attn.flash.step", "L0.attn.flash.bwd.step"}) {
    EXPECT_EQ(Named(t, step + "0").attention->mask, AttentionMask::kCausal);
    for (int i = 1; i < 4; ++i) {
      const Op& op = Named(t, step + std::to_string(i));
      EXPECT_EQ(op.attention->mask, AttentionMask::kHalf) << op.name;
      EXPECT_EQ(op.attention->seq_len, 1024) << op.name;  // the rank's s / cp
    }
  }
}

TEST(AttentionKernelTrace, StandardAttentionHasNoKernelAndAKernelNeedsFlash) {
  models::ModelConfig c = Config("gpt");
  c.attention = "standard";
  for (const Op& op : Build(c).ops) EXPECT_FALSE(op.attention.has_value()) << op.name;
  c.attention_kernel = "flash2";
  const Result<traces::Trace> refused = models::BuildTrace(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("attention_kernel"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(models::ToJson(Config("gpt", "cudnn")).at("attention_kernel"), "cudnn");
  EXPECT_FALSE(models::ToJson(Config("gpt")).contains("attention_kernel"));
}

TEST(AttentionKernelTrace, TheCallAndTheKernelSurviveJsonAndChakraAndAreCheckedOnRead) {
  models::ModelConfig c = Config("llama", "flash2");
  c.cp = 2;
  const traces::Trace t = Build(c);
  EXPECT_EQ(t.header.attention_kernel, "flash2");
  const Result<traces::Trace> json = traces::TraceFromJson(traces::ToJson(t), "mem.json");
  const Result<traces::Trace> chakra = traces::TraceFromChakra(traces::ToChakra(t), "mem.et");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  ASSERT_TRUE(chakra.ok()) << chakra.status().ToString();
  for (const traces::Trace* back : {&*json, &*chakra}) {
    EXPECT_EQ(back->header.attention_kernel, "flash2");
    ASSERT_EQ(back->ops.size(), t.ops.size());
    for (size_t i = 0; i < t.ops.size(); ++i) {
      EXPECT_EQ(back->ops[i].attention, t.ops[i].attention) << t.ops[i].name;
    }
  }
  // Neither changes an op or a tensor: plans made without them stay valid.
  models::ModelConfig plain = Config("llama");
  plain.cp = 2;
  EXPECT_EQ(traces::Fingerprint(t), traces::Fingerprint(Build(plain)));

  const size_t qkv = static_cast<size_t>(Named(t, "L0.qkv").id);
  const size_t flash = static_cast<size_t>(Named(t, "L0.attn.flash.step0").id);
  nlohmann::json j = traces::ToJson(t);
  j["ops"][qkv]["attention"] = {{"seq_len", 4096}, {"mask", "causal"}};
  Result<traces::Trace> bad = traces::TraceFromJson(j, "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("only a fused attention op"), std::string::npos)
      << bad.status().ToString();
  j = traces::ToJson(t);
  j["ops"][flash]["attention"]["seq_len"] = 0;
  bad = traces::TraceFromJson(j, "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("attention.seq_len"), std::string::npos);
  j = traces::ToJson(t);
  j["ops"][flash]["attention"]["mask"] = "diagonal";
  bad = traces::TraceFromJson(j, "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("full, causal, half"), std::string::npos);
  j = traces::ToJson(t);
  j["header"]["attention"] = "standard";
  bad = traces::TraceFromJson(j, "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("header.attention_kernel"), std::string::npos)
      << bad.status().ToString();
}

// Each mask on flash-attention 2's curves of the DGX H100 preset (the
// FlashAttention-3 paper's H100 figures, sim/README.md): the pairs it computes
// at the kernel's rate for its length and direction.
TEST(AttentionKernelCost, EachMaskComputesItsPairsAtItsCurvesRate) {
  const HardwareOptions hw = H100();
  const AttentionKernelCurves& fa2 = hw.gpu.attention_kernels.at("flash2");
  const OpCostModel cost(hw, Build(Config("llama", "flash2")).header);
  const double peak = hw.gpu.peak_tflops_bf16 * 1e12 * hw.gpu.clock_scale;
  const int64_t overhead = traces::CeilSecondsToNs(hw.gpu.op_overhead_us * 1e-6);
  Op op;
  op.kind = OpKind::kAttention;
  op.flops = int64_t{4} << 40;  // compute-bound at any of these rates
  auto ns = [&](traces::Phase phase, AttentionMask mask, int64_t seq) {
    op.phase = phase;
    op.attention = traces::AttentionCall{seq, mask};
    return cost.RooflineNs(op) - overhead;
  };
  auto expect = [&](double flops, const std::vector<EfficiencyPoint>& curve, double seq) {
    return traces::CeilSecondsToNs(flops / (peak * Efficiency(curve, seq)));
  };
  const double f = static_cast<double>(op.flops);
  using traces::Phase;
  EXPECT_EQ(ns(Phase::kForward, AttentionMask::kFull, 4096), expect(f, fa2.forward, 4096));
  EXPECT_EQ(ns(Phase::kForward, AttentionMask::kCausal, 4096),
            expect(f / 2, fa2.forward_causal, 4096));
  EXPECT_EQ(ns(Phase::kForward, AttentionMask::kHalf, 4096), expect(f / 2, fa2.forward, 4096));
  EXPECT_EQ(ns(Phase::kBackward, AttentionMask::kFull, 4096), expect(f, fa2.backward, 4096));
  EXPECT_EQ(ns(Phase::kBackward, AttentionMask::kCausal, 2048),
            expect(f / 2, fa2.backward_causal, 2048));
  // The FA3 paper's figure at 4k: 319 TFLOP/s on the pairs a causal forward computes.
  EXPECT_NEAR(f / 2 /
                  (static_cast<double>(ns(Phase::kForward, AttentionMask::kCausal, 4096)) * 1e-9) /
                  1e12,
              319.0, 0.5);
  // Between two measured lengths: log-linear, clamped outside.
  EXPECT_EQ(ns(Phase::kForward, AttentionMask::kFull, 100), expect(f, fa2.forward, 512));
  EXPECT_EQ(ns(Phase::kForward, AttentionMask::kFull, 1 << 20), expect(f, fa2.forward, 16384));
  // Without a kernel, or on an op without a call: the attention curve, by FLOPs.
  const OpCostModel plain(hw, Build(Config("llama")).header);
  const double by_flops = f / (peak * Efficiency(hw.gpu.attention_efficiency, f));
  EXPECT_EQ(plain.RooflineNs(op) - overhead, traces::CeilSecondsToNs(by_flops));
  op.attention.reset();
  EXPECT_EQ(cost.RooflineNs(op) - overhead, traces::CeilSecondsToNs(by_flops));
}

// A kernel whose curves stop at the forward: its backward runs on them, and a
// causal call without a causal curve computes every counted pair (an upper
// bound), never half at the unmasked rate.
TEST(AttentionKernelCost, MissingCurvesFallBackToTheForwardAndToEveryPair) {
  HardwareOptions hw = H100();
  hw.gpu.attention_kernels["plain"] = AttentionKernelCurves{{{1024, 0.5}, {8192, 0.8}}, {}, {}, {}};
  traces::Header h = Build(Config("llama")).header;
  h.attention_kernel = "plain";
  const OpCostModel cost(hw, h);
  const double peak = hw.gpu.peak_tflops_bf16 * 1e12 * hw.gpu.clock_scale;
  const int64_t overhead = traces::CeilSecondsToNs(hw.gpu.op_overhead_us * 1e-6);
  Op op;
  op.kind = OpKind::kAttention;
  op.flops = int64_t{1} << 40;
  const std::vector<EfficiencyPoint>& forward = hw.gpu.attention_kernels.at("plain").forward;
  for (const traces::Phase phase : {traces::Phase::kForward, traces::Phase::kBackward}) {
    op.phase = phase;
    op.attention = traces::AttentionCall{2048, AttentionMask::kCausal};
    EXPECT_EQ(cost.RooflineNs(op) - overhead,
              traces::CeilSecondsToNs(static_cast<double>(op.flops) /
                                      (peak * Efficiency(forward, 2048))));
  }
  EXPECT_TRUE(CheckAttentionKernel(hw, "plain").ok());
  EXPECT_TRUE(CheckAttentionKernel(hw, "").ok());
  const Status missing = CheckAttentionKernel(hw, "flash9");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("\"flash9\""), std::string::npos) << missing.ToString();
  EXPECT_NE(missing.message().find("cudnn, flash2, flash3, plain"), std::string::npos)
      << missing.ToString();
}

TEST(AttentionKernelHardware, CurvesRoundTripAndBadOnesAreRefusedByField) {
  const HardwareOptions hw = H100();
  ASSERT_EQ(hw.gpu.attention_kernels.size(), 3u);
  for (const auto& [name, curves] : hw.gpu.attention_kernels) {
    EXPECT_EQ(curves.forward.size(), 6u) << name;
    EXPECT_EQ(curves.forward_causal.size(), 6u) << name;
    EXPECT_EQ(curves.backward.size(), 6u) << name;
    EXPECT_EQ(curves.backward_causal.size(), 6u) << name;
  }
  const nlohmann::json j = ToJson(hw);
  const Result<HardwareOptions> back = HardwareFromJson(j, "back.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), j);

  auto refused = [&](const std::string& pointer, const nlohmann::json& value) {
    nlohmann::json bad = j;
    bad[nlohmann::json::json_pointer(pointer)] = value;
    const Result<HardwareOptions> r = HardwareFromJson(bad, "bad.json");
    EXPECT_FALSE(r.ok()) << pointer;
    return r.ok() ? std::string() : r.status().ToString();
  };
  EXPECT_NE(refused("/gpu/attention_kernels/flash2/forward/1/seq_len", 256)
                .find("gpu.attention_kernels.flash2.forward[1].seq_len"),
            std::string::npos);
  EXPECT_NE(refused("/gpu/attention_kernels/flash2/backward/0/efficiency", 1.5).find("(0, 1]"),
            std::string::npos);
  EXPECT_NE(
      refused("/gpu/attention_kernels/flash2/sideways", nlohmann::json::array()).find("sideways"),
      std::string::npos);
  nlohmann::json no_forward = j;
  no_forward["gpu"]["attention_kernels"]["flash2"].erase("forward");
  const Result<HardwareOptions> r = HardwareFromJson(no_forward, "bad.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("gpu.attention_kernels.flash2.forward"), std::string::npos)
      << r.status().ToString();
}

// A step on flash-attention 2's curves is longer than one on the preset's one
// attention figure by what its attention ops take longer, and holds the same
// memory (one micro-batch, pp 1, keep: every op on the compute stream once).
TEST(AttentionKernelCost, AStepDiffersByItsAttentionOpsAlone) {
  const HardwareOptions hw = H100();
  const traces::Trace on_kernel = Build(Config("llama", "flash2"));
  const traces::Trace plain = Build(Config("llama"));
  const Result<Prediction> p_kernel = Simulate(on_kernel, traces::PlanTemplate(on_kernel), hw);
  const Result<Prediction> p_plain = Simulate(plain, traces::PlanTemplate(plain), hw);
  ASSERT_TRUE(p_kernel.ok()) << p_kernel.status().ToString();
  ASSERT_TRUE(p_plain.ok()) << p_plain.status().ToString();
  const OpCostModel kernel_cost(hw, on_kernel.header), plain_cost(hw, plain.header);
  int64_t longer = 0;
  for (const Op& op : on_kernel.ops) longer += kernel_cost.OpTimeNs(op) - plain_cost.OpTimeNs(op);
  EXPECT_GT(longer, 0);
  EXPECT_EQ(p_kernel->metrics.step_time_ns - p_plain->metrics.step_time_ns, longer);
  EXPECT_EQ(p_kernel->metrics.peak_gpu_bytes, p_plain->metrics.peak_gpu_bytes);

  traces::Trace unknown = on_kernel;
  unknown.header.attention_kernel = "flash9";
  const Result<Prediction> refused = Simulate(unknown, traces::PlanTemplate(unknown), hw);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("attention_kernels"), std::string::npos);
}

}  // namespace
}  // namespace ssdtrain::sim

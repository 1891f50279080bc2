// The SMs a NCCL collective's kernel holds while it runs (the collective_sms
// of the tier its group sits on; sim/op_cost.h, OpTimeBesideNs and
// CollectiveSms): a GEMM beside it runs its tiles in waves of the SMs left,
// an attention kernel at their share, a memory-bound op as before; the stage
// simulator runs compute ops beside ZeRO's gathers and reduce-scatters at
// that rate while they run, and at full speed after, and beside the cp
// ring's send/recv steps at full speed; the last backward beside the
// data-parallel gradient buckets ends later by what they cost it.
#include <gtest/gtest.h>

#include <string>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "sim/op_cost.h"
#include "sim/policy.h"
#include "sim/simulate.h"
#include "sim/stage_sim.h"
#include "sim/tests/model_traces.h"
#include "sim/tests/test_traces.h"
#include "traces/collective_kind.h"
#include "traces/duration.h"

namespace ssdtrain::sim {
namespace {

// An A100-like GPU: 108 SMs, 16 held by a collective over the network (24
// inside a domain), efficiency 1, no per-op overhead; every GPU a domain of
// its own (TestHardware).
HardwareOptions A100Like(int collective_sms = 16) {
  HardwareOptions hw = testing::TestHardware(2, 2, 20);
  hw.gpu.peak_tflops_fp16 = 312;
  hw.gpu.peak_tflops_bf16 = 312;
  hw.gpu.memory_GBps = 2039;
  hw.gpu.op_overhead_us = 0;
  hw.gpu.sm_count = 108;
  hw.interconnect.scale_out.collective_sms = collective_sms;
  hw.interconnect.scale_up.collective_sms = collective_sms > 0 ? 24 : 0;
  hw.gpu.gemm_efficiency.clear();
  hw.gpu.attention_efficiency.clear();
  hw.gpu.memory_efficiency.clear();
  return hw;
}

traces::Op Gemm(int64_t m, int64_t n, int64_t k) {
  traces::Op op;
  op.kind = traces::OpKind::kGemm;
  op.gemm = traces::GemmDims{m, n, k, 1};
  op.flops = 2 * m * n * k;
  op.bytes_read = (m * k + k * n) * 2;
  op.bytes_written = m * n * 2;
  return op;
}

double Ratio(const OpCostModel& cost, const traces::Op& op, int collectives) {
  return static_cast<double>(cost.OpTimeBesideNs(op, collectives)) /
         static_cast<double>(cost.OpTimeNs(op));
}

TEST(CollectiveSms, AGemmOfOneFullWaveTakesTwoBesideACollective) {
  // 9 × 12 tiles of 256 × 128 (or 18 × 6 the other way round): 108, one wave
  // on 108 SMs, two on the 92 a collective leaves.
  const HardwareOptions hw = A100Like();  // the model keeps a reference
  const OpCostModel cost(hw, 1, "bf16");
  EXPECT_NEAR(Ratio(cost, Gemm(2304, 1536, 16384), 16), 2.0, 1e-6);
}

TEST(CollectiveSms, AGemmOfManyWavesRunsItsTilesInWavesOfTheSmsLeft) {
  // 8192²: 2048 tiles, 19 waves of 108, 23 of 92, 27 of 76.
  const HardwareOptions hw = A100Like();  // the model keeps a reference
  const OpCostModel cost(hw, 1, "bf16");
  const traces::Op gemm = Gemm(8192, 8192, 8192);
  EXPECT_NEAR(Ratio(cost, gemm, 16), 23.0 / 19.0, 1e-6);
  EXPECT_NEAR(Ratio(cost, gemm, 32), 27.0 / 19.0, 1e-6);
}

TEST(CollectiveSms, AttentionRunsAtTheSmsShareAndMemoryBoundOpsAsBefore) {
  const HardwareOptions hw = A100Like();  // the model keeps a reference
  const OpCostModel cost(hw, 1, "bf16");
  traces::Op attention;
  attention.kind = traces::OpKind::kAttention;
  attention.flops = int64_t{1} << 40;
  attention.bytes_read = int64_t{1} << 20;
  EXPECT_NEAR(Ratio(cost, attention, 16), 108.0 / 92.0, 1e-6);
  traces::Op add;
  add.kind = traces::OpKind::kElementwise;
  add.bytes_read = int64_t{1} << 30;
  add.bytes_written = int64_t{1} << 29;
  EXPECT_EQ(cost.OpTimeBesideNs(add, 16), cost.OpTimeNs(add));
  // No SMs held: the same time.
  EXPECT_EQ(cost.OpTimeBesideNs(Gemm(2304, 1536, 16384), 0),
            cost.OpTimeNs(Gemm(2304, 1536, 16384)));
}

TEST(CollectiveSms, AMeasuredTimeIsScaledByTheRooflinesRatio) {
  const HardwareOptions hw = A100Like();  // the model keeps a reference
  const OpCostModel cost(hw, 1, "bf16");
  traces::Op gemm = Gemm(2304, 1536, 16384);
  gemm.measured_ns = 1000000;
  EXPECT_EQ(cost.OpTimeNs(gemm), 1000000);
  EXPECT_EQ(cost.OpTimeBesideNs(gemm, 16), 2000000);
}

TEST(CollectiveSms, APresetHoldingHalfItsSmsOrMoreIsRefused) {
  const HardwareOptions a100 = testing::LoadPreset("dgx-a100-80gb");
  EXPECT_EQ(a100.interconnect.scale_up.collective_sms, 24);
  EXPECT_EQ(a100.interconnect.scale_out.collective_sms, 16);
  nlohmann::json j = ToJson(a100);
  EXPECT_EQ(j["interconnect"]["scale_out"]["collective_sms"], 16);
  Result<HardwareOptions> again = HardwareFromJson(j, "x.json");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->interconnect.scale_up.collective_sms, 24);
  j["interconnect"]["scale_out"]["collective_sms"] = 54;
  Result<HardwareOptions> bad = HardwareFromJson(j, "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("x.json: interconnect.scale_out.collective_sms"),
            std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("below half of gpu.sm_count (108)"), std::string::npos)
      << bad.status().message();
  // Without an SM count there is nothing to take them from.
  j["interconnect"]["scale_out"]["collective_sms"] = 16;
  j["gpu"].erase("sm_count");
  Result<HardwareOptions> no_count = HardwareFromJson(j, "x.json");
  ASSERT_FALSE(no_count.ok());
  EXPECT_NE(no_count.status().message().find("interconnect.scale_up.collective_sms: needs "
                                             "gpu.sm_count"),
            std::string::npos)
      << no_count.status().message();
}

// Llama-3-8B's shapes at 4 layers, sequence 512, ZeRO-3 over 8 ranks, or at
// 2 layers, sequence 8192, cp 2 (the ring).
traces::Trace Llama(int64_t zero_stage, int64_t cp, int64_t dp = 0) {
  Result<models::ModelConfig> c = models::LoadModelConfig(std::string(ConfiguredSourceDir()) +
                                                          "/configs/models/llama-3-8b.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return {};
  models::ModelConfig m = *c;
  m.layers = cp > 1 ? 2 : 4;
  m.seq_len = cp > 1 ? 8192 : 512;
  m.tp = 1;
  m.sequence_parallel = false;
  m.cp = cp;
  m.attention = "flash";
  m.dp = dp > 0 ? dp : zero_stage > 0 ? 8 : 1;
  m.zero_stage = zero_stage;
  return testing::BuildModel(m);
}

int64_t ComputeNs(const traces::Trace& t, const HardwareOptions& hw) {
  const OpCostModel cost(hw, t.header);
  int64_t ns = 0;
  for (const traces::Op& op : t.ops) ns += op.stream == 0 ? cost.OpTimeNs(op) : 0;
  return ns;
}

TEST(CollectiveSms, ComputeBesideZerosCollectivesRunsSlowerByWhatTheyHold) {
  // 400 GB/s: the step not bound by the link (at 100 GB/s compute waits
  // for every gather, and the SMs held cost it nothing).
  constexpr double kLinkGBps = 400;
  HardwareOptions with = A100Like();
  with.interconnect.scale_out.GBps = kLinkGBps;
  HardwareOptions without = with;
  without.interconnect.scale_out.collective_sms = 0;
  const traces::Trace t = Llama(3, 1);
  Result<StageResult> slow = SimulateStage(t, BasePlan(t), with);
  Result<StageResult> fast = SimulateStage(t, BasePlan(t), without);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  ASSERT_TRUE(fast.ok()) << fast.status().ToString();
  EXPECT_EQ(fast->collective_sm_ns, 0);
  EXPECT_GT(slow->collective_sm_ns, 0);
  // The ops' own times, plus what the SMs held cost them.
  const int64_t compute = ComputeNs(t, with);
  EXPECT_EQ(fast->compute_busy_ns, compute);
  EXPECT_EQ(slow->compute_busy_ns, compute + slow->collective_sm_ns);
  EXPECT_EQ(slow->step_ns,
            compute + slow->collective_sm_ns + slow->exposed_collective_ns + slow->exposed_io_ns);
  // Only while a collective runs, at most twice as slow (a one-wave GEMM):
  // never more than the collectives' own time.
  EXPECT_LE(slow->collective_sm_ns, slow->side_collective_ns);
  EXPECT_GT(slow->step_ns, fast->step_ns);
  EXPECT_EQ(slow->peak_gpu_bytes, fast->peak_gpu_bytes);
}

TEST(CollectiveSms, TheCpRingsSendsAndReceivesHoldNoComputeSms) {
  HardwareOptions hw = A100Like();
  hw.interconnect.scale_out.GBps = 100;
  const traces::Trace t = Llama(0, 2);
  Result<StageResult> r = SimulateStage(t, BasePlan(t), hw);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->side_collective_ns, 0);
  EXPECT_EQ(r->collective_sm_ns, 0);
  EXPECT_EQ(r->compute_busy_ns, ComputeNs(t, hw));
}

// Where a group sits decides what its collectives hold: a ZeRO gather over 8
// ranks in one domain of 8 the scale-up tier's, over 8 domains of 1 the
// network's; the cp ring's steps and a one-rank group none.
TEST(CollectiveSms, ACollectiveHoldsItsTiersSms) {
  HardwareOptions hw = A100Like();
  auto gather_of = [](const traces::Trace& t) {
    for (const traces::Op& op : t.ops) {
      if (op.kind == traces::OpKind::kCollective && op.stream != 0 &&
          op.stream != traces::kCpRingStream) {
        return op;
      }
    }
    ADD_FAILURE() << "no ZeRO collective";
    return traces::Op{};
  };
  const traces::Trace zero = Llama(3, 1);
  const OpCostModel across(hw, zero.header);
  EXPECT_EQ(across.CollectiveSms(gather_of(zero)), 16);
  hw.gpus_per_node = 8;
  hw.interconnect.domain_gpus = 8;
  const OpCostModel inside(hw, zero.header);
  EXPECT_EQ(inside.CollectiveSms(gather_of(zero)), 24);
  const traces::Trace ring = Llama(0, 2);
  const OpCostModel cp(hw, ring.header);
  int ring_steps = 0;
  for (const traces::Op& op : ring.ops) {
    if (op.stream != traces::kCpRingStream) continue;
    ++ring_steps;
    EXPECT_EQ(cp.CollectiveSms(op), 0) << op.name;
  }
  EXPECT_GT(ring_steps, 0);
  traces::Op gemm = Gemm(64, 64, 64);
  EXPECT_EQ(cp.CollectiveSms(gemm), 0);
}

// Data parallelism's gradient buckets, exchanged during the last backward
// (ddp overlapped), hold the network tier's SMs too: that backward ends later
// by what they cost it (Prediction::bucket_sm_ns), the step by no more; with
// the buckets after the backward (ddp local) nothing runs beside it.
TEST(CollectiveSms, TheBackwardBesideTheGradientBucketsRunsOnTheSmsTheyLeave) {
  // 5000 GB/s: the buckets keep up with the backward, so the step ends with
  // its last bucket, ready as the backward ends (over a slower link they
  // queue, and the queue ends after the backward whatever the SMs cost it).
  HardwareOptions with = A100Like();
  with.interconnect.scale_out.GBps = 5000;
  HardwareOptions without = with;
  without.interconnect.scale_out.collective_sms = 0;
  const traces::Trace t = Llama(0, 1, 8);
  traces::Plan plan = BasePlan(t);
  plan.dp = 8;
  for (const std::string ddp : {"overlapped", "local"}) {
    SCOPED_TRACE(ddp);
    plan.ddp = ddp;
    Result<Prediction> slow = Simulate(t, plan, with);
    Result<Prediction> fast = Simulate(t, plan, without);
    ASSERT_TRUE(slow.ok()) << slow.status().ToString();
    ASSERT_TRUE(fast.ok()) << fast.status().ToString();
    EXPECT_GT(fast->allreduce_busy_ns, 0);
    EXPECT_EQ(fast->bucket_sm_ns, 0);
    if (ddp == "local") {
      EXPECT_EQ(slow->bucket_sm_ns, 0);
      EXPECT_EQ(slow->metrics.step_time_ns, fast->metrics.step_time_ns);
      continue;
    }
    EXPECT_GT(slow->bucket_sm_ns, 0);
    EXPECT_LE(slow->bucket_sm_ns, slow->allreduce_busy_ns);  // at most twice as slow beside them
    EXPECT_GT(slow->metrics.step_time_ns, fast->metrics.step_time_ns);
    EXPECT_LE(slow->metrics.step_time_ns - fast->metrics.step_time_ns, slow->bucket_sm_ns);
    EXPECT_EQ(slow->metrics.peak_gpu_bytes, fast->metrics.peak_gpu_bytes);
  }
}

}  // namespace
}  // namespace ssdtrain::sim

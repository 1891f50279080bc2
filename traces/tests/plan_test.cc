#include "traces/plan.h"

#include <gtest/gtest.h>

#include "traces/io.h"
#include "traces/report.h"
#include "traces/tests/small_trace.h"
#include "traces/timeline.h"

namespace ssdtrain::traces {
namespace {

Plan SmallPlan(const Trace& t) {
  Plan p;
  p.policy = "offload-ssd";
  p.model = t.header.model;
  p.trace_fingerprint = Fingerprint(t);
  p.placements.push_back(Placement{2, TensorAction::kOffloadSsd, 4, "t2.bin", 0, 0});
  StepMetrics m;
  m.step_time_ns = 12345;
  m.ssd_bytes_written = 128;
  p.prediction = m;
  return p;
}

TEST(Plan, JsonRoundTripIsExact) {
  const Trace t = testing::SmallTrace();
  const nlohmann::json j = ToJson(SmallPlan(t));
  Result<Plan> back = PlanFromJson(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), j);
  EXPECT_TRUE(ValidatePlan(*back, t, "p.json").ok());
}

TEST(Plan, ZeroStageAndDpShardAreWrittenWhenSetAndReadBack) {
  const Trace t = testing::SmallTrace();
  Plan p = SmallPlan(t);
  EXPECT_FALSE(ToJson(p).contains("zero_stage"));  // 0: left out, as plans before it
  p.dp = 4;
  p.zero_stage = 1;
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j.at("zero_stage"), 1);
  Result<Plan> back = PlanFromJson(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->zero_stage, 1);
  nlohmann::json bad = j;
  bad["zero_stage"] = 4;
  EXPECT_EQ(PlanFromJson(bad, "p.json").status().message(),
            "p.json: zero_stage: expected 0, 1, 2 or 3 (1: the optimizer state sharded over dp; "
            "2: the gradients too; 3: the weights too), got 4");
  // ZeRO-3 with HSDP: written and read back; a shard group that does not divide dp refused.
  p.zero_stage = 3;
  p.dp_shard = 2;
  const nlohmann::json hsdp = ToJson(p);
  EXPECT_EQ(hsdp.at("dp_shard"), 2);
  Result<Plan> hsdp_back = PlanFromJson(hsdp, "p.json");
  ASSERT_TRUE(hsdp_back.ok()) << hsdp_back.status().ToString();
  EXPECT_EQ(hsdp_back->dp_shard, 2);
  EXPECT_EQ(PlanLayout(*hsdp_back).GradientShards(), 2);
  bad = hsdp;
  bad["dp_shard"] = 3;
  EXPECT_EQ(PlanFromJson(bad, "p.json").status().message(),
            "p.json: dp_shard: 3 does not divide dp 4 (HSDP shards inside groups of dp_shard ranks "
            "and replicates across dp / dp_shard)");
}

// Deferred gradient sync: written only when true, read back, refused below
// ZeRO-2, and a plan and a trace that differ in it refused naming it.
TEST(Plan, DeferredGradSyncIsWrittenReadBackAndMatchedToTheTrace) {
  const Trace t = testing::SmallTrace();
  Plan p = SmallPlan(t);
  EXPECT_FALSE(ToJson(p).contains("zero_defer_grad_sync"));
  p.dp = 4;
  p.zero_stage = 3;
  p.zero_defer_grad_sync = true;
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j.at("zero_defer_grad_sync"), true);
  Result<Plan> back = PlanFromJson(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->zero_defer_grad_sync);
  nlohmann::json bad = j;
  bad["zero_stage"] = 1;
  EXPECT_EQ(PlanFromJson(bad, "p.json").status().message(),
            "p.json: zero_defer_grad_sync: applies to zero_stage 2 or 3, got zero_stage 1");
  EXPECT_EQ(ValidatePlan(*back, t, "p.json").message(),
            "p.json: zero_defer_grad_sync: the plan reduce-scatters the gradients once a step, "
            "the trace reduce-scatters every micro-batch's gradients");
}

// The plan records its trace's attention; an older plan without it keeps the
// config's; a plan and a trace that differ are refused naming the field.
TEST(Plan, AttentionIsWrittenReadBackAndMatchedToTheTrace) {
  const Trace t = testing::SmallTrace();
  const Plan p = PlanTemplate(t, "keep");
  EXPECT_EQ(p.attention, t.header.attention);
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j.at("attention"), t.header.attention);
  Result<Plan> back = PlanFromJson(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attention, t.header.attention);
  nlohmann::json older = j;
  older.erase("attention");
  Result<Plan> old = PlanFromJson(older, "p.json");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->attention, "");
  nlohmann::json bad = j;
  bad["attention"] = "sparse";
  EXPECT_EQ(PlanFromJson(bad, "p.json").status().message(),
            "p.json: attention: unknown value \"sparse\"; expected standard or flash");
  Plan other = *back;
  other.attention = t.header.attention == "flash" ? "standard" : "flash";
  EXPECT_EQ(ValidatePlan(other, t, "p.json").message(),
            "p.json: attention: the plan runs " + other.attention + " attention, the trace " +
                t.header.attention);
}

// The plan records its trace's sequence parallelism and FP8 recipe, each
// written only where set; a plan that asks for either against a trace built
// without it is refused naming the field.
TEST(Plan, SequenceParallelismAndFp8AreWrittenReadBackAndMatchedToTheTrace) {
  Trace t = testing::SmallTrace();
  const Plan plain = PlanTemplate(t, "keep");
  EXPECT_FALSE(ToJson(plain).contains("sequence_parallel"));
  EXPECT_FALSE(ToJson(plain).contains("fp8"));
  Plan p = plain;
  p.sequence_parallel = true;
  p.fp8 = "current";
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j.at("sequence_parallel"), true);
  EXPECT_EQ(j.at("fp8"), "current");
  Result<Plan> back = PlanFromJson(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->sequence_parallel);
  EXPECT_EQ(back->fp8, "current");
  EXPECT_EQ(ValidatePlan(*back, t, "p.json").message(),
            "p.json: sequence_parallel: the plan runs sequence parallelism, the trace was built "
            "without it");
  back->sequence_parallel = false;
  EXPECT_EQ(ValidatePlan(*back, t, "p.json").message(),
            "p.json: fp8: the plan trains in FP8 (current), the trace without FP8");
  nlohmann::json bad = j;
  bad["fp8"] = "e4m3";
  EXPECT_EQ(PlanFromJson(bad, "p.json").status().message(),
            "p.json: fp8: unknown recipe \"e4m3\"; expected delayed, current, blockwise or mxfp8");
}

// The block kernels and the gradients' dtype: the header and the plan each
// write them only where set, read them back, refuse an unknown value naming
// the field, and a plan that differs from its trace in one is refused.
TEST(Plan, BlockKernelsAndGradDtypeAreWrittenReadBackAndMatchedToTheTrace) {
  Trace t = testing::SmallTrace();
  const Plan plain = PlanTemplate(t, "keep");
  for (const char* field : {"rotary", "gqa", "norm", "grad_dtype"}) {
    EXPECT_FALSE(ToJson(plain).contains(field)) << field;
    EXPECT_FALSE(ToJson(t).at("header").contains(field)) << field;
  }
  t.header.block_kernels = BlockKernels{"complex", "", "eager"};
  t.header.grad_dtype = "fp32";
  const nlohmann::json header = ToJson(t).at("header");
  EXPECT_EQ(header.at("rotary"), "complex");
  EXPECT_FALSE(header.contains("gqa"));
  EXPECT_EQ(header.at("norm"), "eager");
  EXPECT_EQ(header.at("grad_dtype"), "fp32");
  Result<Trace> read = TraceFromJson(ToJson(t), "t.json");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->header.block_kernels, t.header.block_kernels);
  EXPECT_EQ(read->header.grad_dtype, "fp32");
  nlohmann::json bad_trace = ToJson(t);
  bad_trace["header"]["gqa"] = "grouped";
  EXPECT_EQ(TraceFromJson(bad_trace, "t.json").status().message(),
            "t.json: header.gqa: unknown value \"grouped\"; expected \"native\" or \"repeat\"");

  const Plan p = PlanTemplate(t, "keep");
  EXPECT_EQ(p.block_kernels, t.header.block_kernels);
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j.at("rotary"), "complex");
  EXPECT_EQ(j.at("grad_dtype"), "fp32");
  Result<Plan> back = PlanFromJson(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->block_kernels, t.header.block_kernels);
  EXPECT_TRUE(ValidatePlan(*back, t, "p.json").ok());
  nlohmann::json bad = j;
  bad["norm"] = "layer";
  EXPECT_EQ(PlanFromJson(bad, "p.json").status().message(),
            "p.json: norm: unknown value \"layer\"; expected \"fused\" or \"eager\"");
  bad = j;
  bad["grad_dtype"] = "fp8";
  EXPECT_EQ(PlanFromJson(bad, "p.json").status().message(),
            "p.json: grad_dtype: unknown dtype \"fp8\"; expected fp16, bf16 or fp32");
  nlohmann::json spelled = j;  // a default spelled out reads as unset
  spelled["gqa"] = "native";
  ASSERT_TRUE(PlanFromJson(spelled, "p.json").ok());
  EXPECT_EQ(PlanFromJson(spelled, "p.json")->block_kernels.gqa, "");
  EXPECT_EQ(ValidatePlan(plain, t, "p.json").message(),
            "p.json: rotary: the plan's blocks run it fused, the trace's complex");
  Plan dtype = p;
  dtype.grad_dtype = "";
  EXPECT_EQ(ValidatePlan(dtype, t, "p.json").message(),
            "p.json: grad_dtype: the plan's weight gradients are the config's default, the "
            "trace's fp32");
}

// A report's layout carries the plan's ZeRO stage and shard group, so that
// `ssdtrain compare` refuses a ZeRO-2 prediction beside a ZeRO-1 run.
TEST(Plan, ReportLayoutsCarryTheZeroStageAndShardGroup) {
  const Trace t = testing::SmallTrace();
  Plan p = SmallPlan(t);
  p.dp = 8;
  p.zero_stage = 3;
  p.dp_shard = 4;
  const ReportLayout three = LayoutOf(p);
  EXPECT_EQ(three.parallel.zero_stage, 3);
  EXPECT_EQ(three.zero_shards, 4);
  p.zero_stage = 1;
  p.dp_shard = 0;
  const ReportLayout one = LayoutOf(p);
  EXPECT_EQ(one.zero_shards, 8);
  EXPECT_EQ(LayoutMismatch(three, one), "dp_shard 4 vs 0, zero_stage 3 vs 1, zero_shards 4 vs 8");
  EXPECT_EQ(LayoutMismatch(one, one), "");
}

// ... and the rest of the plan's layout (traces/layout.h): cp, ep, virtual
// stages and the pipeline split, written to a report's JSON where set and
// read back equal; a report without them reads them as their defaults.
TEST(Plan, ReportLayoutsCarryEveryDimensionOfTheLayout) {
  const Trace t = testing::SmallTrace();
  Plan p = SmallPlan(t);
  const ReportLayout plain = LayoutOf(p);
  p.cp = 2;
  p.ep = 4;
  p.pp = 4;
  p.virtual_stages = 2;
  p.pp_first_layers = 3;
  p.pp_last_layers = 2;
  const ReportLayout full = LayoutOf(p);
  EXPECT_EQ(full.parallel, PlanLayout(p));
  EXPECT_EQ(LayoutMismatch(full, plain),
            "cp 2 vs 1, pp 4 vs 1, pp_first_layers 3 vs 0, pp_last_layers 2 vs 0, vp 2 vs 1, ep 4 "
            "vs 1");
  for (const ReportLayout& l : {plain, full}) {
    StepReport r = NewStepReport("prediction", t, p, "hw", l);
    const nlohmann::json j = ToJson(r);
    EXPECT_EQ(j.at("layout").contains("cp"), l.parallel.cp != 1);
    Result<StepReport> back = StepReportFromJson(j, "r.json");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_TRUE(back->layout.has_value());
    EXPECT_EQ(*back->layout, l);
  }
}

TEST(Plan, LocalDdpIsWrittenAndReadBackAndAnUnknownOneRefused) {
  const Trace t = testing::SmallTrace();
  Plan p = SmallPlan(t);
  EXPECT_FALSE(ToJson(p).contains("ddp"));  // overlapped: left out, as plans before it
  p.ddp = "local";
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j.at("ddp"), "local");
  Result<Plan> back = PlanFromJson(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ddp, "local");
  nlohmann::json bad = j;
  bad["ddp"] = "torch";
  EXPECT_EQ(PlanFromJson(bad, "p.json").status().message(),
            "p.json: ddp: unknown value \"torch\"; expected overlapped or local (Megatron's "
            "--DDP-impl)");
}

TEST(Plan, InterleavedRecordsItsVirtualStagesAndOldPlansLoad) {
  const Trace t = testing::SmallTrace();
  Plan p = SmallPlan(t);
  // A plan from before interleaving has no virtual_stages: it loads as 1.
  EXPECT_FALSE(ToJson(p).contains("virtual_stages"));
  Result<Plan> old = PlanFromJson(ToJson(p), "p.json");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->schedule, "1f1b");
  EXPECT_EQ(old->virtual_stages, 1);
  p.pp = 4;
  p.num_micro_batches = 8;
  p.schedule = "interleaved";
  p.virtual_stages = 2;
  const nlohmann::json j = ToJson(p);
  EXPECT_EQ(j.at("schedule"), "interleaved");
  EXPECT_EQ(j.at("virtual_stages"), 2);
  Result<Plan> back = PlanFromJson(j, "p.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->virtual_stages, 2);
  EXPECT_EQ(ToJson(*back), j);
  nlohmann::json odd = j;
  odd["num_micro_batches"] = 6;
  EXPECT_EQ(PlanFromJson(odd, "p.json").status().message(),
            "p.json: virtual_stages: interleaved the 6 micro-batches are not a multiple of pp = 4 "
            "(Megatron-LM interleaves groups of pp micro-batches)");
  nlohmann::json chunks = j;
  chunks["schedule"] = "1f1b";
  EXPECT_EQ(PlanFromJson(chunks, "p.json").status().message(),
            "p.json: virtual_stages: expected 1 under schedule 1f1b, got 2 (model chunks are "
            "interleaved only)");
}

TEST(Plan, RefusesPlanForAnotherTrace) {
  Trace t = testing::SmallTrace();
  Plan p = SmallPlan(t);
  t.tensors[2].bytes *= 2;  // another micro-batch: same model name, other sizes
  t.tensors[2].shape[0] *= 2;
  Status s = ValidatePlan(p, t, "p.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("p.json: trace_fingerprint:"), std::string::npos) << s.message();
}

TEST(Plan, RefusesFileOutsideTheOffloadDirectory) {
  const Trace t = testing::SmallTrace();
  for (const char* name : {"../escape.bin", "/etc/passwd", "a/../../b", ""}) {
    Plan p = SmallPlan(t);
    p.placements[0].file = name;
    Status s = ValidatePlan(p, t, "p.json");
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_NE(s.message().find("placements[0].file"), std::string::npos) << s.message();
  }
}

TEST(Plan, RefusesUnknownTensorAndUnsavedTensor) {
  const Trace t = testing::SmallTrace();
  Plan p = SmallPlan(t);
  p.placements[0].tensor = 99;
  EXPECT_EQ(ValidatePlan(p, t, "p.json").message(),
            "p.json: placements[0].tensor: tensor 99 does not exist in the trace");
  p.placements[0].tensor = 4;  // the loss output: not saved for backward
  EXPECT_NE(ValidatePlan(p, t, "p.json").message().find("is not saved for backward"),
            std::string::npos);
}

TEST(Plan, RejectsBadActionWithPath) {
  nlohmann::json j = ToJson(SmallPlan(testing::SmallTrace()));
  j["placements"][0]["action"] = "teleport";
  Result<Plan> r = PlanFromJson(j, "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "p.json: placements[0].action: unknown value \"teleport\"; expected keep, offload-ssd, "
            "offload-host or recompute");
}

TEST(Timeline, ChromeTraceHasCompleteEventsInMicroseconds) {
  Timeline tl;
  tl.spans.push_back(Span{Lane::kCompute, 1000, 3000, 0, -1, 0, 0, "fc"});
  tl.spans.push_back(Span{Lane::kSsdWrite, 3000, 9000, kNoOp, 2, 0, 0, "write a"});
  tl.memory.push_back(CounterSample{0, 1 << 20, 0});
  nlohmann::json c = ToChromeTrace(tl, "sim");
  int complete = 0;
  for (const auto& e : c["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      if (e["name"] == "fc") {
        EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.0);  // 1000 ns = 1 µs
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2.0);
      }
    }
  }
  EXPECT_EQ(complete, 2);
  Result<Timeline> back = TimelineFromJson(ToJson(tl), "tl.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), ToJson(tl));
}

}  // namespace
}  // namespace ssdtrain::traces

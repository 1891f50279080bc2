// Transformer Engine's userbuffers overlap of the sequence-parallel
// collectives (ModelConfig::tp_comm_overlap, traces::TpOverlap), and
// Megatron's asynchronous tp backward through NCCL without it
// (ModelConfig::tp_backward_overlap): which collectives the builder marks and
// beside which GEMM, what each method leaves exposed (sim/op_cost.h), that the
// mark survives JSON and Chakra, and that a simulated step saves exactly what
// the marked collectives hide.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

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
#include "traces/storage_plan.h"
#include "traces/validate.h"

namespace ssdtrain::sim {
namespace {

using traces::Op;
using traces::OpKind;
using traces::TpOverlapMethod;

HardwareOptions H100() { return testing::LoadPreset("dgx-h100"); }

// A GPT block at tp 2 with sequence parallelism, bf16 (or FP8 delayed);
// `async`: Megatron's asynchronous tp backward (the default).
models::ModelConfig Gpt(bool overlap, const std::string& fp8 = "", bool async = true) {
  models::ModelConfig c;
  c.name = "gpt-tp-overlap";
  c.family = "gpt";
  c.hidden = 4096;
  c.heads = 32;
  c.layers = 2;
  c.vocab = 50304;
  c.seq_len = 2048;
  c.micro_batch = 2;
  c.tp = 2;
  c.sequence_parallel = true;
  c.tp_comm_overlap = overlap;
  c.tp_backward_overlap = async;
  c.attention = "flash";
  c.dtype = "bf16";
  c.fp8 = fp8;
  return c;
}

traces::Trace Build(const models::ModelConfig& c) { return testing::BuildModel(c); }

const Op& Named(const traces::Trace& t, const std::string& name) {
  return testing::OpNamed(t, name);
}

// Each marked collective of block 0: its method, and the GEMM beside it (TE's
// defaults: pytorch/module/base.py, initialize_ub).
const std::map<std::string, std::pair<TpOverlapMethod, std::string>> kBlockMarks = {
    {"L0.qkv.in_gathered.all_gather", {TpOverlapMethod::kRingExchange, "L0.qkv"}},
    {"L0.fc1.in_gathered.all_gather", {TpOverlapMethod::kRingExchange, "L0.fc1"}},
    {"L0.proj.out_shard.reduce_scatter", {TpOverlapMethod::kPipeline, "L0.proj"}},
    {"L0.fc2.out_shard.reduce_scatter", {TpOverlapMethod::kPipeline, "L0.fc2"}},
    {"L0.proj.out.grad_full.all_gather", {TpOverlapMethod::kRingExchange, "L0.proj.dgrad"}},
    {"L0.fc2.out.grad_full.all_gather", {TpOverlapMethod::kRingExchange, "L0.fc2.dgrad"}},
    {"L0.qkv.in_regathered.all_gather", {TpOverlapMethod::kBulk, "L0.qkv.dgrad"}},
    {"L0.fc1.in_regathered.all_gather", {TpOverlapMethod::kBulk, "L0.fc1.dgrad"}},
    {"L0.qkv.in.grad_shard.reduce_scatter", {TpOverlapMethod::kBulk, "L0.qkv.wgrad"}},
    {"L0.fc1.in.grad_shard.reduce_scatter", {TpOverlapMethod::kBulk, "L0.fc1.wgrad"}},
};

TEST(TpOverlapTrace, TheBuilderMarksEachSequenceParallelCollectiveOfABlockBesideItsGemm) {
  for (const std::string fp8 : {"", "delayed"}) {
    SCOPED_TRACE("fp8 " + fp8);
    const traces::Trace t = Build(Gpt(true, fp8));
    for (const auto& [name, mark] : kBlockMarks) {
      SCOPED_TRACE(name);
      const Op& c = Named(t, name);
      ASSERT_TRUE(c.tp_overlap.has_value());
      EXPECT_EQ(c.tp_overlap->method, mark.first);
      const Op& gemm = Named(t, mark.second);
      ASSERT_TRUE(gemm.gemm.has_value());
      EXPECT_EQ(c.tp_overlap->gemm, *gemm.gemm);  // FP8 where the GEMM is
      EXPECT_EQ(c.tp_overlap->gemm.fp8, !fp8.empty());
    }
    // Ten a block, two blocks, and the output layer's backward pair through
    // NCCL (Megatron's output layer is no TE module); nothing else (the
    // embedding's reduce-scatter, the output layer's forward gather).
    const auto marked = std::count_if(t.ops.begin(), t.ops.end(),
                                      [](const Op& op) { return op.tp_overlap.has_value(); });
    EXPECT_EQ(marked, 2 * static_cast<int64_t>(kBlockMarks.size()) + 2);
    EXPECT_EQ(Named(t, "lm_head.in_regathered.all_gather").tp_overlap->method,
              TpOverlapMethod::kAsync);
    EXPECT_EQ(Named(t, "lm_head.in.grad_shard.reduce_scatter").tp_overlap->method,
              TpOverlapMethod::kAsync);
  }
}

// Without userbuffers, Megatron's asynchronous tp backward (Megatron-LM's
// ColumnParallelLinear since cf7efd4f, Megatron-Core, TE's Linear): each
// column-parallel layer's input all-gather beside its data gradient and the
// data gradient's reduce-scatter (all-reduce without sequence parallelism)
// beside its weight gradient, through NCCL; nothing in forward, and nothing
// at all where the config turns it off.
TEST(TpOverlapTrace, TheAsynchronousTpBackwardMarksTheColumnLayersBackwardCollectives) {
  const auto marks = [](const traces::Trace& t) {
    std::map<std::string, std::string> out;  // collective -> GEMM beside it
    for (const Op& op : t.ops) {
      if (!op.tp_overlap) continue;
      EXPECT_EQ(op.tp_overlap->method, TpOverlapMethod::kAsync) << op.name;
      const traces::OpId g = traces::AsyncOverlapGemm(t, op.id);
      if (g != traces::kNoOp) out[op.name] = t.op(g).name;
    }
    return out;
  };
  const traces::Trace sp = Build(Gpt(false));
  EXPECT_TRUE(sp.header.tp_backward_overlap);
  const std::map<std::string, std::string> sp_marks = marks(sp);
  for (const std::string layer : {"L0.qkv", "L0.fc1", "L1.qkv", "L1.fc1", "lm_head"}) {
    SCOPED_TRACE(layer);
    EXPECT_EQ(sp_marks.at(layer + ".in_regathered.all_gather"), layer + ".dgrad");
    EXPECT_EQ(sp_marks.at(layer + ".in.grad_shard.reduce_scatter"), layer + ".wgrad");
  }
  EXPECT_EQ(sp_marks.size(), 10u);
  // Without sequence parallelism: the data gradient's all-reduce beside the weight gradient.
  models::ModelConfig plain = Gpt(false);
  plain.sequence_parallel = false;
  const std::map<std::string, std::string> plain_marks = marks(Build(plain));
  for (const std::string layer : {"L0.qkv", "L0.fc1", "L1.qkv", "L1.fc1", "lm_head"}) {
    EXPECT_EQ(plain_marks.at(layer + ".in.grad_reduced.all_reduce"), layer + ".wgrad") << layer;
  }
  EXPECT_EQ(plain_marks.size(), 5u);
  // Off (Megatron-LM before 2021-08-30): nothing marked, the header says so,
  // and the config's JSON carries the field (written only where false).
  const traces::Trace off = Build(Gpt(false, "", false));
  EXPECT_FALSE(off.header.tp_backward_overlap);
  EXPECT_TRUE(marks(off).empty());
  EXPECT_EQ(models::ToJson(Gpt(false, "", false)).at("tp_backward_overlap"), false);
  EXPECT_FALSE(models::ToJson(Gpt(false)).contains("tp_backward_overlap"));
  // The header field survives JSON; a trace without it ran them in order.
  const Result<traces::Trace> back = traces::TraceFromJson(traces::ToJson(sp), "sp.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->header.tp_backward_overlap);
  EXPECT_FALSE(traces::ToJson(off).at("header").contains("tp_backward_overlap"));
}

// An async collective's inputs stay until the GEMM beside it has run (the
// storage plan lists them among its inputs): the data gradient a
// reduce-scatter reads lives through the weight gradient, as Megatron's
// backward holds it until it waits for the scatter; run in order, it goes
// after the scatter.
TEST(TpOverlapTrace, AnAsyncCollectivesInputsStayUntilTheGemmBesideIt) {
  for (const bool async : {true, false}) {
    SCOPED_TRACE(async ? "async" : "in order");
    const traces::Trace t = Build(Gpt(false, "", async));
    const Result<traces::StoragePlan> sp = traces::ResolveStorages(t, "t");
    ASSERT_TRUE(sp.ok()) << sp.status().ToString();
    const Op& scatter = Named(t, "L0.fc1.in.grad_shard.reduce_scatter");
    const Op& wgrad = Named(t, "L0.fc1.wgrad");
    const int grad = sp->IndexOf(scatter.inputs[0]);
    const traces::StorageInfo& info = sp->storages[static_cast<size_t>(grad)];
    const auto& listed = sp->op_inputs[static_cast<size_t>(wgrad.id)];
    const bool held = std::find(listed.begin(), listed.end(), grad) != listed.end();
    if (async) {
      EXPECT_EQ(traces::AsyncOverlapGemm(t, scatter.id), wgrad.id);
      EXPECT_TRUE(held);
      EXPECT_EQ(info.last_use, wgrad.id);
    } else {
      EXPECT_EQ(traces::AsyncOverlapGemm(t, scatter.id), traces::kNoOp);
      EXPECT_FALSE(held);
      EXPECT_EQ(info.last_use, scatter.id);
    }
  }
}

TEST(TpOverlapTrace, NothingIsMarkedWithoutTheOverlapOrWithoutTensorParallelism) {
  const auto marked = [](const traces::Trace& t) {
    return std::count_if(t.ops.begin(), t.ops.end(),
                         [](const Op& op) { return op.tp_overlap.has_value(); });
  };
  EXPECT_EQ(marked(Build(Gpt(false, "", false))), 0);
  models::ModelConfig tp1 = Gpt(true);
  tp1.tp = 1;  // sequence parallelism, and so either overlap, have no effect
  EXPECT_EQ(marked(Build(tp1)), 0);
  EXPECT_FALSE(Build(tp1).header.tp_backward_overlap);
}

TEST(TpOverlapTrace, TheOverlapWithoutSequenceParallelismIsRefusedByField) {
  models::ModelConfig c = Gpt(true);
  c.sequence_parallel = false;
  const Result<traces::Trace> t = models::BuildTrace(c);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tp_comm_overlap"), std::string::npos);
  EXPECT_NE(t.status().message().find("needs sequence_parallel"), std::string::npos);
  // The config's JSON carries the field (written only where true).
  EXPECT_EQ(models::ToJson(Gpt(true)).at("tp_comm_overlap"), true);
  EXPECT_FALSE(models::ToJson(Gpt(false)).contains("tp_comm_overlap"));
}

TEST(TpOverlapTrace, TheMarkSurvivesJsonAndChakraAndIsCheckedOnRead) {
  const traces::Trace t = Build(Gpt(true, "delayed"));
  const Result<traces::Trace> json = traces::TraceFromJson(traces::ToJson(t), "mem.json");
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  const Result<traces::Trace> chakra = traces::TraceFromChakra(traces::ToChakra(t), "mem.et");
  ASSERT_TRUE(chakra.ok()) << chakra.status().ToString();
  for (const traces::Trace* back : {&*json, &*chakra}) {
    ASSERT_EQ(back->ops.size(), t.ops.size());
    for (size_t i = 0; i < t.ops.size(); ++i) {
      EXPECT_EQ(back->ops[i].tp_overlap, t.ops[i].tp_overlap) << t.ops[i].name;
    }
  }
  EXPECT_NE(traces::Fingerprint(t), traces::Fingerprint(Build(Gpt(false, "delayed"))));
  // On a GEMM, or with an unknown method, the trace names the field.
  nlohmann::json j = traces::ToJson(t);
  const size_t qkv = static_cast<size_t>(Named(t, "L0.qkv").id);
  const size_t gather = static_cast<size_t>(Named(t, "L0.qkv.in_gathered.all_gather").id);
  j["ops"][qkv]["tp_overlap"] = j["ops"][gather]["tp_overlap"];
  const Result<traces::Trace> on_gemm = traces::TraceFromJson(j, "bad.json");
  ASSERT_FALSE(on_gemm.ok());
  EXPECT_NE(on_gemm.status().message().find("tp_overlap"), std::string::npos);
  EXPECT_NE(on_gemm.status().message().find("only a collective overlaps a GEMM"),
            std::string::npos);
  j = traces::ToJson(t);
  j["ops"][gather]["tp_overlap"]["method"] = "sideways";
  const Result<traces::Trace> unknown = traces::TraceFromJson(j, "bad.json");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("ring_exchange, pipeline, bulk, async"),
            std::string::npos);
}

// What each method leaves of a collective of C ns beside a GEMM of G ns
// (sim/op_cost.h), against the collective alone, on the DGX H100 preset.
TEST(TpOverlapCost, EachMethodLeavesWhatItsChunksExpose) {
  const HardwareOptions hw = H100();
  const OpCostModel cost(hw, 2, "bf16");
  const int64_t overhead = traces::CeilSecondsToNs(hw.gpu.op_overhead_us * 1e-6);
  const traces::Trace t = Build(Gpt(true));
  for (const auto& [name, mark] : kBlockMarks) {
    SCOPED_TRACE(name);
    const Op& marked = Named(t, name);
    Op alone = marked;
    alone.tp_overlap.reset();
    const double c = static_cast<double>(cost.RooflineNs(alone) - overhead);
    const double g = static_cast<double>(cost.GemmNs(marked.tp_overlap->gemm));
    ASSERT_GT(c, 0);
    ASSERT_GT(g, 0);
    double exposed = 0;
    switch (mark.first) {
      case TpOverlapMethod::kRingExchange:  // one step of the 2-rank ring beside half the GEMM
        exposed = std::max(0.0, c - g / 2);
        break;
      case TpOverlapMethod::kPipeline: {  // four chunks on 116 of 132 SMs
        const double chunk = g * 132.0 / 116.0 / 4;
        exposed = chunk + 3 * std::max(chunk, c / 4) + c / 4 - g;
        break;
      }
      case TpOverlapMethod::kBulk:
      case TpOverlapMethod::kAsync:
        exposed = std::max(0.0, c - g);
        break;
    }
    EXPECT_NEAR(static_cast<double>(cost.RooflineNs(marked) - overhead), exposed, 1.0);
    EXPECT_LE(cost.RooflineNs(marked) - overhead, mark.first == TpOverlapMethod::kPipeline
                                                      ? static_cast<int64_t>(c + 0.14 * g) + 1
                                                      : static_cast<int64_t>(c));
  }
}

TEST(TpOverlapCost, AGemmLongerThanTheRingHidesItAndAShortOneHidesPart) {
  const HardwareOptions hw = H100();
  const OpCostModel cost(hw, 4, "bf16");
  traces::TpOverlap ring{TpOverlapMethod::kRingExchange, {8192, 8192, 8192, 1}};
  const int64_t g = cost.GemmNs(ring.gemm);
  // Three steps of the 4-rank ring, each beside a quarter of the GEMM.
  EXPECT_EQ(cost.ExposedNs(ring, 3 * (g / 4), 4), 0);
  EXPECT_NEAR(static_cast<double>(cost.ExposedNs(ring, 3 * (g / 4) + 3000, 4)), 3000.0, 2.0);
  traces::TpOverlap bulk{TpOverlapMethod::kBulk, ring.gemm};
  EXPECT_EQ(cost.ExposedNs(bulk, g, 4), 0);
  EXPECT_EQ(cost.ExposedNs(bulk, g + 5000, 4), 5000);
  // NCCL's collective beside the whole GEMM, holding the 24 SMs of a
  // collective inside the DGX H100's NVLink domain: while it runs, the GEMM
  // runs on the 108 left, its 2048 tiles in 19 waves where 132 SMs run them
  // in 16; the GEMM outlasts a collective as long as it was by the
  // collective's length × (1 − 16/19), and one that outlasts that slowed
  // GEMM is exposed by what it outlasts. Holding none, what outlasts the
  // GEMM alone.
  ASSERT_EQ(hw.interconnect.scale_up.collective_sms, 24);
  traces::TpOverlap async{TpOverlapMethod::kAsync, ring.gemm};
  const double slowed = 1.0 - 16.0 / 19.0;
  EXPECT_NEAR(static_cast<double>(cost.ExposedNs(async, g, 4, 24)), static_cast<double>(g) * slowed,
              2.0);
  EXPECT_NEAR(static_cast<double>(cost.ExposedNs(async, g + 5000, 4, 24)),
              static_cast<double>(g + 5000) * slowed, 2.0);
  const int64_t g_beside = g * 19 / 16;
  EXPECT_NEAR(static_cast<double>(cost.ExposedNs(async, g_beside + 5000, 4, 24)),
              g_beside + 5000 - g, 2.0);
  EXPECT_EQ(cost.ExposedNs(async, g, 4, 0), 0);
  EXPECT_EQ(cost.ExposedNs(async, g + 5000, 4, 0), 5000);
  // The pipeline always pays the SMs it takes and its last chunk.
  traces::TpOverlap pipe{TpOverlapMethod::kPipeline, ring.gemm};
  const double margin = static_cast<double>(g) * (132.0 / 116.0 - 1);
  EXPECT_NEAR(static_cast<double>(cost.ExposedNs(pipe, 4000, 4)), margin + 1000, 2.0);
}

// A GEMM priced from its dims alone reads and writes the trace's own width:
// a memory-bound one takes twice as long in fp32 as in fp16.
TEST(TpOverlapCost, AGemmByItsDimsMovesTheTracesElementWidth) {
  const HardwareOptions hw = H100();
  const traces::GemmDims skinny{4096, 4096, 8, 1};
  const double fp16 = static_cast<double>(OpCostModel(hw, 2, "fp16").GemmNs(skinny));
  const double fp32 = static_cast<double>(OpCostModel(hw, 2, "fp32").GemmNs(skinny));
  EXPECT_NEAR(fp32 / fp16, 2.0, 0.01);
}

// The step with the overlap is shorter than without by what the marked
// collectives hide: one micro-batch, pp 1, keep (every op on the compute
// stream once).
TEST(TpOverlapCost, AStepSavesWhatTheMarkedCollectivesHide) {
  const HardwareOptions hw = H100();
  for (const bool ub : {true, false}) {
    SCOPED_TRACE(ub ? "userbuffers" : "the asynchronous tp backward");
    const traces::Trace with = Build(Gpt(ub, "delayed"));
    const traces::Trace without = Build(Gpt(false, "delayed", false));
    const Result<Prediction> p_with = Simulate(with, traces::PlanTemplate(with), hw);
    const Result<Prediction> p_without = Simulate(without, traces::PlanTemplate(without), hw);
    ASSERT_TRUE(p_with.ok()) << p_with.status().ToString();
    ASSERT_TRUE(p_without.ok()) << p_without.status().ToString();
    const OpCostModel cost(hw, with.header);
    int64_t hidden = 0, held = 0;
    for (const Op& op : with.ops) {
      if (!op.tp_overlap) continue;
      Op alone = op;
      alone.tp_overlap.reset();
      hidden += cost.OpTimeNs(alone) - cost.OpTimeNs(op);
      if (traces::AsyncOverlapGemm(with, op.id) == traces::kNoOp) continue;
      int64_t bytes = 0;  // each input rounded up to the allocator's 2 MiB blocks at most
      for (traces::TensorId t : op.inputs) bytes += with.tensor(t).bytes + (2 << 20);
      held = std::max(held, bytes);
    }
    EXPECT_GT(hidden, 0);
    EXPECT_EQ(p_without->metrics.step_time_ns - p_with->metrics.step_time_ns, hidden);
    // Memory: the same but for an async collective's inputs, held until the
    // GEMM beside it has run (the output layer's data gradient through its
    // weight gradient, at this model's peak, the loss's backward).
    const int64_t more = p_with->metrics.peak_gpu_bytes - p_without->metrics.peak_gpu_bytes;
    EXPECT_GE(more, 0);
    EXPECT_LE(more, held);
  }
}

}  // namespace
}  // namespace ssdtrain::sim

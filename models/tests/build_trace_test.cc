// Trace-wide invariants of BuildTrace: phases and order, weights and optimizer,
// tensor-parallel collectives, pipeline stages, offloadable and layer rules.
#include "models/build_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "models/tests/test_configs.h"
#include "models/tests/trace_stats.h"

namespace ssdtrain::models {
namespace {

using testing::Gpt;
using testing::MustBuild;
using traces::OpKind;
using traces::Phase;
using traces::TensorKind;

int Count(const traces::Trace& tr, OpKind kind, Phase phase, int layer) {
  int n = 0;
  for (const traces::Op& op : tr.ops)
    n += op.kind == kind && op.phase == phase && op.layer == layer;
  return n;
}

const traces::Op* FindOp(const traces::Trace& tr, const std::string& name) {
  for (const traces::Op& op : tr.ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

// Megatron's layout copies (megatron/model/transformer.py at 6985e589): the context
// product [b, heads, s, d] is copied to [s, b, h] for the projection, and the backward of
// the QKV split concatenates the q, k and v gradients into one buffer the projection's
// gradients read. b 2, s 256, h 512, t 2: 256·2·256 elements of fp16 a rank for the
// context, three times that for the QKV gradient.
TEST(BuildTrace, AttentionCopiesItsContextAndConcatenatesTheQkvGradients) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 2));
  const int64_t ctx_bytes = 256 * 2 * 256 * 2;
  const traces::Op* copy = FindOp(tr, "L0.attn.ctx.contiguous");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->kind, OpKind::kElementwise);
  EXPECT_EQ(copy->bytes_read, ctx_bytes);
  EXPECT_EQ(copy->bytes_written, ctx_bytes);
  const traces::Op* proj = FindOp(tr, "L0.proj");
  ASSERT_NE(proj, nullptr);
  EXPECT_EQ(proj->inputs.front(), copy->outputs.front());
  const traces::Op* cat = FindOp(tr, "L0.qkv.out.grad_cat");
  ASSERT_NE(cat, nullptr);
  EXPECT_EQ(cat->phase, Phase::kBackward);
  EXPECT_EQ(cat->inputs.size(), 3u);
  EXPECT_EQ(cat->bytes_read, 3 * ctx_bytes);
  EXPECT_EQ(cat->bytes_written, 3 * ctx_bytes);
  for (const char* name : {"L0.qkv.dgrad", "L0.qkv.wgrad"}) {
    const traces::Op* grad = FindOp(tr, name);
    ASSERT_NE(grad, nullptr) << name;
    EXPECT_NE(std::find(grad->inputs.begin(), grad->inputs.end(), cat->outputs.front()),
              grad->inputs.end())
        << name;
  }
  // FlashAttention writes [s, b, h] itself: no copy; the split is still there.
  ModelConfig flash = Gpt(2, 256, 512, 8, 2);
  flash.attention = "flash";
  const traces::Trace f = MustBuild(flash);
  EXPECT_EQ(FindOp(f, "L0.attn.ctx.contiguous"), nullptr);
  EXPECT_NE(FindOp(f, "L0.qkv.out.grad_cat"), nullptr);
}

TEST(BuildTrace, PhasesComeInOrderAndBackwardWalksLayersInReverse) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 1));
  int phase_rank = 0;
  int last_backward_layer = 1 << 30;
  for (const traces::Op& op : tr.ops) {
    const int rank = static_cast<int>(op.phase);
    EXPECT_GE(rank, phase_rank) << op.name << " comes after a later phase";
    phase_rank = rank;
    EXPECT_EQ(op.micro_batch, 0);
    if (op.phase == Phase::kBackward && op.layer != traces::kNoLayer) {
      EXPECT_LE(op.layer, last_backward_layer) << op.name;
      last_backward_layer = op.layer;
    }
  }
  EXPECT_EQ(last_backward_layer, 0);
}

TEST(BuildTrace, WeightsHaveNoProducerAndOneGradientEachForTheOptimizer) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 2, true));
  std::set<int> optimizer_layers;
  for (const traces::Op& op : tr.ops) {
    if (op.phase != Phase::kOptimizer) continue;
    EXPECT_EQ(op.kind, OpKind::kOptimizer);
    optimizer_layers.insert(op.layer);
  }
  // One optimizer op for the embedding/head weights and one per block.
  EXPECT_EQ(optimizer_layers, (std::set<int>{-1, 0, 1, 2}));
  for (const traces::Tensor& t : tr.tensors) {
    if (t.kind != TensorKind::kWeight) continue;
    EXPECT_EQ(t.producer, traces::kNoOp) << t.name;
    EXPECT_FALSE(t.offloadable) << t.name;
    ASSERT_FALSE(t.consumers.empty()) << t.name;
    EXPECT_EQ(tr.op(t.consumers.back()).phase, Phase::kOptimizer) << t.name;
    // The optimizer's update (adam, among Megatron's passes) reads exactly one
    // gradient of this weight's shape, produced in backward.
    const traces::Op* update = nullptr;
    for (traces::OpId c : t.consumers) {
      const std::string& n = tr.op(c).name;
      if (n == "adam" || (n.size() > 5 && n.compare(n.size() - 5, 5, ".adam") == 0)) {
        update = &tr.op(c);
      }
    }
    ASSERT_NE(update, nullptr) << t.name;
    const traces::Op& last = *update;
    int grads = 0;
    for (traces::TensorId in : last.inputs) {
      const traces::Tensor& g = tr.tensor(in);
      if (g.kind == TensorKind::kGradient && g.name == t.name + ".grad") ++grads;
      if (g.kind == TensorKind::kGradient && g.name.rfind(t.name + ".grad+", 0) == 0) ++grads;
    }
    EXPECT_EQ(grads, 1) << t.name;
  }
}

TEST(BuildTrace, TiedEmbeddingGradientAccumulatesHeadThenEmbedding) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 1));
  // lm_head.wgrad writes word_embeddings.grad; embedding.bwd reads it and writes
  // word_embeddings.grad+1, which the optimizer reads.
  std::map<std::string, const traces::Tensor*> by_name;
  for (const traces::Tensor& t : tr.tensors) by_name[t.name] = &t;
  ASSERT_TRUE(by_name.count("word_embeddings.grad+1"));
  const traces::Tensor& partial = *by_name.at("word_embeddings.grad");
  EXPECT_EQ(tr.op(partial.producer).name, "lm_head.wgrad");
  EXPECT_EQ(tr.op(partial.consumers.at(0)).name, "embedding.bwd");
}

TEST(BuildTrace, NoTensorParallelismMeansNoCollectives) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 1));
  for (const traces::Op& op : tr.ops) EXPECT_NE(op.kind, OpKind::kCollective) << op.name;
}

TEST(BuildTrace, TensorParallelAllReducesAfterProjectionAndFc2) {
  // b 2, s 256, h 512: each forward all-reduce moves s·b·h·2 = 524288 bytes.
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 2));
  std::vector<std::string> names;
  for (const traces::Op& op : tr.ops) {
    if (op.kind != OpKind::kCollective || op.phase != Phase::kForward || op.layer != 1) continue;
    names.push_back(op.name);
    EXPECT_EQ(op.bytes_read, 256 * 2 * 512 * 2) << op.name;
    // In place: the output is a view of the input.
    EXPECT_EQ(tr.tensor(op.outputs.at(0)).alias_of, op.inputs.at(0));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"L1.proj.out_reduced.all_reduce",
                                             "L1.fc2.out_reduced.all_reduce"}));
  // Backward: the input gradients of QKV and fc1 are all-reduced.
  EXPECT_EQ(Count(tr, OpKind::kCollective, Phase::kBackward, 1), 2);
}

TEST(BuildTrace, SequenceParallelGathersBeforeColumnAndScattersAfterRowLayers) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 4, true));
  std::vector<std::string> names;
  for (const traces::Op& op : tr.ops) {
    if (op.kind == OpKind::kCollective && op.phase == Phase::kForward && op.layer == 1) {
      names.push_back(op.name);
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "L1.qkv.in_gathered.all_gather", "L1.proj.out_shard.reduce_scatter",
                       "L1.fc1.in_gathered.all_gather", "L1.fc2.out_shard.reduce_scatter"}));
  // Backward: re-gather for each column layer's weight gradient, reduce-scatter its
  // input gradient, all-gather each row layer's output gradient: 6 per block.
  EXPECT_EQ(Count(tr, OpKind::kCollective, Phase::kBackward, 1), 6);
}

TEST(BuildTrace, PipelineStagesSplitLayersAndMeetAtSendRecv) {
  ModelConfig c = Gpt(2, 256, 512, 8, 1);
  c.layers = 8;
  c.pp = 4;
  for (int64_t stage = 0; stage < 4; ++stage) {
    const traces::Trace tr = MustBuild(c, stage);
    EXPECT_EQ(tr.header.first_layer, 2 * stage);
    EXPECT_EQ(tr.header.stage_layers, 2);
    std::set<int> layers;
    int embeddings = 0, losses = 0, sends = 0, recvs = 0;
    for (const traces::Op& op : tr.ops) {
      EXPECT_EQ(op.stage, stage);
      if (op.layer >= 0) layers.insert(op.layer);
      embeddings += op.kind == OpKind::kEmbedding && op.phase == Phase::kForward;
      losses += op.kind == OpKind::kLoss && op.phase == Phase::kForward;
      sends += op.kind == OpKind::kSend;
      recvs += op.kind == OpKind::kRecv;
    }
    EXPECT_EQ(layers,
              (std::set<int>{static_cast<int>(2 * stage), static_cast<int>(2 * stage + 1)}));
    EXPECT_EQ(embeddings, stage == 0 ? 1 : 0);
    EXPECT_EQ(losses, stage == 3 ? 5 : 0);  // the cross-entropy's five passes
    // Inner boundaries: forward activation one way, its gradient the other.
    const int boundaries = (stage > 0) + (stage < 3);
    EXPECT_EQ(sends, boundaries);
    EXPECT_EQ(recvs, boundaries);
  }
}

TEST(BuildTrace, SavedActivationsAreOffloadableUnlessTinyOrOutsideBlocks) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 1));
  int offloadable = 0;
  for (const traces::Tensor& t : tr.tensors) {
    if (t.offloadable) {
      ++offloadable;
      EXPECT_EQ(t.kind, TensorKind::kActivation) << t.name;
      EXPECT_TRUE(t.saved_for_backward) << t.name;
      EXPECT_GE(t.layer, 0) << t.name;
      EXPECT_GE(tr.tensor(tr.StorageOf(t.id)).bytes, 64 * 1024) << t.name;
    }
    if (t.name == "logits" || t.name == "loss" || t.name == "labels") {
      EXPECT_FALSE(t.offloadable) << t.name;
    }
    if (t.kind == TensorKind::kGradient) {
      EXPECT_FALSE(t.saved_for_backward) << t.name;
    }
  }
  EXPECT_GT(offloadable, 0);
  // The tokens are read by the embedding's backward, so they are saved, but never offloaded.
  for (const traces::Tensor& t : tr.tensors) {
    if (t.name == "embedding.tokens") {
      EXPECT_TRUE(t.saved_for_backward);
      EXPECT_FALSE(t.offloadable);
    }
  }
}

TEST(BuildTrace, BlockInputCountsInTheBlockThatSavesIt) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 1));
  for (const traces::Tensor& t : tr.tensors) {
    // The embedding's output is layer 0's LayerNorm input; layer 0's output is layer 1's.
    if (t.name == "embedding.dropped") {
      EXPECT_EQ(t.layer, 0);
    }
    if (t.name == "L0.mlp_out.out") {
      EXPECT_EQ(t.layer, 1);
    }
    // The last block's output is saved by the final norm, outside the blocks.
    if (t.name == "L2.mlp_out.out") {
      EXPECT_EQ(t.layer, traces::kNoLayer);
    }
  }
}

TEST(BuildTrace, EveryBackwardOpReadsAnIncomingGradient) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 2, true, "flash"));
  for (const traces::Op& op : tr.ops) {
    if (op.phase != Phase::kBackward || op.kind == OpKind::kRecv) continue;
    if (op.name == "loss.bwd") continue;  // the loss gradient is the constant 1
    bool reads_grad = false;
    for (traces::TensorId in : op.inputs) {
      const TensorKind k = tr.tensor(in).kind;
      reads_grad |= k == TensorKind::kGradient;
      // The sequence-parallel re-gather of a saved input feeds a weight gradient.
      reads_grad |= k == TensorKind::kWorkspace;
    }
    EXPECT_TRUE(reads_grad || op.kind == OpKind::kCollective) << op.name;
  }
}

TEST(BuildTrace, RejectsAStageOutsideThePipeline) {
  ModelConfig c = Gpt(2, 256, 512, 8, 1);
  const Result<traces::Trace> r = BuildTrace(c, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "model gpt-test: stage: 1 is out of range for pp 1 (expected 0 <= stage < pp)");
}

TEST(BuildTrace, RejectsAnInvalidConfig) {
  ModelConfig c = Gpt(2, 256, 512, 8, 3);
  const Result<traces::Trace> r = BuildTrace(c, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "model gpt-test: tp: 3 does not divide heads 8");
}

TEST(BuildTrace, Gpt175bTracesAllNinetySixLayers) {
  ModelConfig c = Gpt(1, 2048, 12288, 96, 8, true);
  c.layers = 96;
  c.vocab = 50257;
  const traces::Trace tr = MustBuild(c);
  EXPECT_EQ(tr.header.stage_layers, 96);
  // Per block with SP: s·b·h·(34/8 + 5·96·2048/(12288·8)) = s·b·h·14.25.
  const double expected = 2048.0 * 12288 * 14.25;
  EXPECT_NEAR(testing::StatsOf(tr, 50).saved_bytes / expected, 1.0, 0.02);
}

// Static memory per rank, closed form over the trace's own parameter count P
// (per layer group g: P_g): optimizer state = Σ_g ceil(words·P_g / shards)
// elements of the state dtype. Adam mixed fp16: 3 fp32 words, 12·P bytes; Adam
// pure fp16: 2 fp16 moments, 4·P; SGD mixed: master + momentum, 8·P; SGD pure
// fp16 (the SSDTrain paper's setup): one fp16 momentum buffer, 2·P; ZeRO stage 1
// over dp 4 keeps a quarter of Adam mixed's per rank: ceil(3·P_g / 4) fp32 words
// per group. Weights stay 2·P (fp16) throughout.
TEST(BuildTrace, OptimizerStateFollowsOptimizerPrecisionAndZeroStage) {
  auto totals = [](const ModelConfig& c) {
    const traces::Trace t = MustBuild(c);
    std::map<int, int64_t> params;  // per layer group
    int64_t weights = 0, state = 0;
    for (const traces::Tensor& x : t.tensors) {
      if (x.kind == traces::TensorKind::kWeight) {
        int64_t n = 1;
        for (int64_t d : x.shape) n *= d;
        params[x.layer] += n;
        weights += x.bytes;
      }
      if (x.kind == traces::TensorKind::kOptimizerState) state += x.bytes;
    }
    return std::make_tuple(params, weights, state);
  };
  ModelConfig c = Gpt(2, 128, 256, 4, 2);
  const auto [params, weights, adam_mixed] = totals(c);
  int64_t p = 0;
  for (const auto& [layer, n] : params) p += n;
  EXPECT_EQ(weights, 2 * p);
  EXPECT_EQ(adam_mixed, 12 * p);
  c.precision = "pure";
  EXPECT_EQ(std::get<2>(totals(c)), 4 * p);
  c.optimizer = "sgd";
  EXPECT_EQ(std::get<2>(totals(c)), 2 * p);
  EXPECT_EQ(std::get<1>(totals(c)), 2 * p);  // weights unchanged
  c.precision = "mixed";
  EXPECT_EQ(std::get<2>(totals(c)), 8 * p);
  c.optimizer = "adam";
  c.zero_stage = 1;
  c.dp = 4;
  int64_t sharded = 0;
  for (const auto& [layer, n] : params) sharded += 4 * ((3 * n + 3) / 4);
  EXPECT_EQ(std::get<2>(totals(c)), sharded);
  EXPECT_LE(sharded, 12 * p / 4 + 4 * static_cast<int64_t>(params.size()));
  // fp32 models have no separate master copy: Adam keeps two fp32 moments, 8·P.
  c.zero_stage = 0;
  c.dp = 1;
  c.dtype = "fp32";
  EXPECT_EQ(std::get<2>(totals(c)), 8 * p);
}

// The optimizer's bytes per parameter P (models/README.md, "Optimizer"), over
// every optimizer op. Megatron's fp16 optimizer (optimizer_step "megatron",
// the default): gradients to fp32 2 + 4, unscale and check 4 + 4, norm 4,
// Adam on the fp32 master 16 + 12, master to fp16 4 + 2: 52·P; bf16 has no
// loss scaler and its gradients are fp32 already (grad_dtype's default, no
// copy): 38·P; with bf16 gradients (grad_dtype "bf16") the copy is back:
// 44·P. One fused pass ("fused"): weights, gradients and state
// read, 2 + 2 + 12, weights and state written, 2 + 12: 30·P. No master
// weights (pure fp16) is one pass whatever optimizer_step says: 2 + 2 + 4
// read, 2 + 4 written, 14·P.
TEST(BuildTrace, OptimizerStepMovesMegatronsBytesPerParameter) {
  auto bytes_per_param = [](const ModelConfig& c) {
    const traces::Trace t = MustBuild(c);
    int64_t params = 0, moved = 0, ops = 0;
    for (const traces::Tensor& x : t.tensors) {
      if (x.kind != TensorKind::kWeight) continue;
      int64_t n = 1;
      for (int64_t d : x.shape) n *= d;
      params += n;
    }
    for (const traces::Op& op : t.ops) {
      if (op.phase != Phase::kOptimizer) continue;
      moved += op.bytes_read + op.bytes_written;
      ++ops;
    }
    EXPECT_EQ(moved % params, 0) << c.dtype << " " << c.optimizer_step;
    return std::make_pair(moved / params, ops);
  };
  ModelConfig c = Gpt(2, 128, 256, 4, 2);
  EXPECT_EQ(c.optimizer_step, "megatron");
  // One group for the embedding and head, one per block: 4 groups.
  EXPECT_EQ(bytes_per_param(c), std::make_pair(int64_t{52}, int64_t{5 * 4}));
  c.dtype = "bf16";
  EXPECT_EQ(bytes_per_param(c), std::make_pair(int64_t{38}, int64_t{4 * 3}));
  c.grad_dtype = "bf16";
  EXPECT_EQ(bytes_per_param(c), std::make_pair(int64_t{44}, int64_t{4 * 4}));
  c.grad_dtype.clear();
  c.dtype = "fp16";
  c.optimizer_step = "fused";
  EXPECT_EQ(bytes_per_param(c), std::make_pair(int64_t{30}, int64_t{4}));
  c.optimizer_step = "megatron";
  c.precision = "pure";
  EXPECT_EQ(bytes_per_param(c), std::make_pair(int64_t{14}, int64_t{4}));
}

}  // namespace
}  // namespace ssdtrain::models

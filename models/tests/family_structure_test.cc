// Per-family structure: what each family's blocks contain and share.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "models/tests/test_configs.h"
#include "models/tests/trace_stats.h"

namespace ssdtrain::models {
namespace {

using testing::Llama;
using testing::MustBuild;
using testing::T5;
using traces::OpKind;
using traces::Phase;
using traces::TensorKind;

const traces::Tensor& Named(const traces::Trace& tr, const std::string& name) {
  for (const traces::Tensor& t : tr.tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor named " << name;
  static const traces::Tensor kNone;
  return kNone;
}

const traces::Op* OpNamed(const traces::Trace& tr, const std::string& name) {
  for (const traces::Op& op : tr.ops) {
    if (op.name == name) return &op;
  }
  ADD_FAILURE() << "no op named " << name;
  return nullptr;
}

TEST(Llama, HasNoDropoutMasksOrDropoutOps) {
  for (const std::string attention : {"standard", "flash"}) {
    const traces::Trace tr = MustBuild(Llama(2, attention));
    for (const traces::Tensor& t : tr.tensors) EXPECT_NE(t.dtype, traces::DType::kUint8) << t.name;
    for (const traces::Op& op : tr.ops) EXPECT_NE(op.kind, OpKind::kDropout) << op.name;
  }
}

TEST(Llama, GroupedQueryAttentionShrinksKeysAndValues) {
  // h 512, 8 query heads of 64, 2 KV heads: K and V are each 2·64 = 128 wide, a
  // quarter of Q's 512; the fused QKV output is 512 + 2·128 = 768 wide.
  const traces::Trace tr = MustBuild(Llama(2));
  const traces::Tensor& q = Named(tr, "L0.q");
  const traces::Tensor& k = Named(tr, "L0.k");
  const traces::Tensor& v = Named(tr, "L0.v");
  EXPECT_EQ(k.bytes * 4, q.bytes);
  EXPECT_EQ(v.bytes * 4, q.bytes);
  EXPECT_EQ(Named(tr, "L0.qkv.out").shape, (std::vector<int64_t>{256, 2, 768}));
  // Full multi-head attention (kv_heads = heads) saves more per block.
  const traces::Trace mha = MustBuild(Llama(8));
  EXPECT_LT(testing::StatsOf(tr, 0).saved_bytes, testing::StatsOf(mha, 0).saved_bytes);
}

TEST(Llama, StandardGroupedAttentionBatchesOverKvHeads) {
  // b 2 × 2 KV heads = 4 batches of (4 query heads × s 256) rows against s 256 keys.
  const traces::Trace tr = MustBuild(Llama(2, "standard"));
  const traces::Op* qk = OpNamed(tr, "L1.attn.qk");
  ASSERT_NE(qk, nullptr);
  EXPECT_EQ(*qk->gemm, (traces::GemmDims{4 * 256, 256, 64, 4}));
}

TEST(Llama, RotaryOutputsAreSavedAndSwigluReadsTheGateAndUpProjection) {
  const traces::Trace tr = MustBuild(Llama(2));
  EXPECT_TRUE(Named(tr, "L0.q_rot").saved_for_backward);
  EXPECT_TRUE(Named(tr, "L0.k_rot").saved_for_backward);
  // fc1 projects to gate and up (2 × ffn 1408) and SwiGLU halves it.
  EXPECT_EQ(Named(tr, "L0.fc1.out").shape, (std::vector<int64_t>{256, 2, 2 * 1408}));
  EXPECT_EQ(Named(tr, "L0.act.out").shape, (std::vector<int64_t>{256, 2, 1408}));
  EXPECT_TRUE(Named(tr, "L0.fc1.out").saved_for_backward);
  // Untied: the output layer has its own weight.
  EXPECT_EQ(Named(tr, "output.weight").kind, TensorKind::kWeight);
}

TEST(T5, DecoderCrossAttentionConsumesTheEncoderOutput) {
  const traces::Trace tr = MustBuild(T5(4, 2));
  const traces::Tensor& enc = Named(tr, "encoder_final_norm.out");
  // Read by decoder blocks 2 and 3's K/V projections in forward and by their
  // weight gradients in backward.
  std::vector<std::string> readers;
  for (traces::OpId c : enc.consumers) readers.push_back(tr.op(c).name);
  EXPECT_EQ(readers, (std::vector<std::string>{"L2.cross_kv", "L3.cross_kv", "L3.cross_kv.wgrad",
                                               "L2.cross_kv.wgrad"}));
  EXPECT_TRUE(enc.saved_for_backward);
  EXPECT_EQ(enc.layer, 2);
  // Encoder blocks have no cross-attention.
  for (const traces::Op& op : tr.ops) {
    if (op.name.rfind("L0.cross", 0) == 0 || op.name.rfind("L1.cross", 0) == 0) {
      ADD_FAILURE() << op.name;
    }
  }
  // The encoder output's gradient sums both decoder blocks' contributions.
  EXPECT_NE(OpNamed(tr, "L2.encoder_out.grad_sum"), nullptr);
}

TEST(T5, RelativeBiasFeedsEverySelfAttentionOfItsStack) {
  const traces::Trace tr = MustBuild(T5(4, 2));
  const traces::Tensor& enc_bias = Named(tr, "encoder.relative_bias.out");
  const traces::Tensor& dec_bias = Named(tr, "decoder.relative_bias.out");
  EXPECT_EQ(enc_bias.shape, (std::vector<int64_t>{4, 128, 128}));
  std::vector<std::string> enc_readers, dec_readers;
  for (traces::OpId c : enc_bias.consumers) enc_readers.push_back(tr.op(c).name);
  for (traces::OpId c : dec_bias.consumers) dec_readers.push_back(tr.op(c).name);
  EXPECT_EQ(enc_readers, (std::vector<std::string>{"L0.attn.qk", "L1.attn.qk"}));
  EXPECT_EQ(dec_readers, (std::vector<std::string>{"L2.attn.qk", "L3.attn.qk"}));
  // Adding a bias needs nothing saved.
  EXPECT_FALSE(enc_bias.saved_for_backward);
}

TEST(T5, ReluMlpSavesItsOutputOnceForItselfAndFc2) {
  const traces::Trace tr = MustBuild(T5(2, 1));
  const traces::Tensor& act = Named(tr, "L0.act.out");
  EXPECT_TRUE(act.saved_for_backward);
  EXPECT_FALSE(Named(tr, "L0.fc1.out").saved_for_backward);
  int backward_readers = 0;
  for (traces::OpId c : act.consumers) backward_readers += tr.op(c).phase == Phase::kBackward;
  EXPECT_EQ(backward_readers, 2);  // relu.bwd and fc2.wgrad
}

TEST(T5, EveryPipelineStageValidatesWhereverTheStacksMeet) {
  // 8 blocks, 3 encoder, 4 stages of 2: stage 1 holds encoder block 2 and decoder
  // block 3, so it both ends the encoder and starts the decoder.
  const ModelConfig c = T5(8, 3, 4);
  for (int64_t stage = 0; stage < 4; ++stage) {
    const traces::Trace tr = MustBuild(c, stage);
    int embeddings = 0;
    for (const traces::Op& op : tr.ops) {
      embeddings += op.kind == OpKind::kEmbedding && op.phase == Phase::kForward &&
                    op.name.find("relative_bias") == std::string::npos;
    }
    EXPECT_EQ(embeddings, stage <= 1 ? 1 : 0) << "stage " << stage;
  }
  const traces::Trace s1 = MustBuild(c, 1);
  EXPECT_NE(OpNamed(s1, "encoder_final_norm"), nullptr);
  EXPECT_NE(OpNamed(s1, "decoder_embedding"), nullptr);
  EXPECT_NE(OpNamed(s1, "encoder_out.send"), nullptr);
  const traces::Trace s2 = MustBuild(c, 2);
  EXPECT_NE(OpNamed(s2, "encoder_out.recv"), nullptr);
  EXPECT_NE(OpNamed(s2, "decoder_input.recv"), nullptr);
}

TEST(T5, FlashAttentionWithBiasAndTensorParallelismValidates) {
  ModelConfig c = T5(4, 2);
  c.attention = "flash";
  c.tp = 2;
  c.sequence_parallel = true;
  const traces::Trace tr = MustBuild(c);
  // The flash kernel's backward re-reads the bias, so it is saved.
  EXPECT_TRUE(Named(tr, "encoder.relative_bias.out").saved_for_backward);
}

TEST(Bert, HasTokenTypesEmbeddingNormAndMlmHead) {
  ModelConfig c;
  c.name = "bert-test";
  c.family = "bert";
  c.hidden = 256;
  c.heads = 4;
  c.layers = 2;
  c.vocab = 1000;
  c.seq_len = 128;
  c.micro_batch = 2;
  for (bool sp : {false, true}) {
    c.tp = sp ? 2 : 1;
    c.sequence_parallel = sp;
    const traces::Trace tr = MustBuild(c);
    EXPECT_EQ(Named(tr, "embedding.token_types").kind, TensorKind::kInput);
    EXPECT_NE(OpNamed(tr, "embedding.norm"), nullptr);
    EXPECT_NE(OpNamed(tr, "mlm.dense"), nullptr);
    EXPECT_NE(OpNamed(tr, "mlm.gelu"), nullptr);
  }
}

// A parallel block (Phi, GPT-J): one norm per block, read by both the QKV and the
// fc1 gemm; the two branch gradients of its output are summed before its backward.
TEST(ParallelBlock, OneNormFeedsAttentionAndMlp) {
  for (const char* family : {"phi", "gptj"}) {
    SCOPED_TRACE(family);
    ModelConfig c;
    c.name = "parallel-test";
    c.family = family;
    c.parallel_block = true;
    c.hidden = 256;
    c.heads = 4;
    c.layers = 2;
    c.vocab = 1000;
    c.seq_len = 128;
    const traces::Trace tr = MustBuild(c);
    for (const traces::Op& op : tr.ops) EXPECT_NE(op.name, "L0.ln2");
    const traces::Tensor& ln = Named(tr, "L0.ln1.out");
    std::vector<std::string> readers;
    for (traces::OpId op : ln.consumers) readers.push_back(tr.ops[op].name);
    EXPECT_NE(std::find(readers.begin(), readers.end(), "L0.qkv"), readers.end());
    EXPECT_NE(std::find(readers.begin(), readers.end(), "L0.fc1"), readers.end());
    EXPECT_NE(OpNamed(tr, "L0.ln1.out.grad_sum"), nullptr);
  }
}

}  // namespace
}  // namespace ssdtrain::models

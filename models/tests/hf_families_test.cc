// The gpt_neox, falcon, gemma, gemma2 and phi3 readers (models/hf_neox_config.cc,
// hf_falcon_config.cc, hf_gemma_config.cc, hf_llama_config.cc): each real file's
// parameter count against the published figure, the block each family builds, and
// the fields each refuses, named with the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/hf_config.h"
#include "models/tests/hf_test_files.h"
#include "traces/validate.h"

namespace ssdtrain::models {
namespace {

std::string HfDir(const std::string& model) {
  return std::string(ConfiguredSourceDir()) + "/models/tests/hf/" + model;
}

int64_t Params(const ModelConfig& c) {
  const Result<int64_t> p = ParameterCount(c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : 0;
}

ModelConfig Load(const std::string& path) {
  const Result<ModelConfig> c = LoadModelConfig(path);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

using HfFile = testing::HfFileTest;

// Within 0.5% of the published count.
void ExpectNear(int64_t params, double published) {
  EXPECT_LT(std::abs(static_cast<double>(params) - published), 0.005 * published)
      << params << " vs published " << published;
}

// The names of the ops that read tensor `name` of a trace built at seq_len 128.
std::vector<std::string> Readers(const traces::Trace& tr, const std::string& name) {
  std::vector<std::string> out;
  for (const traces::Tensor& t : tr.tensors) {
    if (t.name != name) continue;
    for (traces::OpId op : t.consumers) out.push_back(tr.ops[op].name);
  }
  return out;
}
bool HasOp(const traces::Trace& tr, const std::string& name) {
  return std::any_of(tr.ops.begin(), tr.ops.end(),
                     [&](const traces::Op& op) { return op.name == name; });
}
traces::Trace Small(ModelConfig c) {
  c.seq_len = 128;
  const Result<traces::Trace> t = BuildTrace(c);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : traces::Trace{};
}

// Pythia-6.9B: 6,857,302,016 (EleutherAI's Pythia table, "Total Params"):
// 2 x 50432 x 4096 untied + 32 x (12 x 4096² + 13 x 4096: four biased linears and two
// LayerNorms) + 2 x 4096 = 6,857,302,016 exactly.
TEST(HfFamilies, Pythia69BHasItsPublishedParameterCountWithTwoNormsPerBlock) {
  const ModelConfig c = Load(HfDir("pythia-6.9b-deduped"));
  EXPECT_EQ(c.family, "neox");
  EXPECT_TRUE(c.parallel_block);
  EXPECT_EQ(Params(c), 6857302016);
  ExpectNear(Params(c), 6.86e9);
}

// Gemma-7B: 8.54 B (Gemma report, Table 2: 786,825,216 embedding + 7,751,248,896
// non-embedding parameters; its embedding counts 256128 rows, the file's vocab_size
// 256000). Explicit head_dim 256 (16 x 256 = 4096, not 3072), GeGLU, tied output:
// 256000 x 3072 + 28 x (4 x 3072 x 4096 + 3 x 3072 x 24576 + 2 x 3072) + 3072.
TEST(HfFamilies, Gemma7BHasItsPublishedParameterCountWithItsHeadDimAndGeglu) {
  const ModelConfig c = Load(HfDir("gemma-7b"));
  EXPECT_EQ(c.family, "gemma");
  EXPECT_EQ(HeadDim(c), 256);
  EXPECT_EQ(Params(c), 8537680896);
  ExpectNear(Params(c), 8.54e9);
}

// Phi-3.5-mini: 3.82 B (Hugging Face hub, microsoft/Phi-3.5-mini-instruct, "3.82B
// params"; Phi-3-mini's shapes). 2 x 32128 (32064 padded to 128) x 3072 untied +
// 32 x (4 x 3072² + 3 x 3072 x 8192 + 2 x 3072) + 3072 = 3,821,472,768.
TEST(HfFamilies, Phi35MiniHasItsPublishedParameterCount) {
  const ModelConfig c = Load(HfDir("phi-3.5-mini-instruct"));
  EXPECT_EQ(c.family, "llama");
  EXPECT_EQ(Params(c), 3821472768);
  ExpectNear(Params(c), 3.82e9);
}

TEST(HfFamilies, EveryNewRealFileTracesAndValidates) {
  for (const char* model :
       {"pythia-6.9b-deduped", "gemma-7b", "phi-3.5-mini-instruct", "falcon-7b", "gemma-2-9b"}) {
    SCOPED_TRACE(model);
    const traces::Trace t = Small(Load(HfDir(model)));
    EXPECT_TRUE(traces::Validate(t, model).ok());
  }
}

// GPT-NeoX's parallel block: the attention reads ln1, the MLP its own ln2 of the
// same input; the two norm backwards chain, with no summed norm-output gradient.
TEST(HfFamilies, NeoxParallelBlockGivesTheMlpItsOwnNorm) {
  const traces::Trace t = Small(Load(HfDir("pythia-6.9b-deduped")));
  const std::vector<std::string> ln1 = Readers(t, "L0.ln1.out");
  EXPECT_NE(std::find(ln1.begin(), ln1.end(), "L0.qkv"), ln1.end());
  EXPECT_EQ(std::find(ln1.begin(), ln1.end(), "L0.fc1"), ln1.end());
  const std::vector<std::string> ln2 = Readers(t, "L0.ln2.out");
  EXPECT_NE(std::find(ln2.begin(), ln2.end(), "L0.fc1"), ln2.end());
  EXPECT_FALSE(HasOp(t, "L0.ln1.out.grad_sum"));
  EXPECT_TRUE(HasOp(t, "L0.rotary"));
}

// Falcon-7B's genuine config.json (tiiuae/falcon-7b as first published, in the original
// RWConfig's names: model_type RefinedWebModel, n_head, n_layer; models/tests/hf/README.md):
// 6.92 B (the published figure as the issue states it for Falcon-7B; the model card's
// table, 32 layers, d_model 4544, head_dim 64, vocabulary 65024, gives this count
// exactly). One kv head, no biases, one LayerNorm per parallel block, tied output:
// 65024 x 4544 + 32 x (4544 x (4544 + 2 x 64) + 4544² + 2 x 4 x 4544² + 2 x 4544)
// + 2 x 4544 = 6,921,720,704.
TEST(HfFamilies, Falcon7BHasItsPublishedParameterCount) {
  const ModelConfig c = Load(HfDir("falcon-7b"));
  EXPECT_EQ(c.family, "falcon");
  EXPECT_EQ(c.heads, 71);
  EXPECT_EQ(c.layers, 32);
  EXPECT_EQ(KvHeads(c), 1);
  EXPECT_EQ(c.seq_len, 2048);  // no max_position_embeddings: the card's sequence length
  EXPECT_EQ(c.dtype, "bf16");
  EXPECT_TRUE(c.parallel_block);
  EXPECT_EQ(Params(c), 6921720704);
  ExpectNear(Params(c), 6.92e9);
  const traces::Trace t = Small(c);
  const std::vector<std::string> ln1 = Readers(t, "L0.ln1.out");
  EXPECT_NE(std::find(ln1.begin(), ln1.end(), "L0.fc1"), ln1.end());
  EXPECT_TRUE(HasOp(t, "L0.ln1.out.grad_sum"));
}

// The same model in transformers' FalconConfig names (model_type falcon, as
// transformers' convert_custom_code_checkpoint.py rewrites the RW files), as an inline
// object: the same count.
TEST_F(HfFile, Falcon7BInFalconConfigNamesHasTheSameCount) {
  Write(R"("model_type": "falcon", "alibi": false, "bias": false, "hidden_size": 4544,
           "multi_query": true, "new_decoder_architecture": false, "num_attention_heads": 71,
           "num_hidden_layers": 32, "parallel_attn": true, "vocab_size": 65024)");
  EXPECT_EQ(Params(Load(File())), 6921720704);
}

// RWConfig's own defaults where an RW file leaves a field out: multi_query and
// parallel_attn false (FalconConfig's are true).
TEST_F(HfFile, RefinedWebModelDefaultsAreRwConfigs) {
  Write(R"("model_type": "RefinedWebModel", "hidden_size": 256, "n_head": 4, "n_layer": 2,
           "vocab_size": 1024)");
  const ModelConfig c = Load(File());
  EXPECT_EQ(KvHeads(c), 4);
  EXPECT_FALSE(c.parallel_block);
}

class HfFamilyErrors : public testing::HfFileTest {
 protected:
  std::string Neox(const std::string& extra) const {
    return Message(R"("model_type": "gpt_neox", "hidden_size": 2048, "num_hidden_layers": 24,
           "num_attention_heads": 16, "intermediate_size": 8192, "vocab_size": 50304,
           "max_position_embeddings": 2048)" +
                   extra);
  }
  std::string Falcon(const std::string& extra) const {
    return Message(R"("model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32,
           "num_attention_heads": 71, "vocab_size": 65024)" +
                   extra);
  }
  std::string Gemma(const std::string& extra) const {
    return Message(R"("model_type": "gemma", "hidden_size": 2048, "num_hidden_layers": 18,
           "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256,
           "intermediate_size": 16384, "vocab_size": 256000, "max_position_embeddings": 8192)" +
                   extra);
  }
  std::string Phi3(const std::string& extra) const {
    return Message(R"("model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 8192,
           "vocab_size": 32064, "max_position_embeddings": 4096)" +
                   extra);
  }
};

TEST_F(HfFamilyErrors, WrongTypesNameTheField) {
  EXPECT_EQ(Neox(R"(, "rotary_pct": "0.25")"),
            File() + ": rotary_pct: expected a number, got string");
  EXPECT_EQ(Falcon(R"(, "multi_query": 1)"),
            File() + ": multi_query: expected true or false, got integer");
  EXPECT_EQ(Gemma(R"(, "head_dim": "256")"),
            File() + ": head_dim: expected an integer or null, got string");
  EXPECT_EQ(Phi3(R"(, "intermediate_size": 81.92)"),
            File() + ": intermediate_size: expected an integer, got number");
}

TEST_F(HfFamilyErrors, MissingKeysNameTheField) {
  EXPECT_EQ(Message(R"("model_type": "gpt_neox", "hidden_size": 2048)"),
            File() + ": num_hidden_layers: missing required field");
  EXPECT_EQ(Message(R"("model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32)"),
            File() + ": num_attention_heads: missing required field");
  EXPECT_EQ(Message(R"("model_type": "gemma", "hidden_size": 2048, "num_hidden_layers": 18,
           "num_attention_heads": 8, "intermediate_size": 16384, "vocab_size": 256000)"),
            File() + ": max_position_embeddings: missing required field");
}

TEST_F(HfFamilyErrors, HeadsThatDoNotDivideNameTheirField) {
  EXPECT_EQ(Neox(R"(, "num_attention_heads": 15)"),
            File() +
                ": num_attention_heads: 15 does not divide hidden_size 2048 (and no head_dim "
                "is given)");
  EXPECT_EQ(Falcon(R"(, "num_attention_heads": 70)"),
            File() +
                ": num_attention_heads: 70 does not divide hidden_size 4544 (and no head_dim "
                "is given)");
  EXPECT_EQ(Gemma(R"(, "num_key_value_heads": 3)"),
            File() + ": num_key_value_heads: 3 does not divide num_attention_heads 8");
  EXPECT_EQ(Phi3(R"(, "num_key_value_heads": 5)"),
            File() + ": num_key_value_heads: 5 does not divide num_attention_heads 32");
}

TEST_F(HfFamilyErrors, WhatTheTraceDoesNotModelIsRefusedNamingTheField) {
  EXPECT_EQ(Neox(R"(, "tie_word_embeddings": true)"),
            File() +
                ": tie_word_embeddings: true (an output layer tied to the embeddings) is not "
                "modelled (supported: false)");
  EXPECT_EQ(Neox(R"(, "rotary_pct": 1.5)"),
            File() + ": rotary_pct: expected a fraction in (0, 1], got 1.5");
  EXPECT_EQ(Falcon(R"(, "alibi": true)"),
            File() + ": alibi: true (ALiBi attention biases) is not modelled (supported: false)");
  EXPECT_EQ(Falcon(R"(, "new_decoder_architecture": true, "num_kv_heads": 8)"),
            File() +
                ": new_decoder_architecture: true (Falcon-40B/180B: two LayerNorms ln_attn and "
                "ln_mlp, grouped kv heads) is not modelled (supported: false)");
  EXPECT_EQ(
      Falcon(R"(, "bias": true)"),
      File() + ": bias: true (biases on every linear layer) is not modelled (supported: false)");
  EXPECT_EQ(Gemma(R"(, "hidden_activation": "relu")"),
            File() +
                ": hidden_activation: \"relu\" is not modelled (supported: gelu, gelu_new, "
                "gelu_fast, gelu_pytorch_tanh, the GeGLU MLP)");
  EXPECT_EQ(Phi3(R"(, "sliding_window": 0)"),
            File() + ": sliding_window: expected a positive integer or null, got 0");
  EXPECT_EQ(Phi3(R"(, "resid_pdrop": 0.1)"),
            File() +
                ": resid_pdrop: 0.1 (dropout on the branch outputs) is not modelled (supported: "
                "0.0)");
}

// The RW files in their own names: Falcon-RW-1B's layout (ALiBi, biases, a sequential
// block) is refused on alibi, Falcon-40B's RefinedWeb on new_decoder_architecture, and a
// missing n_head is named as such.
TEST_F(HfFamilyErrors, RefinedWebFilesAreRefusedNamingTheirField) {
  EXPECT_EQ(Message(R"("model_type": "RefinedWebModel", "alibi": true, "bias": true,
           "hidden_size": 2048, "multi_query": false, "n_head": 32, "n_layer": 24,
           "parallel_attn": false, "vocab_size": 50304)"),
            File() + ": alibi: true (ALiBi attention biases) is not modelled (supported: false)");
  EXPECT_EQ(Message(R"("model_type": "RefinedWeb", "hidden_size": 8192, "n_head": 128,
           "n_head_kv": 8, "n_layer": 60, "new_decoder_architecture": true,
           "parallel_attn": true, "vocab_size": 65024)"),
            File() +
                ": new_decoder_architecture: true (Falcon-40B/180B: two LayerNorms ln_attn and "
                "ln_mlp, grouped kv heads) is not modelled (supported: false)");
  EXPECT_EQ(Message(R"("model_type": "RefinedWebModel", "hidden_size": 4544, "n_layer": 32)"),
            File() + ": n_head: missing required field");
}

// Gemma-2-9B's genuine config.json: 9.24 B (the published figure as the issue states
// it for google/gemma-2-9b; the Gemma 2 report is arXiv 2408.00118). GQA with head_dim
// 256 (16 x 256 = 4096, not 3584), GeGLU, four RMSNorms per block, tied output:
// 256000 x 3584 + 42 x (2 x 3584 x 4096 + 2 x 3584 x 2048 + 3 x 3584 x 14336
// + 4 x 3584) + 3584 = 9,241,705,984.
TEST(HfFamilies, Gemma2NineBHasItsPublishedParameterCount) {
  const ModelConfig c = Load(HfDir("gemma-2-9b"));
  EXPECT_EQ(c.family, "gemma2");
  EXPECT_EQ(HeadDim(c), 256);
  EXPECT_EQ(KvHeads(c), 8);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.seq_len, 4096);  // min(8192, 4096): within the window
  EXPECT_EQ(Params(c), 9241705984);
  ExpectNear(Params(c), 9.24e9);
}

// Gemma 2's block: the scores soft-capped before the softmax (its backward reads the
// capped scores), a post-norm on each branch output, the logits soft-capped.
TEST(HfFamilies, Gemma2SoftCapsScoresAndLogitsAndPostNormsEachBranch) {
  const traces::Trace t = Small(Load(HfDir("gemma-2-9b")));
  for (const char* op : {"L0.attn.softcap", "L0.attn.softcap.bwd", "L0.post_attn_norm",
                         "L0.post_mlp_norm", "logits.softcap", "logits.softcap.bwd"}) {
    EXPECT_TRUE(HasOp(t, op)) << op;
  }
  const std::vector<std::string> capped = Readers(t, "L0.attn.scores_capped");
  EXPECT_NE(std::find(capped.begin(), capped.end(), "L0.attn.softmax"), capped.end());
  EXPECT_NE(std::find(capped.begin(), capped.end(), "L0.attn.softcap.bwd"), capped.end());
  EXPECT_TRUE(traces::Validate(t, "gemma-2-9b").ok());
}

// With FlashAttention the scores are capped inside the kernel (no op, nothing more
// saved); the logits' cap stays. Without the fp32 copy (an fp32 model) the loss's
// softmax gets its own buffer: the capped logits are still read by the cap's backward.
TEST(HfFamilies, Gemma2FlashCapsInTheKernelAndTheLossKeepsTheCappedLogits) {
  ModelConfig c = Load(HfDir("gemma-2-9b"));
  c.attention = "flash";
  const traces::Trace flash = Small(c);
  EXPECT_TRUE(HasOp(flash, "L0.attn.flash"));
  EXPECT_FALSE(HasOp(flash, "L0.attn.softcap"));
  EXPECT_TRUE(HasOp(flash, "logits.softcap"));
  c.attention = "standard";
  c.dtype = "fp32";
  const traces::Trace fp32 = Small(c);
  const std::vector<std::string> capped = Readers(fp32, "logits.capped");
  EXPECT_NE(std::find(capped.begin(), capped.end(), "loss.sub"), capped.end());
  EXPECT_NE(std::find(capped.begin(), capped.end(), "logits.softcap.bwd"), capped.end());
  const auto named = [&](const std::string& name) {
    return std::find_if(fp32.tensors.begin(), fp32.tensors.end(),
                        [&](const traces::Tensor& t) { return t.name == name; });
  };
  const auto softmax = named("loss.softmax");
  const auto shifted = named("loss.shifted");
  const auto capped_logits = named("logits.capped");
  ASSERT_NE(softmax, fp32.tensors.end());
  ASSERT_NE(shifted, fp32.tensors.end());
  ASSERT_NE(capped_logits, fp32.tensors.end());
  // The first in-place pass writes a buffer of its own; the softmax is that buffer.
  EXPECT_FALSE(shifted->alias_of.has_value());
  EXPECT_EQ(fp32.StorageOf(softmax->id), shifted->id);
  EXPECT_NE(fp32.StorageOf(softmax->id), capped_logits->id);
  EXPECT_TRUE(traces::Validate(fp32, "gemma-2-9b fp32").ok());
}

// What Gemma 2 may be and the trace does not model is refused naming the field.
TEST_F(HfFamilyErrors, Gemma2RefusesWhatItDoesNotModel) {
  const std::string gemma2 = R"("model_type": "gemma2", "hidden_size": 2304,
           "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
           "head_dim": 256, "intermediate_size": 9216, "vocab_size": 256000,
           "max_position_embeddings": 8192)";
  EXPECT_EQ(Message(gemma2 + R"(, "attn_logit_softcapping": null)"),
            File() +
                ": attn_logit_softcapping: null (no soft-capping of the attention scores) is not "
                "modelled (supported: a positive number)");
  EXPECT_EQ(Message(gemma2 + R"(, "final_logit_softcapping": -30.0)"),
            File() + ": final_logit_softcapping: expected a positive number, got -30");
  EXPECT_EQ(Message(gemma2 + R"(, "sliding_window": 0)"),
            File() + ": sliding_window: expected a positive integer or null, got 0");
}

// gemma reads hidden_act where hidden_activation is null, as transformers does.
TEST_F(HfFile, GemmaNullHiddenActivationFallsBackToHiddenAct) {
  Write(R"("model_type": "gemma", "hidden_size": 256, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 1024,
           "vocab_size": 1024, "max_position_embeddings": 512, "hidden_act": "gelu",
           "hidden_activation": null)");
  HfReport report;
  const Result<ModelConfig> c = LoadModelConfig(File(), &report);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(HeadDim(*c), 256);  // transformers' default, not 256 / 4
  EXPECT_EQ(std::count(report.ignored.begin(), report.ignored.end(), "hidden_activation"), 0);
}

}  // namespace
}  // namespace ssdtrain::models

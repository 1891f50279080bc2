// The loss as Megatron-LM computes it (models/detail/head.h): on logits.float()
// unless fp16_lm_cross_entropy, the vocabulary-parallel cross-entropy's softmax
// saved in place over its input, the gradient written over that softmax.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "models/model_config.h"
#include "models/tests/test_configs.h"

namespace ssdtrain::models {
namespace {

using testing::Gpt;
using testing::MustBuild;
using traces::DType;
using traces::OpKind;
using traces::TensorId;
using traces::TensorKind;

std::optional<traces::Tensor> Named(const traces::Trace& tr, const std::string& name) {
  for (const traces::Tensor& t : tr.tensors) {
    if (t.name == name) return t;
  }
  return std::nullopt;
}

bool HasOp(const traces::Trace& tr, const std::string& name) {
  for (const traces::Op& op : tr.ops) {
    if (op.name == name) return true;
  }
  return false;
}

// b 2, s 256, vocab 1000 padded to 1024 (128·t, t 1): the logits are
// 2·256·1024 elements, 1 MiB in fp16 and 2 MiB as their fp32 copy.
constexpr int64_t kLogitElements = 2 * 256 * 1024;

TEST(Loss, Fp16ModelSavesAnFp32SoftmaxOfTheLogitsSize) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 1));
  const auto logits = Named(tr, "logits");
  const auto fp32 = Named(tr, "logits.float");
  const auto softmax = Named(tr, "loss.softmax");
  const auto grad = Named(tr, "logits.grad");
  const auto grad16 = Named(tr, "logits.grad.half");
  ASSERT_TRUE(logits && fp32 && softmax && grad && grad16);
  EXPECT_EQ(logits->bytes, kLogitElements * 2);
  EXPECT_EQ(fp32->dtype, DType::kFp32);
  EXPECT_EQ(fp32->bytes, kLogitElements * 4);
  EXPECT_EQ(fp32->kind, TensorKind::kActivation);
  // The softmax is the fp32 copy's storage, saved for the backward; the 16-bit
  // logits are not read by any backward op.
  EXPECT_EQ(tr.StorageOf(softmax->id), fp32->id);
  EXPECT_TRUE(tr.tensor(fp32->id).saved_for_backward);
  EXPECT_FALSE(logits->saved_for_backward);
  // Backward writes the gradient over the softmax and casts it back to fp16.
  EXPECT_EQ(tr.StorageOf(grad->id), fp32->id);
  EXPECT_EQ(grad->kind, TensorKind::kGradient);
  EXPECT_EQ(grad16->dtype, DType::kFp16);
  EXPECT_EQ(grad16->bytes, logits->bytes);
  EXPECT_TRUE(HasOp(tr, "logits.float"));
  EXPECT_TRUE(HasOp(tr, "logits.float.bwd"));
}

TEST(Loss, Fp16LmCrossEntropyRunsTheLossOnTheLogits) {
  ModelConfig c = Gpt(2, 256, 512, 8, 1);
  c.fp16_lm_cross_entropy = true;
  const traces::Trace tr = MustBuild(c);
  const auto logits = Named(tr, "logits");
  const auto softmax = Named(tr, "loss.softmax");
  ASSERT_TRUE(logits && softmax);
  EXPECT_FALSE(Named(tr, "logits.float"));
  EXPECT_FALSE(HasOp(tr, "logits.float.bwd"));
  EXPECT_EQ(tr.StorageOf(softmax->id), logits->id);
  EXPECT_TRUE(logits->saved_for_backward);
}

// Megatron's _VocabParallelCrossEntropy.forward, one op a pass over the fp32 logits:
// max (read), subtract (read, write), exp (read, write), sum (read), divide (read,
// write): 32 bytes per logit, each in place over the fp32 copy's storage.
TEST(Loss, CrossEntropyRunsMegatronsFivePassesInPlace) {
  const traces::Trace tr = MustBuild(Gpt(2, 256, 512, 8, 1));
  const auto fp32 = Named(tr, "logits.float");
  ASSERT_TRUE(fp32);
  const std::vector<std::string> passes = {"loss.max", "loss.sub", "loss.exp", "loss.sum", "loss"};
  std::vector<std::string> seen;
  int64_t logit_bytes = 0;
  for (const traces::Op& op : tr.ops) {
    if (op.kind != OpKind::kLoss || op.phase != traces::Phase::kForward) continue;
    seen.push_back(op.name);
    for (TensorId t : op.inputs) {
      if (tr.StorageOf(t) == fp32->id) logit_bytes += tr.tensor(t).bytes;
    }
    for (TensorId t : op.outputs) {
      if (tr.StorageOf(t) == fp32->id) logit_bytes += tr.tensor(t).bytes;
    }
  }
  EXPECT_EQ(seen, passes);
  EXPECT_EQ(logit_bytes, 8 * fp32->bytes);  // 8 passes of 4 bytes a logit
  // The row maximum and sum are [s, b] (here [256, 2]) fp32 rows, not saved.
  const auto row_max = Named(tr, "loss.row_max");
  ASSERT_TRUE(row_max);
  EXPECT_EQ(row_max->bytes, 256 * 2 * 4);
  EXPECT_FALSE(row_max->saved_for_backward);
}

TEST(Loss, Fp32ModelHasNoCast) {
  ModelConfig c = Gpt(2, 256, 512, 8, 1);
  c.dtype = "fp32";
  const traces::Trace tr = MustBuild(c);
  EXPECT_FALSE(Named(tr, "logits.float"));
  const auto logits = Named(tr, "logits");
  ASSERT_TRUE(logits);
  EXPECT_EQ(logits->bytes, kLogitElements * 4);
  EXPECT_EQ(tr.StorageOf(Named(tr, "logits.grad")->id), logits->id);
}

TEST(Loss, ConfigFieldDefaultsToMegatronAndRoundTrips) {
  nlohmann::json j = ToJson(Gpt(2, 256, 512, 8, 1));
  EXPECT_FALSE(j.contains("fp16_lm_cross_entropy"));
  j["fp16_lm_cross_entropy"] = true;
  Result<ModelConfig> c = ModelConfigFromJson(j, "x.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->fp16_lm_cross_entropy);
  EXPECT_EQ(ToJson(*c).at("fp16_lm_cross_entropy"), true);
  j["fp16_lm_cross_entropy"] = "yes";
  EXPECT_EQ(ModelConfigFromJson(j, "x.json").status().message(),
            "x.json: fp16_lm_cross_entropy: expected true or false, got string");
}

}  // namespace
}  // namespace ssdtrain::models

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
  EXPECT_EQ(softmax->alias_of, fp32->id);
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
  EXPECT_EQ(softmax->alias_of, logits->id);
  EXPECT_TRUE(logits->saved_for_backward);
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

// The loss as Megatron-LM computes it (models/detail/head.h): on logits.float()
// unless fp16_lm_cross_entropy, the vocabulary-parallel cross-entropy's softmax
// saved in place over its input, the gradient written over that softmax; and as
// torch.nn.functional.cross_entropy does (cross_entropy "torch").
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "models/model_config.h"
#include "models/tests/test_configs.h"
#include "traces/storage_plan.h"

namespace ssdtrain::models {
namespace {

using testing::Gpt;
using testing::Llama;
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

// torch.nn.functional.cross_entropy (cross_entropy "torch"): log_softmax into a
// saved fp32 tensor of its own, nll_loss; backward writes nll_loss's gradient
// and log_softmax's, each a new fp32 logits-sized tensor.
TEST(Loss, TorchCrossEntropySavesLogSoftmaxAndWritesTwoGradients) {
  ModelConfig c = Llama(2);
  c.cross_entropy = "torch";
  const traces::Trace tr = MustBuild(c);
  const auto fp32 = Named(tr, "logits.float");
  const auto log_probs = Named(tr, "loss.log_probs");
  const auto g_nll = Named(tr, "loss.log_probs.grad");
  const auto g_in = Named(tr, "logits.grad");
  const auto g16 = Named(tr, "logits.grad.half");
  const auto labels = Named(tr, "labels");
  ASSERT_TRUE(fp32 && log_probs && g_nll && g_in && g16 && labels);
  const int64_t fp32_bytes = kLogitElements * 4;
  for (const auto& t : {*fp32, *log_probs, *g_nll, *g_in}) {
    EXPECT_EQ(t.bytes, fp32_bytes) << t.name;
    EXPECT_EQ(t.dtype, DType::kFp32) << t.name;
    EXPECT_EQ(tr.StorageOf(t.id), t.id) << t.name << " has a storage of its own";
  }
  EXPECT_TRUE(log_probs->saved_for_backward);
  EXPECT_FALSE(fp32->saved_for_backward);  // freed after log_softmax
  EXPECT_FALSE(Named(tr, "loss.softmax"));
  EXPECT_EQ(g16->dtype, DType::kBf16);
  std::vector<std::string> losses;
  for (const traces::Op& op : tr.ops) {
    if (op.kind != OpKind::kLoss) continue;
    losses.push_back(op.name);
    if (op.name == "loss.log_softmax") {
      // The row kernel reads its input three times (max, sum, write pass).
      EXPECT_EQ(op.bytes_read, 3 * fp32_bytes);
      EXPECT_EQ(op.bytes_written, fp32_bytes);
    } else if (op.name == "loss") {
      // One log-probability a row (2·256 rows) and the int64 labels.
      EXPECT_EQ(op.bytes_read, 2 * 256 * 4 + labels->bytes);
    } else if (op.name == "loss.bwd") {
      EXPECT_EQ(op.outputs, std::vector<TensorId>{g_nll->id});
      EXPECT_EQ(op.bytes_written, fp32_bytes);
    } else if (op.name == "loss.log_softmax.bwd") {
      EXPECT_EQ(op.inputs, (std::vector<TensorId>{g_nll->id, log_probs->id}));
      EXPECT_EQ(op.bytes_read, 3 * fp32_bytes);
      EXPECT_EQ(op.outputs, std::vector<TensorId>{g_in->id});
    }
  }
  EXPECT_EQ(losses, (std::vector<std::string>{"loss.log_softmax", "loss", "loss.bwd",
                                              "loss.log_softmax.bwd"}));
}

// What the two losses hold at once, to the byte: torch's backward holds the saved
// log-probabilities, nll_loss's gradient and log_softmax's (three fp32 logits-
// sized tensors) and then their 16-bit cast where Megatron's holds its fp32
// softmax and that cast. With a vocabulary large enough that the loss's backward
// is the peak: 1.5 fp32 logits more.
TEST(Loss, TorchCrossEntropyPeaksOneAndAHalfFp32LogitsAboveMegatrons) {
  ModelConfig c = Llama(2);
  c.vocab = 32000;  // 32000 rows (a multiple of 128): 2·256·32000 logits
  const traces::Trace vp = MustBuild(c);
  c.cross_entropy = "torch";
  const traces::Trace torch = MustBuild(c);
  const int64_t fp32_bytes = int64_t{2} * 256 * 32000 * 4;
  auto peak = [](const traces::Trace& tr) {
    Result<traces::StoragePlan> sp = traces::ResolveStorages(tr, "test");
    EXPECT_TRUE(sp.ok()) << sp.status().ToString();
    return traces::ComputeStaticPeaks(tr, *sp).device_bytes;
  };
  EXPECT_EQ(peak(torch) - peak(vp), fp32_bytes + fp32_bytes / 2);
  // The three live together at log_softmax's backward.
  Result<traces::StoragePlan> sp = traces::ResolveStorages(torch, "test");
  ASSERT_TRUE(sp.ok());
  traces::OpId at = traces::kNoOp;
  for (const traces::Op& op : torch.ops) {
    if (op.name == "loss.log_softmax.bwd") at = op.id;
  }
  for (const char* name : {"loss.log_probs", "loss.log_probs.grad", "logits.grad"}) {
    const traces::StorageInfo& s = sp->of(Named(torch, name)->id);
    EXPECT_LE(s.producer, at) << name;
    EXPECT_GE(s.last_use, at) << name;
  }
}

TEST(Loss, CrossEntropyFieldRoundTripsAndIsRefusedAtTensorParallel) {
  nlohmann::json j = ToJson(Llama(2));
  EXPECT_FALSE(j.contains("cross_entropy"));
  j["cross_entropy"] = "torch";
  Result<ModelConfig> c = ModelConfigFromJson(j, "x.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->cross_entropy, "torch");
  EXPECT_EQ(ToJson(*c).at("cross_entropy"), "torch");
  j["cross_entropy"] = "fused";
  EXPECT_EQ(ModelConfigFromJson(j, "x.json").status().message(),
            "x.json: cross_entropy: unknown value \"fused\", expected vocab_parallel or torch "
            "(vocab_parallel: Megatron's in-place cross-entropy; torch: "
            "torch.nn.functional.cross_entropy, log_softmax and nll_loss)");
  j["cross_entropy"] = "torch";
  j["tp"] = 2;
  EXPECT_EQ(ModelConfigFromJson(j, "x.json").status().message(),
            "x.json: tp: cross_entropy torch is modelled at tp 1 only (its input is the whole "
            "vocabulary's logits; torchtitan's tensor parallel runs loss_parallel, vocab_parallel "
            "here)");
}

}  // namespace
}  // namespace ssdtrain::models

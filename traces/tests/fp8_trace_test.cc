// FP8 tensors in the trace format (traces/fp8.h): their bytes with the
// recipe's scales, the header's recipe and the GEMMs' fp8 flag read and
// written, and each inconsistency refused with its path.
#include <gtest/gtest.h>

#include "traces/fp8.h"
#include "traces/io.h"
#include "traces/tests/small_trace.h"
#include "traces/validate.h"

namespace ssdtrain::traces {
namespace {

using nlohmann::json;

TEST(Fp8Bytes, ScalesFollowEachRecipe) {
  const std::vector<int64_t> x = {1000, 2, 4096};  // 2000 rows of 4096
  const int64_t elements = 1000 * 2 * 4096;
  EXPECT_EQ(Fp8Bytes(Fp8Recipe::kDelayed, x, Fp8Blocks::kVector), elements + 4);
  EXPECT_EQ(Fp8Bytes(Fp8Recipe::kCurrent, x, Fp8Blocks::kWeight), elements + 4);
  EXPECT_EQ(Fp8Bytes(Fp8Recipe::kBlockwise, x, Fp8Blocks::kVector), elements + 2000 * 32 * 4);
  // 2-D blocks: ⌈2000/128⌉ · ⌈4096/128⌉ = 16 · 32.
  EXPECT_EQ(Fp8Bytes(Fp8Recipe::kBlockwise, x, Fp8Blocks::kWeight), elements + 16 * 32 * 4);
  EXPECT_EQ(Fp8Bytes(Fp8Recipe::kMxfp8, x, Fp8Blocks::kVector), elements + 2000 * 128);
  // A partial block costs a whole scale: 4100 columns are 33 blocks of 128, 129 of 32.
  EXPECT_EQ(Fp8ScaleBytes(Fp8Recipe::kBlockwise, {10, 4100}, Fp8Blocks::kVector), 10 * 33 * 4);
  EXPECT_EQ(Fp8ScaleBytes(Fp8Recipe::kMxfp8, {10, 4100}, Fp8Blocks::kWeight), 10 * 129);
  EXPECT_EQ(Fp8Bytes(Fp8Recipe::kOff, x, Fp8Blocks::kVector), elements);
  // Gathered from 4 shards under a per-tensor recipe: 4 scales; never 1 (that
  // is Fp8Bytes), and not under the block recipes, whose scales gather whole.
  EXPECT_TRUE(IsGatheredFp8Bytes(Fp8Recipe::kCurrent, x, elements + 16));
  EXPECT_FALSE(IsGatheredFp8Bytes(Fp8Recipe::kCurrent, x, elements + 4));
  EXPECT_FALSE(IsGatheredFp8Bytes(Fp8Recipe::kCurrent, x, elements + 18));
  EXPECT_FALSE(IsGatheredFp8Bytes(Fp8Recipe::kCurrent, x, elements + 4 * 2001));
  EXPECT_FALSE(IsGatheredFp8Bytes(Fp8Recipe::kBlockwise, x, elements + 16));
  for (const char* name : {"delayed", "current", "blockwise", "mxfp8"}) {
    ASSERT_TRUE(ParseFp8Recipe(name).has_value()) << name;
    EXPECT_EQ(ToString(*ParseFp8Recipe(name)), name);
  }
  EXPECT_EQ(ParseFp8Recipe("off"), Fp8Recipe::kOff);
  EXPECT_FALSE(ParseFp8Recipe("e4m3").has_value());
}

// The small trace with its activation `a` in FP8 under `recipe`.
Trace Fp8Trace(const std::string& recipe) {
  Trace t = testing::SmallTrace();
  t.header.fp8 = recipe;
  Tensor& a = t.tensors[2];
  a.dtype = DType::kFp8;
  a.bytes = Fp8Bytes(*ParseFp8Recipe(recipe), a.shape, Fp8Blocks::kVector);
  t.ops[4].gemm->fp8 = true;  // fc_wgrad reads it
  return t;
}

TEST(Fp8Trace, RoundTripsAndValidates) {
  const Trace t = Fp8Trace("blockwise");
  ASSERT_TRUE(Validate(t, "t.json").ok()) << Validate(t, "t.json").ToString();
  const json j = ToJson(t);
  EXPECT_EQ(j["header"]["fp8"], "blockwise");
  EXPECT_EQ(j["tensors"][2]["dtype"], "fp8");
  EXPECT_EQ(j["ops"][4]["gemm"]["fp8"], true);
  EXPECT_FALSE(j["ops"][0]["gemm"].contains("fp8"));
  const Result<Trace> back = TraceFromJson(j, "t.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), j);
  EXPECT_EQ(Fingerprint(*back), Fingerprint(t));
  EXPECT_NE(Fingerprint(t), Fingerprint(Fp8Trace("delayed")));
  // Without FP8 the header writes no fp8 field, as before.
  EXPECT_FALSE(ToJson(testing::SmallTrace())["header"].contains("fp8"));
}

TEST(Fp8Trace, InconsistenciesAreRefusedWithTheirPath) {
  Trace t = Fp8Trace("delayed");
  t.tensors[2].bytes += 1;
  EXPECT_EQ(Validate(t, "t.json").message(),
            "t.json: tensors[2].bytes: 69 does not match shape and the delayed recipe (64 fp8 "
            "elements and 4 bytes of scales)");
  t = Fp8Trace("delayed");
  t.header.fp8 = "";
  EXPECT_EQ(Validate(t, "t.json").message(),
            "t.json: tensors[2].dtype: an fp8 tensor in a trace whose header names no fp8 recipe");
  t = testing::SmallTrace();
  t.ops[0].gemm->fp8 = true;
  EXPECT_EQ(Validate(t, "t.json").message(),
            "t.json: ops[0].gemm.fp8: an FP8 GEMM in a trace whose header names no fp8 recipe");
  json j = ToJson(Fp8Trace("current"));
  j["header"]["fp8"] = "e5m2";
  EXPECT_EQ(TraceFromJson(j, "t.json").status().message(),
            "t.json: header.fp8: unknown recipe \"e5m2\"; expected delayed, current, blockwise "
            "or mxfp8");
}

}  // namespace
}  // namespace ssdtrain::traces

namespace ssdtrain::traces {
namespace {

// One normalisation of a recipe's name for configs, overrides and the CLI's
// check against a trace.
TEST(Fp8Name, OffIsEmptyRecipesKeepTheirNamesAndUnknownOnesPassThrough) {
  EXPECT_EQ(Fp8Name("off"), "");
  EXPECT_EQ(Fp8Name(""), "");
  EXPECT_EQ(Fp8Name("delayed"), "delayed");
  EXPECT_EQ(Fp8Name("mxfp8"), "mxfp8");
  EXPECT_EQ(Fp8Name("bogus"), "bogus");
}

}  // namespace
}  // namespace ssdtrain::traces

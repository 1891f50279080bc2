// The host sums of a reduction over ranks (exec/host_sum.h), in each dtype.
#include "exec/host_sum.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace ssdtrain::exec {
namespace {

TEST(HostSum, Fp32AddsElementwise) {
  std::vector<float> a = {1.5f, -2.0f, 0.25f}, b = {2.25f, 2.0f, 1e-8f};
  SumInto(traces::DType::kFp32, a.data(), b.data(), 3);
  EXPECT_EQ(b, (std::vector<float>{3.75f, 0.0f, 0.25f + 1e-8f}));
}

TEST(HostSum, Fp16AddsInFp32AndRoundsBack) {
  // 1.5 + 2.25 = 3.75 exactly; 2048 + 1 = 2049 is not an fp16 (its spacing
  // there is 2): it rounds to the even 2048.
  std::vector<uint16_t> a = {FloatToHalf(1.5f), FloatToHalf(1.0f)};
  std::vector<uint16_t> b = {FloatToHalf(2.25f), FloatToHalf(2048.0f)};
  SumInto(traces::DType::kFp16, a.data(), b.data(), 2);
  EXPECT_EQ(HalfToFloat(b[0]), 3.75f);
  EXPECT_EQ(HalfToFloat(b[1]), 2048.0f);
}

TEST(HostSum, Bf16RoundsToNearestEven) {
  // bf16 keeps 8 significant bits: 256 + 1 = 257 lies halfway between 256
  // and 258 and rounds to the even 256; 256 + 3 = 259 rounds up to 260.
  std::vector<uint16_t> a = {FloatToBf16(1.0f), FloatToBf16(3.0f)};
  std::vector<uint16_t> b = {FloatToBf16(256.0f), FloatToBf16(256.0f)};
  SumInto(traces::DType::kBf16, a.data(), b.data(), 2);
  EXPECT_EQ(Bf16ToFloat(b[0]), 256.0f);
  EXPECT_EQ(Bf16ToFloat(b[1]), 260.0f);
}

TEST(HostSum, IntegersWrap) {
  std::vector<uint8_t> a = {200, 1}, b = {100, 2};
  SumInto(traces::DType::kUint8, a.data(), b.data(), 2);
  EXPECT_EQ(b, (std::vector<uint8_t>{44, 3}));  // 300 mod 256
  std::vector<int64_t> c = {-5, 7}, d = {3, 4};
  SumInto(traces::DType::kInt64, c.data(), d.data(), 2);
  EXPECT_EQ(d, (std::vector<int64_t>{-2, 11}));
}

}  // namespace
}  // namespace ssdtrain::exec

// The host sums of a reduction over ranks (exec/host_sum.h), in each dtype.
#include "exec/host_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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

// The software binary16 against known encodings: the largest half, the
// first value that rounds to infinity, the smallest subnormal, ties to even.
TEST(HostSum, HalfConversionsKnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.996f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);         // a tie, to the even 0
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 ulp: a tie, to 2
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // a tie, to even
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // a tie, to even
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
}

// Every half round-trips, and where the compiler has _Float16 (gcc; not
// clang 14 on x86), every half and a sweep of floats convert as it does.
TEST(HostSum, HalfConversionsMatchTheHardwareType) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << h;
#if defined(__FLT16_MAX__)
    _Float16 x;
    const auto bits = static_cast<uint16_t>(h);
    std::memcpy(&x, &bits, 2);
    ASSERT_EQ(f, static_cast<float>(x)) << h;
#endif
  }
#if defined(__FLT16_MAX__)
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4099) {
    const auto bits = static_cast<uint32_t>(b);
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    const _Float16 x = static_cast<_Float16>(f);
    uint16_t expected;
    std::memcpy(&expected, &x, 2);
    ASSERT_EQ(FloatToHalf(f), expected) << bits;
  }
#endif
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

// E4M3 (OCP FN): every finite code round-trips through float; sums round to
// nearest even and saturate at 448; the largest magnitude is 0x7e, NaN 0x7f.
TEST(HostSum, Fp8E4m3RoundsToNearestEvenAndSaturates) {
  for (int code = 0; code < 256; ++code) {
    const auto v = static_cast<uint8_t>(code);
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(E4m3ToFloat(v))) << code;
      continue;
    }
    EXPECT_EQ(FloatToE4m3(E4m3ToFloat(v)), code == 0x80 ? 0x80 : v) << code;
  }
  EXPECT_EQ(E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(E4m3ToFloat(0x01), 0.001953125f);  // the smallest subnormal, 2^-9
  EXPECT_EQ(E4m3ToFloat(0x38), 1.0f);
  // Between 16 and 18 (spacing 2 at [16, 32)): 17 is a tie and rounds to the
  // even code, 16; 17.5 rounds up to 18. 300 + 300 saturates to 448.
  std::vector<uint8_t> a = {FloatToE4m3(1.0f), FloatToE4m3(1.5f), FloatToE4m3(288.0f),
                            FloatToE4m3(-2.0f)};
  std::vector<uint8_t> b = {FloatToE4m3(16.0f), FloatToE4m3(16.0f), FloatToE4m3(288.0f),
                            FloatToE4m3(0.5f)};
  SumInto(traces::DType::kFp8, a.data(), b.data(), 4);
  EXPECT_EQ(E4m3ToFloat(b[0]), 16.0f);
  EXPECT_EQ(E4m3ToFloat(b[1]), 18.0f);
  EXPECT_EQ(E4m3ToFloat(b[2]), 448.0f);
  EXPECT_EQ(E4m3ToFloat(b[3]), -1.5f);
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

#include "exec/host_sum.h"

#include <cmath>
#include <cstring>

namespace ssdtrain::exec {
namespace {

template <typename T>
void Add(const void* in, void* inout, int64_t count) {
  auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int64_t i = 0; i < count; ++i) b[i] = static_cast<T>(b[i] + a[i]);
}

void AddE4m3(const void* in, void* inout, int64_t count) {
  auto* a = static_cast<const uint8_t*>(in);
  auto* b = static_cast<uint8_t*>(inout);
  for (int64_t i = 0; i < count; ++i) b[i] = FloatToE4m3(E4m3ToFloat(b[i]) + E4m3ToFloat(a[i]));
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Add16(const void* in, void* inout, int64_t count) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int64_t i = 0; i < count; ++i) b[i] = FromFloat(ToFloat(b[i]) + ToFloat(a[i]));
}

}  // namespace

// IEEE 754 binary16 in software: clang 14 has no _Float16 on x86 (the
// sanitizer builds), and the conversions are exact (to float) or rounded to
// nearest even (from float), as the hardware's.
float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  uint32_t bits = 0;
  if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
  } else if (exponent == 31) {  // infinity or NaN
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // infinity, or NaN kept quiet
    return static_cast<uint16_t>(
        sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u | ((magnitude >> 13) & 0x3ffu) : 0u));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    float f;
    std::memcpy(&f, &magnitude, 4);
    // f · 2^24 is exact; nearbyint rounds it to nearest even (the default mode).
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(f * 16777216.0f)));
  }
  uint32_t h = (((magnitude >> 23) - 112) << 10) | ((magnitude >> 13) & 0x3ffu);
  const uint32_t rest = magnitude & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float x) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// E4M3 (OCP "FN"): bias 7, three mantissa bits, no infinities; 0x7f and
// 0xff are NaN, 448 the largest finite value.
float E4m3ToFloat(uint8_t v) {
  const int exponent = (v >> 3) & 0xf;
  const int mantissa = v & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::nanf("");
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)  // m/8 · 2^-6
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (v & 0x80) ? -magnitude : magnitude;
}

uint8_t FloatToE4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  const float magnitude = std::fabs(x);
  if (magnitude >= 448.0f) return static_cast<uint8_t>(sign | 0x7e);  // saturates
  // The nearest of the 127 finite magnitudes 0x00 .. 0x7e (increasing with
  // the code), ties to the even code.
  int lo = 0, hi = 0x7e;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (E4m3ToFloat(static_cast<uint8_t>(mid)) <= magnitude ? lo : hi) = mid;
  }
  const float below = magnitude - E4m3ToFloat(static_cast<uint8_t>(lo));
  const float above = E4m3ToFloat(static_cast<uint8_t>(hi)) - magnitude;
  const int code = below < above ? lo : above < below ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<uint8_t>(sign | code);
}

void SumInto(traces::DType dtype, const void* in, void* inout, int64_t count) {
  switch (dtype) {
    case traces::DType::kFp32:
      return Add<float>(in, inout, count);
    case traces::DType::kFp16:
      return Add16<HalfToFloat, FloatToHalf>(in, inout, count);
    case traces::DType::kBf16:
      return Add16<Bf16ToFloat, FloatToBf16>(in, inout, count);
    case traces::DType::kInt32:
      return Add<uint32_t>(in, inout, count);
    case traces::DType::kInt64:
      return Add<uint64_t>(in, inout, count);
    case traces::DType::kUint8:
      return Add<uint8_t>(in, inout, count);
    case traces::DType::kFp8:
      return AddE4m3(in, inout, count);
  }
}

}  // namespace ssdtrain::exec

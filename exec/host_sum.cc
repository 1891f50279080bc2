#include "exec/host_sum.h"

#include <cstring>

namespace ssdtrain::exec {
namespace {

template <typename T>
void Add(const void* in, void* inout, int64_t count) {
  auto* a = static_cast<const T*>(in);
  auto* b = static_cast<T*>(inout);
  for (int64_t i = 0; i < count; ++i) b[i] = static_cast<T>(b[i] + a[i]);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Add16(const void* in, void* inout, int64_t count) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int64_t i = 0; i < count; ++i) b[i] = FromFloat(ToFloat(b[i]) + ToFloat(a[i]));
}

}  // namespace

float HalfToFloat(uint16_t h) {
  _Float16 f;
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}

uint16_t FloatToHalf(float x) {
  const _Float16 f = static_cast<_Float16>(x);
  uint16_t h;
  std::memcpy(&h, &f, 2);
  return h;
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
  }
}

}  // namespace ssdtrain::exec

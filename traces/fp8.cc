#include "traces/fp8.h"

namespace ssdtrain::traces {
namespace {

constexpr int64_t kBlock = 128;    // blockwise: elements per block side
constexpr int64_t kMxBlock = 32;   // mxfp8: elements per block
constexpr int64_t kFp32Bytes = 4;  // a blockwise or per-tensor scale
constexpr int64_t kE8m0Bytes = 1;  // an mxfp8 scale

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::optional<Fp8Recipe> ParseFp8Recipe(std::string_view s) {
  if (s.empty() || s == "off") return Fp8Recipe::kOff;
  if (s == "delayed") return Fp8Recipe::kDelayed;
  if (s == "current") return Fp8Recipe::kCurrent;
  if (s == "blockwise") return Fp8Recipe::kBlockwise;
  if (s == "mxfp8") return Fp8Recipe::kMxfp8;
  return std::nullopt;
}

std::string Fp8Name(std::string_view s) {
  const std::optional<Fp8Recipe> r = ParseFp8Recipe(s);
  return std::string(r ? ToString(*r) : s);
}

std::string_view ToString(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::kOff:
      return "";
    case Fp8Recipe::kDelayed:
      return "delayed";
    case Fp8Recipe::kCurrent:
      return "current";
    case Fp8Recipe::kBlockwise:
      return "blockwise";
    case Fp8Recipe::kMxfp8:
      return "mxfp8";
  }
  return "";
}

int64_t Fp8ScaleBytes(Fp8Recipe recipe, const std::vector<int64_t>& shape, Fp8Blocks blocks) {
  const int64_t cols = shape.empty() ? 1 : shape.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  switch (recipe) {
    case Fp8Recipe::kOff:
      return 0;
    case Fp8Recipe::kDelayed:
    case Fp8Recipe::kCurrent:
      return kFp32Bytes;
    case Fp8Recipe::kBlockwise:
      if (blocks == Fp8Blocks::kWeight)
        return CeilDiv(rows, kBlock) * CeilDiv(cols, kBlock) * kFp32Bytes;
      return rows * CeilDiv(cols, kBlock) * kFp32Bytes;
    case Fp8Recipe::kMxfp8:
      return rows * CeilDiv(cols, kMxBlock) * kE8m0Bytes;
  }
  return 0;
}

int64_t Fp8Bytes(Fp8Recipe recipe, const std::vector<int64_t>& shape, Fp8Blocks blocks) {
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  return elements + Fp8ScaleBytes(recipe, shape, blocks);
}

bool IsGatheredFp8Bytes(Fp8Recipe recipe, const std::vector<int64_t>& shape, int64_t bytes) {
  if (recipe != Fp8Recipe::kDelayed && recipe != Fp8Recipe::kCurrent) return false;
  int64_t elements = 1, rows = 1;
  for (int64_t d : shape) elements *= d;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  const int64_t scales = bytes - elements;
  return scales > kFp32Bytes && scales % kFp32Bytes == 0 && scales / kFp32Bytes <= rows;
}

}  // namespace ssdtrain::traces

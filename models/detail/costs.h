// Floating-point operations per element of the memory-bound ops. Their time is
// set by bytes moved, so these only need to be the right order of magnitude;
// backward ops count twice their forward figure.
#pragma once

#include <cstdint>
#include <vector>

namespace ssdtrain::models::detail {

inline constexpr int64_t kNormFlops = 8;     // mean, variance, normalise, scale, shift
inline constexpr int64_t kSoftmaxFlops = 5;  // scale, max, subtract, exp, sum and divide
inline constexpr int64_t kDropoutFlops = 2;  // compare a random draw, scale
inline constexpr int64_t kGeluFlops = 8;     // tanh approximation
inline constexpr int64_t kReluFlops = 1;
inline constexpr int64_t kSwigluFlops = 6;   // silu of the gate, times the up projection
inline constexpr int64_t kGegluFlops = 9;    // gelu (tanh) of the gate, times the up projection
inline constexpr int64_t kSiluFlops = 5;     // x · sigmoid(x): negate, exp, add, divide, multiply
inline constexpr int64_t kMulFlops = 1;      // the gated product, on its own (separate projections)
inline constexpr int64_t kRotaryFlops = 3;   // two multiplies and an add per element
inline constexpr int64_t kSoftcapFlops = 3;  // cap · tanh(x / cap): divide, tanh, multiply
inline constexpr int64_t kAddFlops = 1;      // residual add, bias add, gradient sum
// Softmax cross-entropy per logit: one a pass (max, subtract, exp, sum, divide).
inline constexpr int64_t kLossPassFlops = 1;
inline constexpr int64_t kLossFlops = 5 * kLossPassFlops;
inline constexpr int64_t kBackwardFactor = 2;  // backward of a memory-bound op vs forward
// FlashAttention's backward recomputes the scores (one more s×s×d product per
// head): 5 products against the forward's 2.
inline constexpr int64_t kFlashBackwardNum = 5;
inline constexpr int64_t kFlashBackwardDen = 2;

inline int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace ssdtrain::models::detail

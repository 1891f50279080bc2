// The CUDA backend's GEMM workspace layout, kept free of CUDA so that it is
// unit-tested in every build (exec/tests/cuda_host_logic_test.cc).
//
// A GEMM whose operand buffer is too small for its m x n x k x batch shape (a
// view, or an attention op run as a GEMM of the same FLOPs) takes that operand
// from the workspace: [A: m*k][B: k*n][C: m*n * OutputChunk]. A and B there
// have batch stride 0 (every matrix of the batch reads the same elements,
// which cuBLAS allows). C never does: matrices of one batched call written to
// the same elements would race, and cuBLAS leaves overlapping outputs
// undefined. C gets a real stride over OutputChunk matrices, and a larger
// batch runs as consecutive batched calls of at most OutputChunk matrices on
// the one compute stream, each call's output overwriting the previous one's
// in stream order.
//
// Sizes are in elements of at most kMaxElementBytes (fp32), the same for
// every dtype, so one reservation fits fp16, bf16 and fp32 GEMMs.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ssdtrain::exec::detail {

constexpr int64_t kMaxElementBytes = 4;  // fp32, the widest GEMM dtype
// The C region holds as many output matrices as fit in this (at least one):
// large enough that a batch of small matrices (the 256 x 256 attention
// stand-in: 256 of them, 8.6 GFLOP, ~12 us on an H200) keeps each call well
// above the host's few microseconds of enqueueing one, so the GPU, not the
// issuing thread, sets the op's time; small beside a GPU's memory. The region
// counts in the workspace the replay checks against the capacity.
constexpr int64_t kOutputRegionBytes = int64_t{64} << 20;

// Output matrices per batched call when C is in the workspace: 1..batch.
constexpr int64_t OutputChunk(int64_t m, int64_t n, int64_t batch) {
  const int64_t fit = kOutputRegionBytes / std::max<int64_t>(1, m * n * kMaxElementBytes);
  return std::clamp<int64_t>(fit, 1, std::max<int64_t>(1, batch));
}

// Element offsets of the three regions, and the workspace's size in bytes.
constexpr int64_t WorkspaceAOffset() { return 0; }
constexpr int64_t WorkspaceBOffset(int64_t m, int64_t k) { return m * k; }
constexpr int64_t WorkspaceCOffset(int64_t m, int64_t n, int64_t k) { return m * k + k * n; }
constexpr int64_t WorkspaceBytes(int64_t m, int64_t n, int64_t k, int64_t batch) {
  return (m * k + k * n + m * n * OutputChunk(m, n, batch)) * kMaxElementBytes;
}

}  // namespace ssdtrain::exec::detail

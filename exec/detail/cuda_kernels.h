// Host wrappers of the CUDA backend's kernels (exec/cuda_kernels.cu). Each
// enqueues on `stream` and returns that launch's own error (never an older
// error of the calling thread).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ssdtrain::exec::detail {

// Fills `bytes` at `dst` with the PatternByte sequence of `seed`.
cudaError_t LaunchFillPattern(void* dst, int64_t bytes, uint64_t seed, cudaStream_t stream);
// Writes the smallest mismatching byte offset into *first_mismatch (a device
// int64 preset to `bytes`; left at `bytes` when all match).
cudaError_t LaunchCheckPattern(const void* src, int64_t bytes, uint64_t seed,
                               unsigned long long* first_mismatch, cudaStream_t stream);
// Reads `bytes` at `src` (a memory-bound pass); writes to *sink only for a
// value that never occurs, so the reads cannot be elided.
cudaError_t LaunchTouchRead(const void* src, int64_t bytes, unsigned long long* sink,
                            cudaStream_t stream);

}  // namespace ssdtrain::exec::detail

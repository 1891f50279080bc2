// The CUDA backend's ops (exec/detail/cuda_device.h): GEMMs on cuBLAS, with
// operands in the op's buffers or the workspace, attention as GEMMs of its
// FLOPs, the read and write kernels every other op runs, and the patterns.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <span>
#include <string>

#include "exec/cuda_error.h"
#include "exec/detail/cuda_device.h"
#include "exec/detail/cuda_kernels.h"
#include "exec/detail/device_words.h"
#include "exec/detail/gemm_workspace.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec::cuda_impl {
namespace {

cudaDataType_t CudaType(traces::DType dtype) {
  switch (dtype) {
    case traces::DType::kBf16:
      return CUDA_R_16BF;
    case traces::DType::kFp32:
      return CUDA_R_32F;
    default:
      return CUDA_R_16F;
  }
}

}  // namespace

Status CudaDevice::RunOpAsync(const traces::Op& op, const OpBuffers& buffers) {
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  if (buffers.inputs.size() != op.inputs.size() || buffers.outputs.size() != op.outputs.size()) {
    return Status::InvalidArgument("op " + std::to_string(op.id) + " (" + op.name +
                                   "): buffer count does not match its inputs and outputs");
  }
  if (op.gemm) {
    return Gemm(op.gemm->m, op.gemm->n, op.gemm->k, op.gemm->batch, buffers);
  }
  if (op.kind == traces::OpKind::kAttention && op.flops > 0) {
    const int64_t s = kAttentionGemmSide;
    SSDTRAIN_RETURN_IF_ERROR(TouchRead(buffers.inputs, op.bytes_read));
    OpBuffers none{{}, {}, buffers.dtype};
    SSDTRAIN_RETURN_IF_ERROR(Gemm(s, s, s, AttentionBatch(op), none));
    return TouchWrite(buffers.outputs, op.bytes_written);
  }
  SSDTRAIN_RETURN_IF_ERROR(TouchRead(buffers.inputs, op.bytes_read));
  return TouchWrite(buffers.outputs, op.bytes_written);
}

Status CudaDevice::FillPatternAsync(DeviceBuffer buffer, uint64_t seed, Stream stream) {
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  SSDTRAIN_CUDA_TRY(detail::LaunchFillPattern(buffer.ptr, buffer.bytes, seed, get(stream)));
  return Status::Ok();
}

Status CudaDevice::CheckPattern(DeviceBuffer buffer, uint64_t seed, Stream stream) {
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  const unsigned long long none = static_cast<unsigned long long>(buffer.bytes);
  cudaStream_t s = get(stream);
  // This stream's own word: checks on other streams may run at the same time.
  unsigned long long* word = words_ + detail::MismatchWord(stream);
  SSDTRAIN_CUDA_TRY(cudaMemcpyAsync(word, &none, sizeof(none), cudaMemcpyHostToDevice, s));
  SSDTRAIN_CUDA_TRY(detail::LaunchCheckPattern(buffer.ptr, buffer.bytes, seed, word, s));
  unsigned long long first = 0;
  SSDTRAIN_CUDA_TRY(cudaMemcpyAsync(&first, word, sizeof(first), cudaMemcpyDeviceToHost, s));
  SSDTRAIN_CUDA_TRY(cudaStreamSynchronize(s));
  if (first != none) {
    return Status::Corruption("pattern mismatch at byte " + std::to_string(first) + " of " +
                              std::to_string(buffer.bytes) + " (seed " + std::to_string(seed) +
                              ")");
  }
  return Status::Ok();
}

CudaDevice::Operand CudaDevice::Pick(const std::span<const DeviceBuffer>& buffers, size_t i,
                                     int64_t elems, int64_t batch, int64_t elt, int64_t ws_offset,
                                     long long ws_stride) const {
  if (i < buffers.size() && buffers[i].bytes >= elems * batch * elt) {
    return {static_cast<uint8_t*>(buffers[i].ptr), static_cast<long long>(elems), false};
  }
  return {static_cast<uint8_t*>(workspace_.ptr) + ws_offset * elt, ws_stride, true};
}

Status CudaDevice::Gemm(int64_t m, int64_t n, int64_t k, int64_t batch, const OpBuffers& buffers) {
  if (detail::WorkspaceBytes(m, n, k, batch) > workspace_.bytes) {
    return Status::FailedPrecondition("GEMM needs a larger workspace: call ReserveWorkspace");
  }
  const cudaDataType_t type = CudaType(buffers.dtype);
  const int64_t elt = traces::DTypeSize(buffers.dtype == traces::DType::kBf16 ||
                                                buffers.dtype == traces::DType::kFp32
                                            ? buffers.dtype
                                            : traces::DType::kFp16);
  // A and B in the workspace are shared by the batch (stride 0, read only);
  // C there has a real stride over OutputChunk matrices and a larger batch
  // runs in several calls (exec/detail/gemm_workspace.h).
  const Operand a = Pick(buffers.inputs, 0, m * k, batch, elt, detail::WorkspaceAOffset(), 0);
  const Operand b = Pick(buffers.inputs, 1, k * n, batch, elt, detail::WorkspaceBOffset(m, k), 0);
  const Operand c = Pick(buffers.outputs, 0, m * n, batch, elt, detail::WorkspaceCOffset(m, n, k),
                         static_cast<long long>(m * n));
  const bool c_in_workspace = c.in_workspace;
  const int64_t chunk = c_in_workspace ? detail::OutputChunk(m, n, batch) : batch;
  const float alpha = 1.0f, beta = 0.0f;
  for (int64_t done = 0; done < batch; done += chunk) {
    const int64_t count = std::min(chunk, batch - done);
    // Past the first call, operands with a real stride move on by `done`
    // matrices; C in the workspace starts over (stream order keeps the
    // calls' writes apart).
    const int64_t c_done = c_in_workspace ? 0 : done;
    SSDTRAIN_CUDA_TRY(cublas_->GemmStridedBatchedEx(
        blas_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
        static_cast<int>(k), &alpha, a.ptr + done * a.stride * elt, type, static_cast<int>(m),
        a.stride, b.ptr + done * b.stride * elt, type, static_cast<int>(k), b.stride, &beta,
        c.ptr + c_done * c.stride * elt, type, static_cast<int>(m), c.stride,
        static_cast<int>(count), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  if (c_in_workspace && !buffers.outputs.empty()) {
    // C went to the workspace: the outputs are still written, as the op would.
    int64_t out_bytes = 0;
    for (const DeviceBuffer& o : buffers.outputs) out_bytes += o.bytes;
    return TouchWrite(buffers.outputs, out_bytes);
  }
  return Status::Ok();
}

Status CudaDevice::TouchRead(std::span<const DeviceBuffer> buffers, int64_t bytes) {
  int64_t total = 0;
  for (const DeviceBuffer& b : buffers) total += b.bytes;
  while (total > 0 && bytes > 0) {
    for (const DeviceBuffer& b : buffers) {
      const int64_t n = std::min(bytes, b.bytes);
      SSDTRAIN_CUDA_TRY(
          detail::LaunchTouchRead(b.ptr, n, words_ + detail::kReadSinkWord, compute_));
      bytes -= n;
      if (bytes <= 0) break;
    }
  }
  return Status::Ok();
}

Status CudaDevice::TouchWrite(std::span<const DeviceBuffer> buffers, int64_t bytes) {
  int64_t total = 0;
  for (const DeviceBuffer& b : buffers) total += b.bytes;
  while (total > 0 && bytes > 0) {
    for (const DeviceBuffer& b : buffers) {
      const int64_t n = std::min(bytes, b.bytes);
      SSDTRAIN_CUDA_TRY(cudaMemsetAsync(b.ptr, 0x5a, static_cast<size_t>(n), compute_));
      bytes -= n;
      if (bytes <= 0) break;
    }
  }
  return Status::Ok();
}

}  // namespace ssdtrain::exec::cuda_impl

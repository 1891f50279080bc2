// The CUDA backend (built when nvcc is found; used when a GPU is present).
//
// - Device memory is one cudaMalloc'd arena of `capacity_bytes` (0: the GPU's
//   free memory less a margin for cuBLAS and the CUDA context), sub-allocated
//   first-fit on the host, so that Allocate and Free never synchronize the GPU
//   (cudaFree would). ResourceExhausted past the capacity.
// - Three non-blocking streams: compute, device-to-host, host-to-device.
//   Cross-stream order only through cudaEvents (Device::Record / Wait).
// - GEMM ops: cublasGemmStridedBatchedEx in the dtype OpBuffers::dtype names
//   (fp16, bf16 or fp32; fp32 accumulation), m x n x k x batch, with A, B and C
//   taken from the op's first inputs and first output when they are large
//   enough and otherwise from a workspace (stride 0 across the batch). Attention
//   ops without dims run a GEMM of the same FLOPs; every other kind is a read
//   kernel over bytes_read of its inputs plus cudaMemsetAsync over bytes_written
//   of its outputs.
// - Host memory registered with RegisterHostMemory (cudaHostRegister) copies at
//   full PCIe speed; the replay registers the offload engine's staging buffers.
// - Events carry timing: TimeNs maps cudaEventElapsedTime from an epoch event
//   (recorded and synchronized at construction) onto the host steady clock.
//   GPUDirect Storage (cuFile) is not used: the SSD path bounces through host
//   staging buffers.
#pragma once

#include <memory>
#include <string>

#include "exec/device.h"

namespace ssdtrain::exec {

// Both defined in every build: without CUDA, CudaAvailable says so and
// MakeCudaDevice fails with Unavailable.
bool CudaAvailable(std::string* why_not);
Result<std::unique_ptr<Device>> MakeCudaDevice(const DeviceOptions& options);

}  // namespace ssdtrain::exec

// The CUDA backend (built when nvcc and cuBLAS are found; used when a GPU is
// present).
//
// - Device memory is one cudaMalloc'd arena of `capacity_bytes` (0: the GPU's
//   free memory less a margin for cuBLAS and the CUDA context), sub-allocated
//   first-fit on the host, so that Allocate and Free never synchronize the GPU
//   (cudaFree would). ResourceExhausted past the capacity.
// - The GPU is DeviceOptions::cuda_device_index (InvalidArgument naming the
//   device count when there is no such GPU). Every call that enqueues work
//   first makes it the calling thread's current device, since the runtime's
//   current device is per thread and the replay drives streams from several.
// - Five non-blocking streams: compute, device-to-host, host-to-device (the
//   offload's copies), send and receive (the pipeline's messages).
//   Cross-stream order only through cudaEvents (Device::Record / Wait), made
//   with cudaEventBlockingSync so that waiting host threads sleep, not spin.
// - GEMM ops: cublasGemmStridedBatchedEx in the dtype OpBuffers::dtype names
//   (fp16, bf16 or fp32; fp32 accumulation), m x n x k x batch, with A, B and C
//   taken from the op's first inputs and first output when they are large
//   enough and otherwise from a workspace (exec/detail/gemm_workspace.h: A and
//   B shared by the batch, C with a real stride, a large batch in several
//   calls). fp32 GEMMs do not use TF32, as PyTorch's fp32 matmuls do not by
//   default (torch.backends.cuda.matmul.allow_tf32 = False): an fp32 model's
//   measured times are those of the training they stand for. Attention ops
//   without dims run a batch of 256-cubed GEMMs of the same FLOPs; every other
//   kind is a read kernel over bytes_read of its inputs plus cudaMemsetAsync
//   over bytes_written of its outputs.
// - Host memory registered with RegisterHostMemory (cudaHostRegister) copies at
//   full PCIe speed; the replay registers its staging region.
// - Events carry timing: TimeNs is the event's elapsed time from a recent
//   anchor event whose host steady-clock time is known
//   (exec/detail/event_clock.h), never from one epoch as old as the device,
//   whose float milliseconds would quantize op times to microseconds.
// - CheckPattern uses a device word of its stream's own
//   (exec/detail/device_words.h), so checks on different streams may run
//   from different threads at once.
//   The SSD path bounces through host staging buffers unless the replay
//   takes GPUDirect Storage (exec/cufile_backend.h), which moves a device
//   buffer's bytes to and from the files itself.
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

// The CUDA backend (exec/cuda_device.h): the device, its arena and its
// GEMM workspace; CudaAvailable and MakeCudaDevice. Its ops are in
// cuda_ops.cc, its copies, events and streams in cuda_streams.cc.
#include "exec/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>

#include "exec/cuda_error.h"
#include "exec/detail/cuda_device.h"
#include "exec/detail/device_words.h"
#include "exec/detail/format_bytes.h"
#include "exec/detail/gemm_workspace.h"
#include "exec/detail/range_allocator.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec {
namespace cuda_impl {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status BindDevice(int index) {
  thread_local int bound = -1;
  if (bound == index) return Status::Ok();
  SSDTRAIN_CUDA_TRY(cudaSetDevice(index));
  bound = index;
  return Status::Ok();
}

CudaDevice::~CudaDevice() {
  if (!BindDevice(options_.cuda_device_index).ok()) return;
  if (compute_ != nullptr) cudaDeviceSynchronize();
  if (blas_ != nullptr) cublas_->Destroy(blas_);
  anchor_.reset();
  for (cudaStream_t s : {compute_, d2h_, h2d_, send_, receive_, clock_}) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
  if (words_ != nullptr) cudaFree(words_);
  if (base_ != nullptr) cudaFree(base_);
}

Status CudaDevice::Init() {
  int count = 0;
  SSDTRAIN_CUDA_TRY(cudaGetDeviceCount(&count));
  if (options_.cuda_device_index < 0 || options_.cuda_device_index >= count) {
    return Status::InvalidArgument("CUDA device index " +
                                   std::to_string(options_.cuda_device_index) +
                                   " does not exist: this machine has " + std::to_string(count) +
                                   " CUDA device(s), numbered from 0");
  }
  SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
  cudaDeviceProp prop{};
  SSDTRAIN_CUDA_TRY(cudaGetDeviceProperties(&prop, options_.cuda_device_index));
  name_ = prop.name;
  size_t free_bytes = 0, total_bytes = 0;
  SSDTRAIN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int64_t usable = static_cast<int64_t>(free_bytes) - kFreeMemoryMargin;
  capacity_ = options_.capacity_bytes > 0 ? options_.capacity_bytes
                                          : usable / kFreeMemoryGranule * kFreeMemoryGranule;
  if (capacity_ > usable || capacity_ <= 0) {
    return Status::ResourceExhausted("device memory of " + detail::FormatBytes(capacity_) +
                                     " asked for, but " + name_ + " has " +
                                     detail::FormatBytes(static_cast<int64_t>(free_bytes)) +
                                     " free (less a 1 GiB margin); lower --device-memory");
  }
  capacity_ = capacity_ / kAlignment * kAlignment;
  void* base = nullptr;
  SSDTRAIN_CUDA_TRY(cudaMalloc(&base, static_cast<size_t>(capacity_)));
  base_ = static_cast<uint8_t*>(base);
  ranges_ = detail::RangeAllocator(capacity_, kAlignment);
  SSDTRAIN_CUDA_TRY(
      cudaMalloc(reinterpret_cast<void**>(&words_), detail::kDeviceWords * sizeof(*words_)));
  for (cudaStream_t* s : {&compute_, &d2h_, &h2d_, &send_, &receive_, &clock_}) {
    SSDTRAIN_CUDA_TRY(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(cublas_, Cublas());
  SSDTRAIN_CUDA_TRY(cublas_->Create(&blas_));
  SSDTRAIN_CUDA_TRY(cublas_->SetStream(blas_, compute_));
  // fp32 GEMMs stay fp32 (no TF32): PyTorch's default for fp32 matmuls
  // (torch.backends.cuda.matmul.allow_tf32 = False), which the measured
  // times must match; fp16 and bf16 GEMMs use tensor cores either way.
  SSDTRAIN_CUDA_TRY(cublas_->SetMathMode(blas_, CUBLAS_DEFAULT_MATH));
  std::lock_guard<std::mutex> lock(anchor_mu_);
  return TakeAnchor();
}

std::string CudaDevice::Describe() const {
  return "cuda:" + std::to_string(options_.cuda_device_index) + " " + name_ + " (arena " +
         detail::FormatBytes(capacity_) + ", cuBLAS, host-bounce SSD path)";
}

Result<DeviceBuffer> CudaDevice::Allocate(int64_t bytes) {
  if (bytes <= 0) {
    return Status::InvalidArgument("device allocation of " + std::to_string(bytes) + " bytes");
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<int64_t> offset = ranges_.Allocate(bytes);
  if (!offset) {
    return Status::ResourceExhausted(
        "GPU arena out of memory: allocating " + detail::FormatBytes(ranges_.Rounded(bytes)) +
        " with " + detail::FormatBytes(ranges_.used()) + " in use of a " +
        detail::FormatBytes(capacity_) + " capacity (largest free block " +
        detail::FormatBytes(ranges_.largest_free()) + ")");
  }
  peak_ = std::max(peak_, ranges_.used());
  return DeviceBuffer{base_ + *offset, bytes};
}

void CudaDevice::Free(DeviceBuffer buffer) {
  if (!buffer.valid()) return;
  std::lock_guard<std::mutex> lock(mu_);
  ranges_.Free(static_cast<uint8_t*>(buffer.ptr) - base_, buffer.bytes);
}

int64_t CudaDevice::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranges_.used();
}

int64_t CudaDevice::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void CudaDevice::ResetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = ranges_.used();
}

Result<int64_t> CudaDevice::ReserveWorkspace(const traces::Trace& trace) {
  // The layout is exec/detail/gemm_workspace.h's; its size rule is the
  // trace's (traces/storage_plan.h), so predictions count it too.
  const int64_t bytes = traces::ReplayWorkspaceBytes(trace, detail::kOutputRegionBytes);
  if (bytes <= workspace_.bytes) return workspace_.bytes;
  SSDTRAIN_RETURN_IF_ERROR(Synchronize(Stream::kCompute));
  Free(workspace_);
  workspace_ = {};
  auto buffer = Allocate(bytes);
  if (!buffer.ok()) return buffer.status().WithPrefix("GEMM workspace");
  workspace_ = *buffer;
  SSDTRAIN_CUDA_TRY(cudaMemsetAsync(workspace_.ptr, 0, static_cast<size_t>(bytes), compute_));
  return workspace_.bytes;
}

}  // namespace cuda_impl

bool CudaAvailable(std::string* why_not) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it
    if (why_not != nullptr)
      *why_not = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    return false;
  }
  if (count == 0) {
    if (why_not != nullptr) *why_not = "no CUDA device";
    return false;
  }
  // A GPU without cuBLAS cannot run the GEMMs: `auto` then picks the CPU.
  const auto cublas = cuda_impl::Cublas();
  if (!cublas.ok()) {
    if (why_not != nullptr) *why_not = cublas.status().message();
    return false;
  }
  return true;
}

Result<std::unique_ptr<Device>> MakeCudaDevice(const DeviceOptions& options) {
  std::string why_not;
  if (!CudaAvailable(&why_not)) return Status::Unavailable("no usable GPU: " + why_not);
  auto device = std::make_unique<cuda_impl::CudaDevice>(options);
  SSDTRAIN_RETURN_IF_ERROR(device->Init());
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace ssdtrain::exec

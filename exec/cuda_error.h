// The one checking macro for CUDA runtime and cuBLAS calls: a failing call
// becomes a Status naming the call, file:line and the API's error name.
// Included only by the CUDA backend's own files.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "exec/detail/cublas_api.h"
#include "traces/status.h"

namespace ssdtrain::exec::detail {

inline Status CudaStatus(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return Status::Ok();
  const Status::Code code =
      err == cudaErrorMemoryAllocation ? Status::Code::kResourceExhausted : Status::Code::kInternal;
  std::string msg = std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                    cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  return code == Status::Code::kResourceExhausted ? Status::ResourceExhausted(std::move(msg))
                                                  : Status::Internal(std::move(msg));
}

inline Status CudaStatus(cublasStatus_t err, const char* call, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  // cuBLAS is loaded at run time (exec/detail/cublas_api.h); a status only
  // exists once it is, so the names are there to be had.
  const cuda_impl::CublasApi* api = cuda_impl::CublasIfLoaded();
  const std::string name =
      api != nullptr ? std::string(api->GetStatusName(err)) + " (" + api->GetStatusString(err) + ")"
                     : "cublasStatus_t " + std::to_string(err);
  return Status::Internal(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                          ": " + name);
}

}  // namespace ssdtrain::exec::detail

// Returns a Status from the enclosing function when a CUDA or cuBLAS call fails.
#define SSDTRAIN_CUDA_TRY(call)                                                  \
  do {                                                                           \
    ::ssdtrain::Status ssdtrain_cuda_status_ =                                   \
        ::ssdtrain::exec::detail::CudaStatus((call), #call, __FILE__, __LINE__); \
    if (!ssdtrain_cuda_status_.ok()) return ssdtrain_cuda_status_;               \
  } while (0)

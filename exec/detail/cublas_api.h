// cuBLAS, loaded at run time by the CUDA backend's first device (dlopen), not
// linked: a process that links cuBLAS runs its initialisers at start, 0.4 s
// and 218 MB on this project's VM, so every `ssdtrain plan`, `--help` and
// test process paid for a GEMM library it never called. Built only with CUDA;
// the declarations (and so the ABI) are the toolkit's own cublas_v2.h.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "traces/status.h"

namespace ssdtrain::exec::cuda_impl {

// Every cuBLAS entry point the backend calls, typed from cublas_v2.h (whose
// macros map cublasCreate and the rest to their _v2 symbols).
struct CublasApi {
  decltype(&cublasCreate) Create = nullptr;
  decltype(&cublasDestroy) Destroy = nullptr;
  decltype(&cublasSetStream) SetStream = nullptr;
  decltype(&cublasSetMathMode) SetMathMode = nullptr;
  // The exported one (C++ also sees an inline overload taking cudaDataType).
  cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                         int, int, const void*, const void*, cudaDataType, int,
                                         long long, const void*, cudaDataType, int, long long,
                                         const void*, void*, cudaDataType, int, long long, int,
                                         cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusName) GetStatusName = nullptr;
  decltype(&cublasGetStatusString) GetStatusString = nullptr;
};

// The library's soname for the toolkit the build used ("libcublas.so.13").
std::string CublasSoname();

// Opens `library` (a soname or a path) and resolves every entry point.
// Unavailable naming the library and dlerror, or the first missing symbol.
// The library stays loaded (cuBLAS is not unloaded within a process).
Result<CublasApi> LoadCublas(const std::string& library);

// Loads cuBLAS once per process (later calls return the first answer): its
// soname first, as the dynamic linker would find it, then the library the
// build found (SSDTRAIN_CUBLAS_LIBRARY). Unavailable, naming both tries and
// the missing symbol or dlerror, when neither loads. Never unloaded.
Result<const CublasApi*> Cublas();

// The loaded API, or nullptr before a successful Cublas() (error texts only).
const CublasApi* CublasIfLoaded();

}  // namespace ssdtrain::exec::cuda_impl

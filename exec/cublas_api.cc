// The run-time cuBLAS loader (exec/detail/cublas_api.h).
#include "exec/detail/cublas_api.h"

#include <dlfcn.h>

#include <atomic>

namespace ssdtrain::exec::cuda_impl {
namespace {

// Resolves `name` into `*fn`; false (with `*missing` set) when absent.
template <typename Fn>
bool Resolve(void* lib, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (*fn == nullptr && missing->empty()) *missing = name;
  return *fn != nullptr;
}

struct Loaded {
  CublasApi api;
  Status status = Status::Ok();
};

std::atomic<const CublasApi*> loaded_api{nullptr};

}  // namespace

Result<CublasApi> LoadCublas(const std::string& library) {
  ::dlerror();
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = ::dlerror();
    return Status::Unavailable(err != nullptr ? std::string(err) : library + ": not loaded");
  }
  // The exported symbols are the _v2 ones wherever cublas_v2.h maps a name.
  CublasApi api;
  std::string missing;
  Resolve(lib, "cublasCreate_v2", &api.Create, &missing);
  Resolve(lib, "cublasDestroy_v2", &api.Destroy, &missing);
  Resolve(lib, "cublasSetStream_v2", &api.SetStream, &missing);
  Resolve(lib, "cublasSetMathMode", &api.SetMathMode, &missing);
  Resolve(lib, "cublasGemmStridedBatchedEx", &api.GemmStridedBatchedEx, &missing);
  Resolve(lib, "cublasGetStatusName", &api.GetStatusName, &missing);
  Resolve(lib, "cublasGetStatusString", &api.GetStatusString, &missing);
  if (!missing.empty()) {
    ::dlclose(lib);
    return Status::Unavailable(library + " has no " + missing);
  }
  return api;  // the library stays open for the process's life
}

std::string CublasSoname() { return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR); }

Result<const CublasApi*> Cublas() {
  static Loaded* const loaded = [] {
    auto* l = new Loaded;  // process lifetime, like the library
    Result<CublasApi> api = LoadCublas(CublasSoname());
    std::string why = api.ok() ? "" : api.status().message();
#ifdef SSDTRAIN_CUBLAS_LIBRARY
    if (!api.ok()) {
      api = LoadCublas(SSDTRAIN_CUBLAS_LIBRARY);
      why = api.ok() ? "" : why + "; " + api.status().message();
    }
#endif
    if (api.ok()) {
      l->api = *api;
      loaded_api.store(&l->api, std::memory_order_release);
    } else {
      l->status = Status::Unavailable(
          "cuBLAS could not be loaded (" + why + "); install the CUDA toolkit's cuBLAS " +
          std::to_string(CUBLAS_VER_MAJOR) + " or put it on LD_LIBRARY_PATH");
    }
    return l;
  }();
  if (!loaded->status.ok()) return loaded->status;
  return &loaded->api;
}

const CublasApi* CublasIfLoaded() { return loaded_api.load(std::memory_order_acquire); }

}  // namespace ssdtrain::exec::cuda_impl

// The CUDA entry points in a build without the CUDA backend.
#include "exec/cuda_device.h"

namespace ssdtrain::exec {

bool CudaAvailable(std::string* why_not) {
  if (why_not != nullptr)
    *why_not = "this build has no CUDA backend (configure with -DSSDTRAIN_CUDA=ON)";
  return false;
}

Result<std::unique_ptr<Device>> MakeCudaDevice(const DeviceOptions&) {
  return Status::Unavailable(
      "the CUDA backend is not built: reconfigure with -DSSDTRAIN_CUDA=ON where nvcc exists");
}

}  // namespace ssdtrain::exec

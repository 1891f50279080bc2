#include "exec/device.h"

#include "exec/cpu_device.h"
#include "exec/cuda_device.h"

namespace ssdtrain::exec {

std::string_view ToString(Stream s) {
  switch (s) {
    case Stream::kCompute:
      return "compute";
    case Stream::kDeviceToHost:
      return "d2h";
    case Stream::kHostToDevice:
      return "h2d";
    case Stream::kSend:
      return "send";
    case Stream::kReceive:
      break;
  }
  return "recv";
}

Result<std::unique_ptr<Device>> MakeDevice(BackendChoice choice, const DeviceOptions& options,
                                           std::string* picked) {
  std::string why_not;
  if (choice == BackendChoice::kCuda || choice == BackendChoice::kAuto) {
    if (CudaAvailable(&why_not)) {
      auto device = MakeCudaDevice(options);
      if (device.ok() && picked != nullptr) *picked = "cuda: " + (*device)->Describe();
      return device;
    }
    if (choice == BackendChoice::kCuda) {
      return Status::Unavailable("--backend cuda: no usable GPU: " + why_not +
                                 " (use --backend cpu or auto)");
    }
  }
  if (options.capacity_bytes <= 0) {
    return Status::InvalidArgument("the CPU backend needs a positive --device-memory");
  }
  auto device = std::unique_ptr<Device>(std::make_unique<CpuDevice>(options));
  if (picked != nullptr) {
    *picked = "cpu: " + device->Describe();
    if (choice == BackendChoice::kAuto) *picked += " (no GPU: " + why_not + ")";
  }
  return device;
}

}  // namespace ssdtrain::exec

#include "exec/cufile.h"

#include <dlfcn.h>

namespace ssdtrain::exec {
namespace {

// Resolves `name` into `fn`; false when the library lacks it.
template <typename Fn>
bool Resolve(void* handle, const char* name, Fn* fn) {
  void* p = ::dlsym(handle, name);
  *fn = reinterpret_cast<Fn>(p);
  return p != nullptr;
}

std::string ErrorText(const CuFileError& e) {
  return "cuFile error " + std::to_string(e.err) +
         (e.cu_err != 0 ? ", CUDA error " + std::to_string(e.cu_err) : std::string());
}

}  // namespace

Result<std::unique_ptr<CuFile>> CuFile::Open(const std::string& library) {
  std::unique_ptr<CuFile> f(new CuFile());
  ::dlerror();
  f->handle_ = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (f->handle_ == nullptr) {
    const char* why = ::dlerror();
    return Status::Unavailable(library + " was not found (" +
                               std::string(why != nullptr ? why : "dlopen failed") +
                               "): install NVIDIA's GPUDirect Storage (libcufile) to use it");
  }
  CuFileApi& a = f->api_;
  const std::pair<const char*, bool> entries[] = {
      {"cuFileDriverOpen", Resolve(f->handle_, "cuFileDriverOpen", &a.DriverOpen)},
      {"cuFileDriverClose", Resolve(f->handle_, "cuFileDriverClose", &a.DriverClose)},
      {"cuFileHandleRegister", Resolve(f->handle_, "cuFileHandleRegister", &a.HandleRegister)},
      {"cuFileHandleDeregister",
       Resolve(f->handle_, "cuFileHandleDeregister", &a.HandleDeregister)},
      {"cuFileBufRegister", Resolve(f->handle_, "cuFileBufRegister", &a.BufRegister)},
      {"cuFileBufDeregister", Resolve(f->handle_, "cuFileBufDeregister", &a.BufDeregister)},
      {"cuFileRead", Resolve(f->handle_, "cuFileRead", &a.Read)},
      {"cuFileWrite", Resolve(f->handle_, "cuFileWrite", &a.Write)},
  };
  for (const auto& [name, found] : entries) {
    if (!found) {
      return Status::Unavailable(library + " has no " + name +
                                 ": not a cuFile library this build can use");
    }
  }
  if (!Resolve(f->handle_, "cuFileGetVersion", &a.GetVersion)) {
    return Status::Unavailable(library +
                               " has no cuFileGetVersion: a cuFile too old for this build, which "
                               "needs one that reports its version");
  }
  if (const CuFileError e = a.GetVersion(&f->version_); e.err != 0) {
    return Status::Unavailable(library + ": cuFileGetVersion failed (" + ErrorText(e) + ")");
  }
  if (f->version_ < kMinCuFileVersion) {
    return Status::Unavailable(library + " reports cuFile version " + std::to_string(f->version_) +
                               " (" + f->VersionText() + "); this build needs 1.0 or newer");
  }
  if (const CuFileError e = a.DriverOpen(); e.err != 0) {
    return Status::Unavailable(library + " (cuFile " + f->VersionText() +
                               "): cuFileDriverOpen failed (" + ErrorText(e) +
                               "): is the nvidia-fs driver loaded and the file system "
                               "GDS-capable? (gdscheck -p says)");
  }
  f->driver_open_ = true;
  return f;
}

CuFile::~CuFile() {
  if (driver_open_) api_.DriverClose();
  if (handle_ != nullptr) ::dlclose(handle_);
}

std::string CuFile::VersionText() const {
  return std::to_string(version_ / 1000) + "." + std::to_string(version_ % 1000 / 10);
}

std::string_view ToString(GdsMode mode) {
  switch (mode) {
    case GdsMode::kOff:
      return "off";
    case GdsMode::kAuto:
      return "auto";
    case GdsMode::kOn:
      return "on";
  }
  return "?";
}

Result<GdsMode> ParseGdsMode(std::string_view s) {
  if (s == "off") return GdsMode::kOff;
  if (s == "auto") return GdsMode::kAuto;
  if (s == "on") return GdsMode::kOn;
  return Status::InvalidArgument("--gds: '" + std::string(s) + "' is not one of off, auto, on");
}

Result<StoragePath> ChooseStoragePath(GdsMode mode, bool cuda_device, bool plan_gds,
                                      const std::string& library) {
  constexpr const char* kBounce = "bounce buffers through pinned host memory";
  if (mode == GdsMode::kOff) return StoragePath{nullptr, std::string(kBounce) + " (--gds off)"};
  if (mode == GdsMode::kAuto && !cuda_device) {
    return StoragePath{nullptr, "the CPU backend's files (no GPU, no GPUDirect Storage)"};
  }
  if (mode == GdsMode::kAuto && !plan_gds) {
    return StoragePath{nullptr, std::string(kBounce) +
                                    ", the path the plan priced (its hardware's storage.gds is "
                                    "false; --gds on takes GPUDirect Storage)"};
  }
  Result<std::unique_ptr<CuFile>> f = CuFile::Open(library);
  if (!f.ok()) {
    if (mode == GdsMode::kOn) return f.status().WithPrefix("--gds on");
    return StoragePath{nullptr, std::string(kBounce) +
                                    ", not the GPUDirect Storage the plan "
                                    "priced: " +
                                    f.status().message()};
  }
  const std::string version = (*f)->VersionText();
  return StoragePath{std::shared_ptr<CuFile>(std::move(*f)),
                     "GPUDirect Storage: cuFile " + version + " (" + library +
                         "), device memory to the files and back without a host copy"};
}

}  // namespace ssdtrain::exec

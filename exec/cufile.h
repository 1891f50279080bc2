// GPUDirect Storage through cuFile loaded at run time (dlopen of
// libcufile.so.0, as kvikio's shim does): the build needs neither cuFile's
// header nor its library, and a node without them runs the bounce path.
//
// The ABI used is cuFile's published C API (cufile.h, the GPUDirect Storage
// API reference): CUfileError_t is { CUfileOpError err; CUresult cu_err; },
// both C enums, 0 on success; cuFileGetVersion reports the library's version
// as an int, read here as kvikio does, 1000 · major + 10 · minor (1130: 1.13;
// not checked against a cufile.h on this machine, which has none).
//
// Used by the cuFile backend (cufile_backend.h), which moves GPU memory to and
// from the offload files, and chosen for a replay by ChooseStoragePath below.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "traces/status.h"

namespace ssdtrain::exec {

inline constexpr const char* kCuFileLibrary = "libcufile.so.0";

// CUfileError_t's layout (plain C: the stand-in libraries return it from C functions).
struct CuFileError {
  int err;     // CUfileOpError: 0 CU_FILE_SUCCESS, 5000 + n the driver's errors
  int cu_err;  // CUresult
};

// CUfileDescr_t: a file for cuFileHandleRegister, by its fd (Linux).
struct CuFileDescr {
  int type;  // CUfileFileHandleType
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;  // NULL: the kernel's file system
};
inline constexpr int kCuFileHandleTypeOpaqueFd = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD

// The entry points, as cufile.h declares them (opaque handles as void*).
struct CuFileApi {
  CuFileError (*DriverOpen)() = nullptr;
  CuFileError (*DriverClose)() = nullptr;
  CuFileError (*GetVersion)(int* version) = nullptr;
  CuFileError (*HandleRegister)(void** handle, void* descr) = nullptr;
  void (*HandleDeregister)(void* handle) = nullptr;
  CuFileError (*BufRegister)(const void* base, size_t length, int flags) = nullptr;
  CuFileError (*BufDeregister)(const void* base) = nullptr;
  ssize_t (*Read)(void* handle, void* base, size_t size, off_t file_offset,
                  off_t buffer_offset) = nullptr;
  ssize_t (*Write)(void* handle, const void* base, size_t size, off_t file_offset,
                   off_t buffer_offset) = nullptr;
};

// The loader needs cuFileGetVersion, and a version of at least 1.0 from it
// (no later minimum is sourced here: the entry points above are cuFile 1.0's).
inline constexpr int kMinCuFileVersion = 1000;

// A loaded cuFile with its driver open; closes the driver and unloads the
// library when destroyed.
class CuFile {
 public:
  // Loads `library` (a name dlopen searches for, or a path), resolves every
  // entry point, checks the version (at least kMinCuFileVersion) and opens
  // the driver. Unavailable, naming the library and what failed: not found
  // (dlerror's text), an entry point missing, too old, or the driver's error.
  static Result<std::unique_ptr<CuFile>> Open(const std::string& library = kCuFileLibrary);
  ~CuFile();
  CuFile(const CuFile&) = delete;
  CuFile& operator=(const CuFile&) = delete;

  const CuFileApi& api() const { return api_; }
  int version() const { return version_; }  // e.g. 1130: cuFile 1.13
  std::string VersionText() const;          // "1.13"

 private:
  CuFile() = default;
  void* handle_ = nullptr;
  CuFileApi api_;
  int version_ = 0;
  bool driver_open_ = false;
};

// Whether a replay's offload I/O goes through GPUDirect Storage (replay --gds).
enum class GdsMode {
  kOff,   // bounce buffers through pinned host memory
  kAuto,  // the plan's path (its storage.gds) on the CUDA backend: cuFile where
          // the plan priced GPUDirect Storage and cuFile loads, else the bounce buffers
  kOn,    // cuFile or an error (on the CPU backend: its arena handed to cuFile as is)
};
std::string_view ToString(GdsMode mode);  // off, auto, on
Result<GdsMode> ParseGdsMode(std::string_view s);

// The path a replay's offload I/O takes, said once: `cufile` loaded (its
// bytes go from device memory to the files and back, no host copy) or null
// (the pinned bounce buffers), and a line saying which and, when cuFile was
// wanted and is not used, why.
struct StoragePath {
  std::shared_ptr<CuFile> cufile;
  std::string text;  // for the run file and one line on stderr
};
// `plan_gds`: the path the plan's prediction priced (traces::DriveLayout::gds).
// kOn with a cuFile that does not load is an error naming the library and why.
Result<StoragePath> ChooseStoragePath(GdsMode mode, bool cuda_device, bool plan_gds,
                                      const std::string& library = kCuFileLibrary);

}  // namespace ssdtrain::exec

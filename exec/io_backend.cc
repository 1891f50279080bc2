#include "exec/io_backend.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iostream>

#include "exec/posix_backend.h"
#include "exec/uring_backend.h"

namespace ssdtrain::exec {

// Worker threads for the posix fallback: one per request in flight, capped so a
// deep queue does not spawn hundreds of threads on a small machine.
constexpr int kMaxPosixThreads = 16;

void DefaultWarn(std::string_view text) { std::cerr << "ssdtrain: warning: " << text << "\n"; }

int IoBackend::OpenFile(int dir_fd, const char* name, int flags, int mode) {
  const int fd = ::openat(dir_fd, name, flags, mode);
  return fd >= 0 ? fd : -errno;
}

void IoBackend::CloseFile(int fd) { ::close(fd); }

std::string_view ToString(BackendKind kind) {
  switch (kind) {
    case BackendKind::kAuto:
      return "auto";
    case BackendKind::kUring:
      return "io_uring";
    case BackendKind::kPosix:
      return "posix";
  }
  return "?";
}

Result<BackendKind> ParseBackendKind(std::string_view s) {
  if (s == "auto") return BackendKind::kAuto;
  if (s == "io_uring" || s == "uring") return BackendKind::kUring;
  if (s == "posix") return BackendKind::kPosix;
  return Status::InvalidArgument("unknown I/O backend '" + std::string(s) +
                                 "': expected auto, io_uring or posix");
}

Result<std::unique_ptr<IoBackend>> MakeIoBackend(BackendKind kind, int queue_depth,
                                                 const WarnFn& warn) {
  if (queue_depth < 1) {
    return Status::InvalidArgument("queue depth must be at least 1, got " +
                                   std::to_string(queue_depth));
  }
  const int threads = std::min(queue_depth, kMaxPosixThreads);
  if (kind == BackendKind::kPosix) return MakePosixBackend(threads);
  auto uring = MakeUringBackend(queue_depth);
  if (uring.ok() || kind == BackendKind::kUring) return uring;
  (warn ? warn : DefaultWarn)(uring.status().message() +
                              "; using the pread/pwrite thread pool instead (slower)");
  return MakePosixBackend(threads);
}

}  // namespace ssdtrain::exec

// A directory of the caller's own removed, with the regular files in it, if the
// process is stopped by SIGINT or SIGTERM while the guard lives: what the
// offload engine does for its run directories (exec/detail/cleanup_registry.h),
// for a scratch directory that holds them (`ssdtrain demo`'s temporary --dir).
// Directories inside a listed one that are listed too go first.
#pragma once

#include <string>

#include "traces/status.h"

namespace ssdtrain::exec {

class ScopedSignalCleanup {
 public:
  // `dir`: an absolute path. Fails, naming it, when it is too long or the
  // process-wide table is full (exec::detail::kMaxCleanupDirs).
  static Result<ScopedSignalCleanup> Make(const std::string& dir);
  ~ScopedSignalCleanup();
  ScopedSignalCleanup(ScopedSignalCleanup&& other) noexcept;
  ScopedSignalCleanup& operator=(ScopedSignalCleanup&& other) noexcept;
  ScopedSignalCleanup(const ScopedSignalCleanup&) = delete;
  ScopedSignalCleanup& operator=(const ScopedSignalCleanup&) = delete;

 private:
  explicit ScopedSignalCleanup(int slot) : slot_(slot) {}
  int slot_ = -1;
};

}  // namespace ssdtrain::exec

// The process-wide list of live offload run directories, for SIGINT/SIGTERM.
//
// A signal handler may not lock or allocate, so the engine's destructor cannot
// run there; instead each run directory is entered in a fixed-size table of
// plain char arrays, and the handler (installed by Register, unless the signal
// is ignored: a process that ignores SIGINT keeps ignoring it, files and all)
// unlinks every regular file in each listed directory, removes the directory,
// restores the previous disposition and re-raises the signal. This table is the
// only global state of the offload engine and is used for nothing else.
#pragma once

#include <string>

#include "traces/status.h"

namespace ssdtrain::exec::detail {

// Live run directories tracked at once (an engine takes one per --dir).
inline constexpr int kMaxCleanupDirs = 64;

// Enters `dir` (an absolute path); returns a slot id for Unregister. Fails
// (never silently: a directory Ctrl-C would not remove is an error) when the
// table is full or the path does not fit PATH_MAX. Thread-safe.
Result<int> RegisterCleanupDir(const std::string& dir);
// Drops a slot (the engine removes the directory itself). Thread-safe.
void UnregisterCleanupDir(int slot);

// Unlinks the regular files in `dir` and removes it, using only
// async-signal-safe calls (open, getdents64, unlinkat, rmdir). Returns false
// when something could not be removed.
bool RemoveDirSignalSafe(const char* dir);

}  // namespace ssdtrain::exec::detail

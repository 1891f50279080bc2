// What an offload directory must be, checked in one place: by the offload
// engine when it opens one, and by a verb before its work (calibrate times
// GEMMs for seconds before it opens the engine; a replay loads and prepares
// its plan first), so that a bad --dir fails before anything is measured.
#pragma once

#include <string>

#include "traces/status.h"

namespace ssdtrain::exec {

// The file system `dir` is on when it keeps its files in memory: "tmpfs" or
// "ramfs" (statfs's f_type); empty for any other, or when statfs fails.
std::string MemoryFileSystem(const std::string& dir);

// `dir` exists, is a directory and is writable; and, unless
// `allow_buffered_io`, it is not on a file system in memory (MemoryFileSystem),
// where what is measured is memory, not a drive: tmpfs takes O_DIRECT since
// Linux 6.6, so the engine's O_DIRECT probe alone does not see it. Each error
// names the directory and what to change. Makes nothing.
Status CheckOffloadDir(const std::string& dir, bool allow_buffered_io);

}  // namespace ssdtrain::exec

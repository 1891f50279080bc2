#include "exec/offload_dir.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>

#include "exec/detail/errno_text.h"

namespace ssdtrain::exec {

using detail::ErrnoText;

std::string MemoryFileSystem(const std::string& dir) {
  struct statfs fs {};
  if (::statfs(dir.c_str(), &fs) != 0) return "";
  // f_type's width differs between architectures; the magic numbers fit 32 bits.
  const auto type = static_cast<unsigned long>(fs.f_type) & 0xffffffffUL;
  if (type == TMPFS_MAGIC) return "tmpfs";
  if (type == RAMFS_MAGIC) return "ramfs";
  return "";
}

Status CheckOffloadDir(const std::string& dir, bool allow_buffered_io) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return Status::NotFound("offload directory " + dir + " cannot be used: " + ErrnoText(errno) +
                            "; create it or point --dir elsewhere");
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("offload directory " + dir +
                                   " is not a directory; point --dir at a directory");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::IoError("offload directory " + dir + " is not writable (" + ErrnoText(errno) +
                           "); make it writable or point --dir elsewhere");
  }
  const std::string memory = MemoryFileSystem(dir);
  if (!memory.empty() && !allow_buffered_io) {
    return Status::Unavailable(
        "offload directory " + dir + " is on " + memory +
        ", which keeps its files in memory: what would be measured there is memory, not a "
        "drive; point --dir at a directory on the SSD, or pass --allow-buffered-io to run "
        "there anyway (the figures then say buffered I/O)");
  }
  return Status::Ok();
}

}  // namespace ssdtrain::exec

// SweepDeadRuns: removes the run directories (and their files) that processes
// killed without cleanup (SIGKILL, a crash, a power cut) left in an offload
// directory. A run directory is named ssdtrain-<pid>-<n>-<i>, and its engine
// holds an flock on it for as long as it lives.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "exec/detail/cleanup_registry.h"
#include "exec/detail/errno_text.h"
#include "exec/offload_engine.h"

namespace ssdtrain::exec {
namespace {

// The pid in a run directory's name "ssdtrain-<pid>-<n>-<i>", or -1.
pid_t RunDirPid(std::string_view name) {
  constexpr std::string_view kPrefix = "ssdtrain-";
  if (!name.starts_with(kPrefix)) return -1;
  name.remove_prefix(kPrefix.size());
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (ec != std::errc() || pid <= 0 || end == name.data() + name.size() || *end != '-') return -1;
  return pid;
}

bool ProcessGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

Status SweepDeadRuns(const std::string& dir, std::vector<std::string>* removed) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return Status::NotFound("offload directory " + dir +
                            " cannot be read: " + detail::ErrnoText(errno));
  }
  std::vector<std::string> candidates;
  while (const dirent* e = ::readdir(d)) {
    const pid_t pid = RunDirPid(e->d_name);
    if (pid > 0 && pid != ::getpid() && ProcessGone(pid)) candidates.emplace_back(e->d_name);
  }
  ::closedir(d);
  Status status;
  for (const std::string& name : candidates) {
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // gone meanwhile, or not a directory
    // A live engine holds an flock on its run directory: one whose pid only
    // looks dead from here (another pid namespace) is left alone.
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    const bool ok = detail::RemoveDirSignalSafe(path.c_str());
    ::close(fd);
    if (ok) {
      if (removed != nullptr) removed->push_back(path);
    } else if (status.ok()) {
      status = Status::IoError("cannot remove " + path +
                               ", left by a process that no longer runs; remove it by hand");
    }
  }
  return status;
}

}  // namespace ssdtrain::exec

// OffloadEngine::Impl, the file table: which file (and directory) holds a
// tensor, Preallocate, Remove and RemoveAll.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "exec/detail/engine_impl.h"
#include "exec/detail/errno_text.h"
#include "exec/detail/round_up.h"

namespace ssdtrain::exec {
namespace {

using detail::ErrnoText;
using detail::RoundUp;

// "t<tensor>.bin". Formatted with snprintf: gcc 12 reports a false -Wrestrict
// on "t" + std::to_string(...) inlined here.
std::string DefaultFileName(traces::TensorId tensor) {
  char name[32];
  std::snprintf(name, sizeof(name), "t%lld.bin", static_cast<long long>(tensor));
  return name;
}

}  // namespace

Result<OffloadEngine::Impl::File*> OffloadEngine::Impl::FileForLocked(const TensorKey& key,
                                                                      bool create) {
  const std::string name = key.file.empty() ? DefaultFileName(key.tensor) : key.file;
  SSDTRAIN_RETURN_IF_ERROR(CheckOffloadFileName(name));
  const int n = static_cast<int>(dirs.size());
  const int dir = key.device >= 0 ? key.device % n : static_cast<int>(key.tensor % n);
  const std::string fkey = std::to_string(dir) + "/" + name;
  auto it = files.find(fkey);
  if (it != files.end()) return &it->second;
  if (!create) return Status::NotFound("no offload file " + name);
  const Dir& d = dirs[static_cast<size_t>(dir)];
  const int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (d.direct ? O_DIRECT : 0);
  const int fd = backend->OpenFile(d.fd, name.c_str(), flags, 0600);
  if (fd < 0) {
    const std::string hint = -fd == ENOSPC || -fd == EDQUOT
                                 ? "; free space or point --dir elsewhere"
                                 : "; make the directory writable or point --dir elsewhere";
    return Status::IoError("cannot create offload file " + d.run_path + "/" + name + ": " +
                           ErrnoText(-fd) + hint);
  }
  File f;
  f.dir = dir;
  f.name = name;
  f.path = d.run_path + "/" + name;
  f.fd = fd;
  auto [ins, ok] = files.emplace(fkey, std::move(f));
  return &ins->second;
}

Status OffloadEngine::Impl::Preallocate(const std::string& name, int device, int64_t bytes) {
  SSDTRAIN_RETURN_IF_ERROR(CheckOffloadFileName(name));
  if (bytes <= 0) return Status::InvalidArgument("preallocate " + name + ": bytes must be > 0");
  detail::MutexLock lock(&mu);
  if (!failed.ok()) return StoppedStatusLocked();
  TensorKey key;
  key.file = name;
  key.device = device < 0 ? 0 : device;
  auto f = FileForLocked(key, /*create=*/true);
  if (!f.ok()) return FailAndPurgeLocked(f.status());
  File* file = *f;
  const int64_t len = RoundUp(bytes, kDirectIoAlign);
  if (len <= file->reserved_end) return Status::Ok();
  // No I/O can be in flight on a file nobody has written yet, so holding the
  // lock through fallocate does not stall completions for long.
  if (::fallocate(file->fd, 0, 0, len) != 0 && errno != EOPNOTSUPP && errno != ENOSYS) {
    const int err = errno;
    Job probe;
    probe.op = IoOp::kWrite;
    probe.tensor = -1;
    probe.bytes = len;
    probe.dir = dirs[static_cast<size_t>(file->dir)].path;
    probe.path = file->path;
    Status st = err == ENOSPC || err == EDQUOT
                    ? Status::ResourceExhausted(
                          "disk full: " + std::to_string(len) + " bytes needed in " + probe.dir +
                          " (" + ErrnoText(err) + "); free space or point --dir elsewhere")
                    : IoErrorStatus(probe, err);
    return FailAndPurgeLocked(st);
  }
  file->reserved_end = len;
  return Status::Ok();
}

Status OffloadEngine::Impl::Remove(traces::TensorId tensor) {
  detail::MutexLock lock(&mu);
  if (!failed.ok()) return StoppedStatusLocked();
  auto it = tensors.find(tensor);
  if (it == tensors.end()) {
    return Status::NotFound("tensor " + std::to_string(tensor) + " is not offloaded");
  }
  if (it->second.active_jobs > 0) {
    return Status::FailedPrecondition("tensor " + std::to_string(tensor) +
                                      " has I/O in flight; Wait on its tickets first");
  }
  auto fit = files.find(it->second.file_key);
  fit->second.extents.erase(it->second.offset);
  if (fit->second.extents.empty()) {
    ::close(fit->second.fd);
    ::unlinkat(dirs[static_cast<size_t>(fit->second.dir)].fd, fit->second.name.c_str(), 0);
    files.erase(fit);
  }
  tensors.erase(it);
  return Status::Ok();
}

Status OffloadEngine::Impl::RemoveAll() {
  detail::MutexLock lock(&mu);
  while (!((queue.empty() && in_flight == 0 && unlocked_writes == 0) || purged)) cv.Wait(&mu);
  RemoveFilesLocked();
  return failed.ok() ? Status::Ok() : StoppedStatusLocked();
}

}  // namespace ssdtrain::exec

// OffloadEngine::Impl, the file table: which file (and directory) holds a
// tensor, Preallocate, Remove and RemoveAll.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "exec/detail/engine_impl.h"
#include "exec/detail/errno_text.h"
#include "exec/detail/round_up.h"
#include "exec/detail/test_points.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec {
namespace {

using detail::ErrnoText;
using detail::RoundUp;

}  // namespace

int OffloadEngine::Impl::FirstDir(const TensorKey& key) const {
  const int n = static_cast<int>(dirs.size());
  return key.device >= 0 ? key.device % n : static_cast<int>(key.tensor % n);
}

Result<OffloadEngine::Impl::File*> OffloadEngine::Impl::FileForLocked(const std::string& name,
                                                                      int dir, bool create) {
  SSDTRAIN_RETURN_IF_ERROR(CheckOffloadFileName(name));
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
  auto f = FileForLocked(name, (device < 0 ? 0 : device) % static_cast<int>(dirs.size()),
                         /*create=*/true);
  if (!f.ok()) return FailAndPurgeLocked(f.status());
  File* file = *f;
  const int64_t len = RoundUp(bytes, kDirectIoAlign);
  if (len <= file->reserved_end) return Status::Ok();
  // No I/O can be in flight on a file nobody has written yet, so holding the
  // lock through fallocate does not stall completions for long.
  const int injected = detail::HitTestPoint(detail::TestPoint::kFallocate, -1);
  const int err = injected > 0 ? injected : (::fallocate(file->fd, 0, 0, len) == 0 ? 0 : errno);
  if (err != 0 && err != EOPNOTSUPP && err != ENOSYS) {
    const std::string& dir = dirs[static_cast<size_t>(file->dir)].path;
    Status st = err == ENOSPC || err == EDQUOT
                    ? Status::ResourceExhausted("disk full: " + std::to_string(len) +
                                                " bytes needed in " + dir + " (" + ErrnoText(err) +
                                                "); free space or point --dir elsewhere")
                    : Status::IoError("preallocating " + file->path + " (" + std::to_string(len) +
                                      " bytes) failed: " + ErrnoText(err) +
                                      "; check the device (dmesg) or point --dir elsewhere");
    return FailAndPurgeLocked(st);
  }
  file->reserved_end = len;
  return Status::Ok();
}

int OffloadEngine::Impl::UnlinkFile(int dir_fd, const std::string& name, traces::TensorId id) {
  const int injected = detail::HitTestPoint(detail::TestPoint::kUnlink, id);
  if (injected > 0) return injected;
  if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno == ENOENT) return 0;
  return errno;
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
  const std::vector<std::string> keys = std::move(it->second.file_keys);
  const int64_t offset = it->second.offset;
  tensors.erase(it);
  Status first;
  for (const std::string& key : keys) {
    auto fit = files.find(key);
    fit->second.extents.erase(offset);
    if (!fit->second.extents.empty()) continue;
    const File file = std::move(fit->second);
    files.erase(fit);
    backend->CloseFile(file.fd);
    const int err = UnlinkFile(dirs[static_cast<size_t>(file.dir)].fd, file.name, tensor);
    if (err != 0 && first.ok()) {
      // The tensor is forgotten either way; the file goes with the run
      // directory when the engine ends.
      first = Status::IoError("removing tensor " + std::to_string(tensor) + ": cannot unlink " +
                              file.path + ": " + ErrnoText(err) +
                              "; it is removed with its run directory when the engine ends");
    }
  }
  return first;
}

Status OffloadEngine::Impl::RemoveAll() {
  detail::MutexLock lock(&mu);
  while (!((queue.empty() && in_flight == 0 && unlocked_writes == 0) || purged)) cv.Wait(&mu);
  Status removed = RemoveFilesLocked();
  if (!failed.ok()) return StoppedStatusLocked();
  return removed.WithPrefix("RemoveAll");
}

}  // namespace ssdtrain::exec

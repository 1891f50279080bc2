// OffloadEngine::Impl, failures: the sticky first failure, the purge that
// removes every file once nothing is in flight, and the I/O error messages.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "exec/detail/engine_impl.h"
#include "exec/detail/errno_text.h"
#include "exec/detail/round_up.h"

namespace ssdtrain::exec {
namespace {

using detail::ErrnoText;
using detail::RoundUp;

}  // namespace

Status OffloadEngine::Impl::RemoveFilesLocked() {
  Status first;
  for (auto& [key, f] : files) {
    if (f.fd >= 0) backend->CloseFile(f.fd);
    const int err = UnlinkFile(dirs[static_cast<size_t>(f.dir)].fd, f.name, -1);
    if (err != 0 && first.ok()) {
      first = Status::IoError("cannot unlink " + f.path + ": " + ErrnoText(err) +
                              "; it is removed with its run directory when the engine ends");
    }
  }
  files.clear();
  tensors.clear();
  return first;
}

void OffloadEngine::Impl::RecordFailureLocked(const Status& s) {
  if (failed.ok()) failed = s;
}

Status OffloadEngine::Impl::StoppedStatusLocked() const {
  return Status(failed).WithPrefix("the offload engine stopped after an earlier failure");
}

void OffloadEngine::Impl::MaybePurgeLocked() {
  if (failed.ok() || purged || in_flight > 0 || unlocked_writes > 0) return;
  for (Job* job : queue) {
    if (job->in_flight == 0 && !job->finished) {
      if (job->status.ok()) job->status = StoppedStatusLocked();
      job->finished = true;
    }
  }
  queue.clear();
  // After a failure an unlink that fails too changes nothing the caller can
  // act on: the engine's end removes the run directory with what is left.
  (void)RemoveFilesLocked();
  purged = true;
  if (pool) pool->Close(StoppedStatusLocked());
  cv.NotifyAll();
}

Status OffloadEngine::Impl::FailAndPurgeLocked(Status s) {
  RecordFailureLocked(s);
  WaitForPurgeLocked();
  return s;
}

void OffloadEngine::Impl::WaitForPurgeLocked() {
  backend->Notify();  // the I/O thread purges
  while (!purged) cv.Wait(&mu);
}

Status OffloadEngine::Impl::IoErrorStatus(const Job& job, const Segment& segment, int err) const {
  const char* verb = job.op == IoOp::kWrite ? "writing" : "reading";
  if (err == ENOSPC || err == EDQUOT) {
    return Status::ResourceExhausted(
        "disk full: " + std::to_string(RoundUp(job.bytes, kDirectIoAlign)) + " bytes needed in " +
        segment.dir_path + " " + verb + " tensor " + std::to_string(job.tensor) + " (" +
        ErrnoText(err) + "); free space or point --dir elsewhere");
  }
  return Status::IoError(std::string(verb) + " tensor " + std::to_string(job.tensor) + " " +
                         (job.op == IoOp::kWrite ? "to " : "from ") + segment.path +
                         " failed: " + ErrnoText(err) +
                         (err == EIO ? "; the disk reported an I/O error: check the device "
                                       "(dmesg) or point --dir elsewhere"
                                     : ""));
}

}  // namespace ssdtrain::exec

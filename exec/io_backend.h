// IoBackend: the seam between the offload engine and the kernel.
//
// A backend moves raw blocks between memory and open files, asynchronously, and
// reports each request's raw result the liburing way: `result >= 0` is the byte
// count actually transferred (possibly short), `result < 0` is `-errno`. It does
// not retry: resubmitting on -EAGAIN, continuing short transfers and failing on
// EOF is the engine's job (offload_engine.cc), so that every backend gets the same
// completion handling and one conformance suite (exec/tests/io_backend_test.cc)
// can test them all.
//
// Implementations: io_uring (uring_backend.h, the default), a pread/pwrite thread
// pool (posix_backend.h, taken where io_uring is refused, e.g. by a seccomp
// profile), GPUDirect Storage through cuFile (cufile_backend.h: GPU memory to
// and from the files, host memory as the posix pool), and a fault injector
// wrapping any of them (fault_backend.h).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "traces/status.h"

namespace ssdtrain::exec {

enum class IoOp { kRead, kWrite };

// One block transfer. The memory at [buf, buf + len) must stay valid and
// untouched until the completion carrying `user_data` has been reaped.
struct IoRequest {
  IoOp op = IoOp::kRead;
  int fd = -1;
  void* buf = nullptr;
  uint32_t len = 0;        // bytes
  int64_t offset = 0;      // byte offset in the file
  int buf_index = -1;      // index of a registered (fixed) buffer containing buf, or -1
  uint64_t user_data = 0;  // returned unchanged in the completion
  // `buf` is GPU memory, for GPUDirect Storage (cufile_backend.h); only a
  // cuFile backend takes such a request (the engine sends none to another).
  bool device_memory = false;
};

struct IoCompletion {
  uint64_t user_data = 0;
  int64_t result = 0;  // bytes transferred (may be < len), or -errno
};

// Called with a one-line human-readable warning (fallbacks and the like). The
// default (nullptr in options) prints "ssdtrain: warning: <text>" to stderr.
using WarnFn = std::function<void(std::string_view)>;
void DefaultWarn(std::string_view text);

// Thread-safety: Submit, Reap, RegisterBuffers and OpenFile are called from one
// thread at a time (the engine's I/O thread); Notify may be called from any
// thread at any time. A backend must be destroyed only with nothing in flight.
class IoBackend {
 public:
  virtual ~IoBackend() = default;
  IoBackend() = default;
  IoBackend(const IoBackend&) = delete;
  IoBackend& operator=(const IoBackend&) = delete;

  // "io_uring", "posix" or "fault(<inner>)".
  virtual std::string Name() const = 0;

  // Registers page-aligned buffers for fixed I/O (IoRequest::buf_index indexes
  // `buffers`). Non-OK when the kernel refuses (e.g. ENOMEM past the memlock
  // limit): the caller then uses buf_index = -1. Backends without fixed buffers
  // return OK and treat indexes as hints.
  virtual Status RegisterBuffers(std::span<const iovec> buffers) = 0;

  // Opens (creating when O_CREAT is in `flags`) `name` relative to `dir_fd`, as
  // openat(2). Returns the fd or -errno. A seam so that the fault backend can
  // refuse O_DIRECT the way tmpfs or overlay file systems do.
  virtual int OpenFile(int dir_fd, const char* name, int flags, int mode);

  // Closes an fd OpenFile returned, with nothing in flight on it. A seam so
  // that the cuFile backend can deregister the file's handle first.
  virtual void CloseFile(int fd);

  // Queues requests in order. `*queued` is set to how many of them, from the
  // front, are in flight: each of those gets exactly one completion from Reap,
  // and its memory and fd must stay valid until then. The rest were not sent
  // and never will be (no completion, no access to their memory); a non-OK
  // status says why they were not. OK means all were queued. The caller keeps
  // at most the queue depth it created the backend with in flight.
  virtual Status Submit(std::span<const IoRequest> requests, size_t* queued) = 0;

  // Waits until at least `min_complete` completions are available (0: do not
  // wait), until `timeout_ns` passes (< 0: no limit) or until Notify is called,
  // then moves up to out.size() completions into `out` and returns how many.
  // A non-OK result means waiting failed; requests in flight stay in flight
  // (the kernel still owns their memory) and later calls may still return their
  // completions, so the caller keeps reaping (with min_complete = 0) until every
  // request has come back.
  virtual Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_ns) = 0;

  // Wakes a thread blocked in Reap (which then may return 0 completions).
  virtual void Notify() = 0;
};

enum class BackendKind {
  kAuto,   // io_uring; where the kernel refuses it, posix with one warning
  kUring,  // io_uring or an error
  kPosix,  // the pread/pwrite thread pool
};
std::string_view ToString(BackendKind kind);  // auto, io_uring, posix
Result<BackendKind> ParseBackendKind(std::string_view s);

// Makes a backend able to keep `queue_depth` requests in flight. `warn` gets the
// one warning when kAuto falls back to posix.
Result<std::unique_ptr<IoBackend>> MakeIoBackend(BackendKind kind, int queue_depth,
                                                 const WarnFn& warn);

}  // namespace ssdtrain::exec

// The fault-injecting backend: wraps a real backend and, at chosen requests,
// fails them (EIO, ENOSPC), makes them short, answers -EAGAIN, or refuses
// O_DIRECT opens. With no rules it is a pass-through (and runs the conformance
// suite like any other backend). LevelDB's fault-injection Env, for io_uring.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "exec/io_backend.h"

namespace ssdtrain::exec {

enum class FaultKind {
  kEio,     // completes with -EIO; nothing is transferred
  kEnospc,  // completes with -ENOSPC; nothing is transferred
  kEagain,  // completes with -EAGAIN; nothing is transferred (the engine must resubmit)
  kShort,   // transfers only the first half of the request, rounded down to
            // kFaultShortAlign bytes (requests of at most kFaultShortAlign bytes
            // are passed through untouched and not counted as injected)
  // Transfers the whole request but reports only its first half rounded down
  // to 512 bytes, not to kFaultShortAlign (a partial block: the continuation
  // starts at an offset O_DIRECT refuses). Requests of at most 1024 bytes are
  // passed through untouched and not counted as injected.
  kShortUnaligned,
  // Submit refuses this request and the rest of its batch (as io_uring_submit
  // may): the ones before it are queued, it and the later ones never run.
  kSubmitError,
  // The request runs, but the next Reap fails (as a broken io_uring_wait_cqe
  // would) without handing out any completion; later Reaps work again.
  kReapError,
};

// Short transfers stay multiples of 4096 bytes so that the continuation is
// still valid O_DIRECT (real short O_DIRECT transfers end on a block boundary).
inline constexpr int64_t kFaultShortAlign = 4096;

// Fires on the `nth` (0-based) submitted request of direction `op`, counting
// every submission including the engine's resubmissions; `count` consecutive
// matching requests from there (default 1).
struct FaultRule {
  IoOp op = IoOp::kWrite;
  int64_t nth = 0;
  FaultKind kind = FaultKind::kEio;
  int64_t count = 1;
};

struct FaultOptions {
  std::vector<FaultRule> rules;
  // OpenFile with O_DIRECT fails with EINVAL, as tmpfs or an overlay file system may.
  bool refuse_direct = false;
};

class FaultBackend : public IoBackend {
 public:
  FaultBackend(std::unique_ptr<IoBackend> inner, FaultOptions options);
  ~FaultBackend() override;

  std::string Name() const override;
  Status RegisterBuffers(std::span<const iovec> buffers) override;
  int OpenFile(int dir_fd, const char* name, int flags, int mode) override;
  void CloseFile(int fd) override;
  Status Submit(std::span<const IoRequest> requests, size_t* queued) override;
  Result<int> Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_ns) override;
  void Notify() override;

  // How many faults have fired so far (thread-safe), so a test can check that
  // the fault it asked for really happened.
  int64_t injected() const { return injected_.load(); }
  // Requests queued by Submit whose completion Reap has not handed out yet
  // (thread-safe): what the caller must still wait for.
  int64_t outstanding() const { return outstanding_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<int64_t> injected_{0};
  std::atomic<int64_t> outstanding_{0};
};

}  // namespace ssdtrain::exec

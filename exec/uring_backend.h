// The io_uring backend (liburing 2.3): READ/WRITE and READ_FIXED/WRITE_FIXED
// SQEs on one ring, interrupt-driven completions (no IOPOLL, no SQPOLL). Notify
// is an eventfd with a read permanently armed on the ring.
#pragma once

#include <memory>

#include "exec/io_backend.h"

namespace ssdtrain::exec {

// Fails with kUnavailable (naming the errno) when the kernel refuses io_uring
// (ENOSYS, EPERM from seccomp or io_uring_disabled).
Result<std::unique_ptr<IoBackend>> MakeUringBackend(int queue_depth);

}  // namespace ssdtrain::exec

// The pread/pwrite backend: a pool of worker threads, each doing one pread(2) or
// pwrite(2) per request and reporting its raw result (short counts and -errno
// included). The fallback where io_uring is refused; also a second, independent
// implementation for the conformance suite.
#pragma once

#include <memory>

#include "exec/io_backend.h"

namespace ssdtrain::exec {

// `threads` workers (>= 1), each running one request at a time.
Result<std::unique_ptr<IoBackend>> MakePosixBackend(int threads);

}  // namespace ssdtrain::exec

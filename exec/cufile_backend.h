// The GPUDirect Storage backend: a pool of worker threads (as the posix
// backend's), each request one blocking cuFileRead or cuFileWrite
// (exec/cufile.h's runtime-loaded cuFile) when its memory is the GPU's
// (IoRequest::device_memory), pread/pwrite otherwise. The files are
// registered with cuFileHandleRegister at their first GPU request and
// deregistered before they are closed (CloseFile). cuFile's results map to
// the engine's: bytes, or -errno (cuFile's -1 with errno), or -EIO for one of
// cuFile's own errors (its code said once through `warn`).
#pragma once

#include <memory>

#include "exec/cufile.h"
#include "exec/io_backend.h"

namespace ssdtrain::exec {

// `threads` workers (>= 1) over `cufile` (loaded, its driver open), which
// must outlive the backend.
Result<std::unique_ptr<IoBackend>> MakeCuFileBackend(std::shared_ptr<CuFile> cufile, int threads,
                                                     WarnFn warn);

}  // namespace ssdtrain::exec

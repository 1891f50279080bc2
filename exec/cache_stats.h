// What the tensor cache (exec/tensor_cache.h) did in a step: the replay's
// report carries it (exec/replay.h), so it stands apart from the cache.
#pragma once

#include <cstdint>

namespace ssdtrain::exec {

struct CacheStats {
  int64_t writes = 0;          // storages whose write was started
  int64_t bytes_written = 0;   // their bytes
  int64_t writes_dropped = 0;  // writes dropped by forwarding before they started
  int64_t bytes_write_dropped = 0;
  int64_t forwarded = 0;  // backward requests served from memory
  int64_t bytes_forwarded = 0;
  int64_t reads = 0;  // storages read back
  int64_t bytes_read = 0;
  int64_t evictions = 0;
  int64_t bytes_evicted = 0;
  // offload-host: copies kept in host memory and copies back. The SSD figures
  // above (writes, reads) do not include these.
  int64_t host_copies = 0;
  int64_t bytes_to_host = 0;
  int64_t host_restores = 0;
  int64_t bytes_from_host = 0;
};

}  // namespace ssdtrain::exec

// bench-io: the offload engine's sequential write then read bandwidth on a
// directory, measured the way fio does with --direct=1 --ioengine=io_uring
// --rw=write / --rw=read --bs=B --iodepth=Q --size=S: one file, S bytes written
// in B-byte requests with Q in flight, then read back the same way. Each request
// is one engine tensor (an extent of B bytes at offset i*B in that file, from a
// StagingLease), so the figure includes the engine's checksums and bookkeeping.
// With n directories (a node's drives): block i goes to directory i % n at
// offset (i / n)·B of its file, with Q requests in flight per directory, as
// fio's --numjobs=n, one job per directory, each --iodepth=Q --size=S/n.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exec/io_backend.h"
#include "traces/status.h"

namespace ssdtrain::exec {

struct BenchIoOptions {
  std::vector<std::string> dirs;          // where the files go, one each (removed afterwards)
  int64_t block_size = int64_t{4} << 20;  // bytes per request (fio --bs)
  int queue_depth = 32;                   // requests in flight per directory (fio --iodepth)
  int64_t size = int64_t{1} << 30;        // bytes written, then read (fio --size)
  BackendKind backend = BackendKind::kAuto;
  bool direct_io = true;  // fio --direct=1
  // Where the directory refuses O_DIRECT: false: an error naming it; true:
  // buffered I/O (the result's direct_io says false). OffloadOptions::allow_buffered_io.
  bool allow_buffered_io = false;
  WarnFn warn;  // nullptr: stderr
};

struct BenchIoResult {
  std::string backend;    // the backend that ran
  bool direct_io = true;  // false: buffered I/O (--buffered, or O_DIRECT refused and allowed)
  // true: the staging slots went to the kernel as registered (fixed) buffers,
  // fio's --fixedbufs; false where the kernel or backend refused them.
  bool fixed_buffers = false;
  int64_t bytes = 0;     // per direction
  int64_t write_ns = 0;  // wall time of the write phase
  int64_t read_ns = 0;   // wall time of the read phase
  double write_GBps() const { return write_ns > 0 ? double(bytes) / double(write_ns) : 0; }
  double read_GBps() const { return read_ns > 0 ? double(bytes) / double(read_ns) : 0; }
};

// Runs the write phase then the read phase (every block is checked); removes the
// file. Errors are the engine's (unwritable dir, ENOSPC, EIO, checksum).
Result<BenchIoResult> RunBenchIo(const BenchIoOptions& options);

}  // namespace ssdtrain::exec

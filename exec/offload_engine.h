// OffloadEngine: writes tensors to files on one or more SSD directories and reads
// them back, through an IoBackend (io_uring by default) with O_DIRECT, fixed
// staging buffers, a block size and a queue depth, writes and reads in flight
// together, and a CRC32C per extent checked on every read.
//
// Layout. Each offload directory D gets a private run directory
// D/ssdtrain-<pid>-<n>/ created by the engine; a tensor's file lives there under
// the name the plan gives (flat: no '/', see CheckOffloadFileName) or, when the
// key has no file, "t<tensor>.bin". Several tensors may share a file at distinct,
// 4096-aligned offsets. On disk an extent is padded to a multiple of
// kDirectIoAlign bytes. A tensor is cut into extents of `block_size` bytes (the
// last one shorter); each extent is one request and carries its own CRC32C of
// its payload bytes. The extents are striped over the directories as
// traces/drives.h decides (the simulator predicts each drive's bytes by the same
// rule): extent i to directory (first + i) % dirs, each directory's extents in
// its file of the tensor's name, back to back from the key's offset.
//
// Cleanup. The run directories and every file in them are removed by the
// destructor, by RemoveAll, after any I/O failure (see "Failures") and on
// SIGINT/SIGTERM: the engine installs a handler that unlinks the files of every
// live run directory and re-raises the signal. The handler needs a list it can
// walk without locks or allocation, so the live run directories sit in a
// process-wide fixed-size table (detail/cleanup_registry.h) — the only global
// state here, used for nothing but that signal-safe cleanup.
//
// Failures. Every error is a Status saying what happened and what to change:
// an unwritable directory, a directory that refuses O_DIRECT or is on tmpfs or
// ramfs (unless OffloadOptions::allow_buffered_io; exec/offload_dir.h), a full disk ("disk full: N
// bytes needed in D; free space or point --dir elsewhere"), EIO, EOF before the requested length, a
// checksum mismatch (naming the tensor and the file). Completions follow
// liburing: -EAGAIN is resubmitted (with a growing backoff when it repeats),
// short transfers continue where they stopped (an O_DIRECT one that stops
// inside a 4096-byte block is an error naming the file and offset). Requests
// the backend did not queue fail once and never reach the kernel; when waiting
// for completions fails, the engine keeps reaping until every request in
// flight has come back before anything it targets is released. The first failure is sticky: the
// engine waits for its in-flight requests to return, removes all its files, and every later call
// (and every pending ticket) returns that error. A read that fails never hands back a buffer as if
// it were filled.
//
// Thread-safety. All public methods may be called from any thread. One internal
// I/O thread owns the backend: it submits, reaps, resubmits and copies bounce
// blocks. Checksums are computed by the caller's thread: WriteAsync computes
// the written extents' CRCs, and Wait checks a read's CRCs before it returns
// (so a checksum mismatch is reported by Wait, and Done may be true before the
// check has run). Each ticket must be waited for exactly once (by one thread).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "exec/cufile.h"
#include "exec/io_backend.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::exec {

// O_DIRECT needs buffer addresses, lengths and file offsets aligned to the
// logical block size; 4096 covers every NVMe and virtual disk we target.
inline constexpr int64_t kDirectIoAlign = 4096;
inline constexpr int64_t kDefaultBlockSize = int64_t{4} << 20;  // 4 MiB, fio's usual bs
inline constexpr int kDefaultQueueDepth = 32;

// Options, each with its unit and default.
struct OffloadOptions {
  // Offload directories, one per SSD (at least one). Each must exist and be writable.
  std::vector<std::string> dirs;
  BackendKind backend = BackendKind::kAuto;
  int64_t block_size = kDefaultBlockSize;  // bytes per request; multiple of kDirectIoAlign
  int queue_depth = kDefaultQueueDepth;    // requests in flight, all directions together
  // Bytes of page-aligned, registered staging memory handed out by AcquireStaging
  // (at most 1 GiB). Separate from the queue_depth bounce blocks the engine keeps
  // for unaligned buffers and tails.
  int64_t staging_bytes = int64_t{256} << 20;
  // O_DIRECT on every file. false: buffered I/O everywhere, by choice (no probe).
  bool direct_io = true;
  // Where a directory refuses O_DIRECT (EINVAL: tmpfs before Linux 6.6, ramfs,
  // some overlay file systems). false: Create fails naming the directory, since
  // figures measured there would be the page cache's, not the drive's. true:
  // buffered I/O in that directory, with one warning (--allow-buffered-io);
  // direct_io() then says false. A directory on tmpfs or ramfs (memory, not a
  // drive; tmpfs takes O_DIRECT since Linux 6.6) is treated alike.
  bool allow_buffered_io = false;
  bool register_buffers = true;  // fixed buffers; falls back with one warning where refused
  bool preallocate = true;       // fallocate each extent before writing (early ENOSPC, like fio)
  // Cap on the SSD path, bytes/s: reads and writes share one link of this rate
  // as the simulator's drive shares its rate (each direction's requests cross
  // in order; while both directions have requests on it, each moves at half
  // the rate; a request completes no earlier than its bytes have crossed), so a
  // fast disk stands in for a slower array. 0: none; otherwise finite and at
  // least 1e6 (1 MB/s).
  double bandwidth_cap_bytes_per_s = 0;
  WarnFn warn;  // nullptr: DefaultWarn (stderr)
  // Caller-owned, page-aligned host memory that the runtime copies tensors
  // through (the replay's pinned staging region): registered as one more fixed
  // buffer, so requests on it skip the kernel's per-request page pinning, and
  // used without a bounce copy. The caller hands it out in kDirectIoAlign
  // multiples, so the engine may read or write the padding after a buffer's end
  // up to the next kDirectIoAlign boundary. Must outlive the engine. Empty: none.
  // Any size: past 1 GiB (the kernel's limit per fixed buffer) it is registered
  // as several buffers, and a request straddling two of them goes unregistered.
  iovec external_staging{nullptr, 0};
  // GPUDirect Storage (exec/cufile.h, loaded, its driver open): the engine's
  // backend is the cuFile one (cufile_backend.h; `backend` is ignored), and
  // WriteDeviceAsync/ReadDeviceAsync move GPU memory to and from the files.
  // Null: host memory only.
  std::shared_ptr<CuFile> cufile;
};

// Which tensor, and where it goes. `file` empty: "t<tensor>.bin" at offset 0.
// The tensor is striped over every directory (traces/drives.h): its extents of
// block_size bytes go round robin, the first to dirs[device % dirs.size()]
// (-1: tensor % dirs.size()), each directory's in one file of that name, back
// to back from `offset`.
// Tensor ids are >= 0 (negative ones are refused).
struct TensorKey {
  traces::TensorId tensor = 0;
  std::string file;
  int device = -1;
  int64_t offset = 0;  // bytes; multiple of kDirectIoAlign
};

// Names one asynchronous write or read. Valid from the *Async call that returns
// it until Wait on it returns; Done may be polled in between.
struct Ticket {
  uint64_t id = 0;
};

struct OffloadStats {
  int64_t bytes_written = 0;  // tensor payload bytes whose write completed
  int64_t bytes_read = 0;     // tensor payload bytes whose read completed and checked
  int64_t write_busy_ns = 0;  // wall time with at least one write request in flight
  int64_t read_busy_ns = 0;   // wall time with at least one read request in flight
  int64_t requests = 0;       // requests submitted, resubmissions included
  int64_t eagain_resubmits = 0;
  // Delay scheduled before resubmitting requests answered -EAGAIN several times
  // in a row (the first answer is resubmitted at once, then 50 us doubling to 10 ms).
  int64_t eagain_backoff_ns = 0;
  int64_t short_continuations = 0;
  int64_t bounce_copies = 0;  // extents that went through a bounce block (memcpy)
  // bytes_written by directory (as OffloadOptions::dirs), counted per completed
  // request: each tensor's stripes as traces/drives.h places them.
  std::vector<int64_t> bytes_written_per_dir;
};

class OffloadEngine;

// A page-aligned piece of the engine's registered staging memory, for the
// runtime's copy thread: copy device -> data(), then WriteAsync(key, data(), n)
// writes it without another copy; ReadAsync(key, data(), n) reads into it
// directly. capacity() is `bytes` rounded up to kDirectIoAlign; the engine may
// write zeros or padding into [n, capacity()). Move-only; returns its memory on
// destruction. Must not outlive its engine, and must not be destroyed while a
// ticket using it is not yet waited for.
class StagingLease {
 public:
  StagingLease() = default;
  StagingLease(StagingLease&& other) noexcept;
  StagingLease& operator=(StagingLease&& other) noexcept;
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;
  ~StagingLease();

  void* data() const { return data_; }
  int64_t capacity() const { return capacity_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  friend class OffloadEngine;
  OffloadEngine* owner_ = nullptr;
  void* data_ = nullptr;
  int64_t capacity_ = 0;
};

class OffloadEngine {
 public:
  // Creates the run directories, the backend and the staging memory. Fails when a
  // directory is missing or unwritable, or the options are out of range.
  static Result<std::unique_ptr<OffloadEngine>> Create(OffloadOptions options);
  // The same with a given backend (tests: a FaultBackend). `options.backend` is ignored.
  static Result<std::unique_ptr<OffloadEngine>> Create(OffloadOptions options,
                                                       std::unique_ptr<IoBackend> backend);

  // Waits for in-flight requests, then removes every file and the run directories.
  ~OffloadEngine();
  OffloadEngine(const OffloadEngine&) = delete;
  OffloadEngine& operator=(const OffloadEngine&) = delete;

  // Writes `bytes` (> 0) from `src` as tensor key.tensor. `src` must stay valid
  // and unchanged until Wait returns. Zero-copy when src is in a StagingLease, or
  // page-aligned (then all but a partial last extent go straight from src).
  // Fails at once for a bad key (file name, alignment, overlap with another
  // tensor in the same file, a tensor already written and not removed).
  Result<Ticket> WriteAsync(const TensorKey& key, const void* src, int64_t bytes);
  // Reads tensor key.tensor (its write must have completed) into `dst`, whose
  // `bytes` must equal the written size. `dst` must stay valid until Wait returns;
  // its contents are meaningful only when Wait returns OK.
  Result<Ticket> ReadAsync(const TensorKey& key, void* dst, int64_t bytes);
  // The same from and into GPU memory through cuFile (OffloadOptions::cufile;
  // FailedPrecondition without it). Each extent is one cuFileWrite or
  // cuFileRead straight from or into the device address (cuFile takes an
  // unaligned tail itself): no bounce copy, and no CRC32C, since the bytes
  // never pass through host memory (a tensor written so is read back
  // unchecked; the replay's --verify checks its pattern on the device).
  Result<Ticket> WriteDeviceAsync(const TensorKey& key, const void* device_src, int64_t bytes);
  Result<Ticket> ReadDeviceAsync(const TensorKey& key, void* device_dst, int64_t bytes);
  // Blocks until the ticket's I/O is over; returns its outcome and forgets it.
  Status Wait(Ticket ticket);
  // True when Wait(ticket) would not block. False for an unknown ticket.
  bool Done(Ticket ticket) const;

  // Blocking conveniences: *Async then Wait.
  Status Write(const TensorKey& key, const void* src, int64_t bytes);
  Status Read(const TensorKey& key, void* dst, int64_t bytes);

  // Reserves [0, bytes) of plan file `file` in dirs[device % dirs.size()] with
  // fallocate, so that a full disk is reported before any tensor is written, and
  // so that writes of several tensors into that file need no fallocate each
  // (ext4's fallocate waits for all direct I/O in flight on the file, which
  // would drain the queue at every tensor). Optional; fio does the same before
  // it starts timing.
  Status Preallocate(const std::string& file, int device, int64_t bytes);

  // Forgets a tensor; its file is unlinked once no other tensor uses it.
  // FailedPrecondition while I/O on it is in flight; NotFound if never written;
  // IoError naming the file when the unlink fails (the tensor is forgotten all
  // the same, the engine goes on, and the file goes with the run directory at
  // destruction).
  Status Remove(traces::TensorId tensor);
  // Removes every file (the run directories stay until destruction). Waits for
  // in-flight I/O first. A failed unlink is reported as in Remove.
  Status RemoveAll();

  // Blocks until `bytes` of staging memory are free (fails if bytes exceeds
  // options.staging_bytes, or after a failure).
  Result<StagingLease> AcquireStaging(int64_t bytes);

  OffloadStats Stats() const;
  std::string BackendName() const;
  bool direct_io() const;           // false when any directory uses buffered I/O
  bool buffers_registered() const;  // false when fixed buffers were refused
  bool device_io() const;           // WriteDeviceAsync/ReadDeviceAsync available (cuFile)
  const std::vector<std::string>& run_dirs() const;
  // The path of the file holding `tensor`; NotFound if it was never written.
  Result<std::string> FilePath(traces::TensorId tensor) const;

 private:
  friend class StagingLease;
  struct Impl;
  explicit OffloadEngine(std::unique_ptr<Impl> impl);
  void ReleaseStaging(void* data, int64_t capacity);
  std::unique_ptr<Impl> impl_;
};

// Removes the run directories, with their files, that processes which no
// longer run (killed by SIGKILL, crashed) left in offload directory `dir`
// (ssdtrain-<pid>-...: the pid is gone and no live engine holds the
// directory's lock). Appends each removed path to `removed` (may be null).
// Every engine does this for its directories when it is created; `ssdtrain
// clean --dir D` does it on demand.
Status SweepDeadRuns(const std::string& dir, std::vector<std::string>* removed);

// A plan file name is accepted when it is non-empty, at most 255 bytes, flat (no
// '/'), not "." or "..", and without NUL or control characters. With a non-empty
// `dir`, it is also refused when dir/name exists and is a symlink. The message
// names the file and says what is allowed.
Status CheckOffloadFileName(std::string_view name, const std::string& dir = "");
// Checks every offload-ssd placement's file name (and that offsets are
// non-negative multiples of kDirectIoAlign); `source` names the plan in messages.
Status CheckPlanFileNames(const traces::Plan& plan, const std::string& source);

}  // namespace ssdtrain::exec

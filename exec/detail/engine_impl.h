// OffloadEngine::Impl: the engine's state, shared by the files that implement
// it (exec/offload_engine.h is the public API; this header is internal):
//
//   offload_engine.cc        options, run directories, setup and teardown, the
//                            public methods
//   engine_jobs.cc           WriteAsync/ReadAsync as jobs, Wait (CRC check), Done
//   engine_file_table.cc     files and tensors: which file, extents, Preallocate,
//                            Remove, RemoveAll
//   engine_io_loop.cc        the I/O thread: slots, submission, completion
//                            handling (EAGAIN backoff, short transfers), reaping
//   engine_bandwidth_cap.cc  the --ssd-bandwidth link model
//   engine_failure.cc        sticky failure, the purge, error messages
//
// Locking: `mu` guards everything from `files` to `stats` (SSDTRAIN_GUARDED_BY,
// checked by clang's -Wthread-safety) and a Job's fields from `next_block` on;
// the fields after "I/O-thread-only state" belong to the I/O thread; the rest
// (a Job's fields before `next_block` too) is set up before the I/O thread
// can see it and read-only afterwards. Functions named *Locked are called
// with `mu` held (SSDTRAIN_REQUIRES); the public operations take it.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "exec/detail/annotated_mutex.h"
#include "exec/detail/staging_pool.h"
#include "exec/io_backend.h"
#include "exec/offload_engine.h"

namespace ssdtrain::exec {
namespace detail {

// The steady clock in nanoseconds (bandwidth cap and busy times).
inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace detail

struct OffloadEngine::Impl {
  struct Dir {
    std::string path;      // the user's directory
    std::string run_path;  // its private run directory
    int fd = -1;           // of run_path
    bool direct = true;
    int cleanup_slot = -1;
  };
  struct File {
    int dir = 0;
    std::string name;
    std::string path;
    int fd = -1;
    std::map<int64_t, int64_t> extents;  // offset -> end (padded), of live tensors
    int64_t reserved_end = 0;            // bytes already fallocated from offset 0
  };
  struct Tensor {
    // The files holding its stripes (traces/drives.h): file_keys[j] holds
    // stripes j, j + k, j + 2k, ... (k = file_keys.size()), back to back from
    // `offset`.
    std::vector<std::string> file_keys;
    int64_t offset = 0;
    int64_t bytes = 0;
    std::vector<uint32_t> crcs;  // per extent of block_size
    bool checked = true;         // crcs hold the payload's (false: written from GPU memory)
    bool written = false;        // the write completed
    int active_jobs = 0;
  };
  // One file a job's stripes go to (or come from).
  struct Segment {
    int fd = -1;
    bool direct = false;  // the file is open with O_DIRECT
    int dir = 0;          // index into `dirs`
    std::string path;
    std::string dir_path;
  };
  struct Job {
    uint64_t id = 0;
    IoOp op = IoOp::kRead;
    traces::TensorId tensor = 0;
    char* buf = nullptr;  // the caller's src/dst
    bool device = false;  // buf is GPU memory (cuFile): no bounce, no CRC32C
    bool verify = true;   // a read whose extents' CRC32Cs Wait checks
    int64_t bytes = 0;
    int64_t file_offset = 0;        // of the tensor in each of its files
    std::vector<Segment> segments;  // block b goes to segments[b % size()]
    int64_t blocks = 0;
    // From here on guarded by Impl::mu (a nested struct cannot name it).
    int64_t next_block = 0;
    int64_t blocks_done = 0;
    int in_flight = 0;
    bool finished = false;
    Status status;
    // Per extent: write: computed by WriteAsync's caller; read: the stored ones,
    // checked by Wait's caller (off the I/O thread, which only moves bytes).
    std::vector<uint32_t> crcs;

    const Segment& SegmentOf(int64_t block) const {
      return segments[static_cast<size_t>(block) % segments.size()];
    }
    // Where block `block` (of `block_size` bytes) sits in its segment's file.
    int64_t OffsetOf(int64_t block, int64_t block_size) const {
      return file_offset + block / static_cast<int64_t>(segments.size()) * block_size;
    }
  };
  struct Request {  // one per queue slot; owned by the I/O thread
    bool busy = false;
    Job* job = nullptr;
    int64_t block = 0;
    int64_t payload = 0;  // tensor bytes in this extent
    int64_t len = 0;      // bytes on disk (padded)
    int64_t done = 0;     // bytes transferred so far
    char* io_buf = nullptr;
    bool bounced = false;
    int buf_index = -1;
    int64_t offset = 0;
    uint32_t crc = 0;         // write: computed; read: expected
    bool on_link = false;     // bandwidth cap: its bytes are on the capped link
    int eagain_streak = 0;    // -EAGAIN answers in a row
    int64_t resubmit_ns = 0;  // EAGAIN backoff: not resubmitted before this time
  };

  OffloadOptions options;
  WarnFn warn;
  // Declared before the backend so the ring (and its registration) goes first.
  std::unique_ptr<detail::StagingPool> pool;
  std::unique_ptr<IoBackend> backend;
  bool registered = false;
  int external_index = -1;  // fixed-buffer index of options.external_staging's first chunk
  std::vector<Dir> dirs;
  std::vector<std::string> run_dir_paths;
  std::thread io_thread;

  mutable detail::Mutex mu;
  detail::CondVar cv;                                         // jobs finished, idle, purge done
  std::map<std::string, File> files SSDTRAIN_GUARDED_BY(mu);  // key "<dir>/<name>"
  std::unordered_map<traces::TensorId, Tensor> tensors SSDTRAIN_GUARDED_BY(mu);
  std::unordered_map<uint64_t, std::unique_ptr<Job>> jobs SSDTRAIN_GUARDED_BY(mu);
  std::deque<Job*> queue SSDTRAIN_GUARDED_BY(mu);  // jobs with blocks not yet submitted
  uint64_t next_ticket SSDTRAIN_GUARDED_BY(mu) = 1;
  // Requests, all directions (mirrors the I/O thread's view).
  int in_flight SSDTRAIN_GUARDED_BY(mu) = 0;
  // WriteAsync calls between reserving a tensor and queueing its job, with `mu`
  // dropped around fallocate: RemoveAll and the purge wait for them.
  int unlocked_writes SSDTRAIN_GUARDED_BY(mu) = 0;
  Status failed SSDTRAIN_GUARDED_BY(mu);        // sticky first failure
  bool purged SSDTRAIN_GUARDED_BY(mu) = false;  // files removed after `failed`
  bool stopping SSDTRAIN_GUARDED_BY(mu) = false;
  OffloadStats stats SSDTRAIN_GUARDED_BY(mu);

  // I/O-thread-only state.
  std::vector<Request> requests;
  int dir_in_flight[2] = {0, 0};
  int64_t busy_since[2] = {0, 0};
  // Bandwidth cap (OffloadOptions::bandwidth_cap_bytes_per_s): one link of that
  // rate, shared by reads and writes as the simulator's SSD shares its rate
  // (sim/fluid.cc, sim/stage_sim.cc: a read queue and a write queue). The
  // requests of one direction cross the link one after another in submission
  // order; while both directions have a request on it, their heads move at
  // half the rate each, a direction alone at the whole. A request's completion
  // is held back until the link has moved its bytes, so a fast disk behaves
  // like a slower one for throughput and for the latency of each transfer.
  struct CapLink {
    std::deque<size_t> fifo[2];    // slots on the link, [read, write], oldest first
    double head_left[2] = {0, 0};  // bytes of each head still to move
    int64_t updated_ns = 0;        // the time the link's progress was computed for
  };
  CapLink link;
  std::vector<size_t> held;     // completed slots waiting for their release time
  std::vector<size_t> backoff;  // slots answered -EAGAIN, waiting to be resubmitted

  ~Impl();

  void Warn(const std::string& text) { (warn ? warn : DefaultWarn)(text); }

  Status Init();

  Status OpenDir(const std::string& path, int run_id, int index);

  // ---- Failures and cleanup (call with `mu` held) ----

  // Closes and unlinks every file; forgets every tensor. Returns the first
  // unlink that failed (the file then stays until the run directory goes).
  Status RemoveFilesLocked() SSDTRAIN_REQUIRES(mu);

  void RecordFailureLocked(const Status& s) SSDTRAIN_REQUIRES(mu);

  Status StoppedStatusLocked() const SSDTRAIN_REQUIRES(mu);

  // After a failure: once nothing is in flight, fails every queued job and
  // removes all files (`purged` says when that has happened).
  void MaybePurgeLocked() SSDTRAIN_REQUIRES(mu);

  // A failure found outside the I/O thread: record it and wait for the purge
  // (`mu` is released while waiting).
  Status FailAndPurgeLocked(Status s) SSDTRAIN_REQUIRES(mu);

  // Blocks until the purge after a failure is done (`mu` released meanwhile).
  void WaitForPurgeLocked() SSDTRAIN_REQUIRES(mu);

  Status IoErrorStatus(const Job& job, const Segment& segment, int err) const;

  // Unlinks `name` in `dir_fd`: 0 when it is gone (or was already), else the
  // errno (or the one a test injects at TestPoint::kUnlink for tensor `id`).
  static int UnlinkFile(int dir_fd, const std::string& name, traces::TensorId id);

  // ---- Public operations ----

  // File `name` in dirs[dir]; created (opened) when `create`, else NotFound.
  Result<File*> FileForLocked(const std::string& name, int dir, bool create) SSDTRAIN_REQUIRES(mu);
  // The directory of a key's first stripe: device % dirs, or tensor % dirs
  // for device -1.
  int FirstDir(const TensorKey& key) const;
  // A job's view of file `f`.
  Segment SegmentFor(const File& f) const;

  // `device`: buf is GPU memory (WriteDeviceAsync/ReadDeviceAsync).
  Result<Ticket> Enqueue(const TensorKey& key, IoOp op, char* buf, int64_t bytes,
                         bool device = false) SSDTRAIN_EXCLUDES(mu);

  Status Wait(Ticket ticket) SSDTRAIN_EXCLUDES(mu);

  // Checks every extent of a completed read against its stored CRC32C.
  Status VerifyRead(const Job& job) const;

  bool Done(Ticket ticket) const SSDTRAIN_EXCLUDES(mu);

  Status Preallocate(const std::string& name, int device, int64_t bytes) SSDTRAIN_EXCLUDES(mu);

  Status Remove(traces::TensorId tensor) SSDTRAIN_EXCLUDES(mu);

  Status RemoveAll() SSDTRAIN_EXCLUDES(mu);

  // ---- The I/O thread ----

  void SetBusy(IoOp op, int delta) SSDTRAIN_EXCLUDES(mu);

  IoRequest ToIoRequest(const Request& r, size_t slot) const;

  bool InExternal(const char* p, int64_t n) const;

  // The fixed-buffer index of the external staging chunk holding [p, p + n),
  // or -1 when the range straddles two chunks (it then goes unregistered).
  int ExternalFixedIndex(const char* p, int64_t n) const;

  // Prepares slot `s` for the job's next block: chooses the memory (zero-copy
  // when possible, else the slot's bounce block), copies and checksums writes.
  void Prepare(size_t s, Job* job, int64_t block);

  // Handles one completion; returns true when the request must be resubmitted.
  bool Complete(size_t s, int64_t res, Status* error) SSDTRAIN_EXCLUDES(mu);

  // Submits `batch`; the requests the backend did not queue are failed here,
  // once, and never reach the kernel afterwards.
  void SubmitBatch(const std::vector<IoRequest>& batch, const char* what,
                   std::vector<size_t>* free_slots) SSDTRAIN_EXCLUDES(mu);

  // The I/O thread: takes queued blocks into free slots, submits them and the
  // resubmissions due, reaps completions, until the engine stops.
  void IoLoop() SSDTRAIN_EXCLUDES(mu);
  // Takes blocks while slots are free (none after a failure or a stop);
  // false when the engine is stopping with nothing in flight: the queued jobs
  // are failed and the loop ends.
  bool TakeBlocks(std::vector<IoRequest>* batch, std::vector<size_t>* free_slots)
      SSDTRAIN_EXCLUDES(mu);
  // Releasing held requests (or failing a batch) may have freed slots after
  // this pass took its blocks, or ended the last request of a stopping
  // engine: true to go round again instead of waiting for a completion that
  // may never come (nothing else may be in flight).
  bool GoRoundAgain(const std::vector<size_t>& free_slots) SSDTRAIN_EXCLUDES(mu);
  // One completion: resubmitted (into `batch`, or after its EAGAIN backoff),
  // held until the capped link has moved its bytes, or finished.
  void OnCompletion(const IoCompletion& c, std::vector<IoRequest>* batch,
                    std::vector<size_t>* free_slots) SSDTRAIN_EXCLUDES(mu);

  // The queued job whose next block goes to a free slot: the oldest of each
  // direction, and of the two the direction with fewer requests in flight (the
  // older on a tie), so that reads and writes share the queue depth as the
  // simulator's SSD shares its rate between its read and write queues instead
  // of a read waiting behind every queued write. `queue` must not be empty.
  std::deque<Job*>::iterator NextJob() SSDTRAIN_REQUIRES(mu);

  // EAGAIN backoff: moves the slots whose backoff has passed into `batch` (or
  // cancels them after a failure); sets `wait_ns` to the time until the next.
  void ResubmitDue(std::vector<IoRequest>* batch, std::vector<size_t>* free_slots, int64_t* wait_ns)
      SSDTRAIN_EXCLUDES(mu);

  // Bandwidth cap: puts request `s` on the link (no-op when uncapped).
  void JoinLink(size_t s, IoOp op);
  // Bandwidth cap: moves the link's heads on to `now_ns`, marking the requests
  // whose bytes have crossed (off the link: Request::on_link false).
  void AdvanceLink(int64_t now_ns);
  // Bandwidth cap: takes slot `s` off the link (finished before its bytes crossed).
  void LeaveLink(size_t s);
  // Bandwidth cap: nanoseconds until the link's next head has crossed (-1: idle).
  int64_t NextLinkDoneNs() const;

  // Finishes held completions whose bytes the link has moved; sets `wait_ns` to
  // the time until the next one (keeping a shorter wait already set).
  void ReleaseHeld(std::vector<size_t>* free_slots, int64_t* wait_ns) SSDTRAIN_EXCLUDES(mu);

  // Retires slot `s` with `error` (OK: its block is done and checked).
  void FinishRequest(size_t s, const Status& error, std::vector<size_t>* free_slots)
      SSDTRAIN_EXCLUDES(mu);
};

}  // namespace ssdtrain::exec

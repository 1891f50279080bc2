#include "exec/offload_engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "exec/checksum.h"
#include "exec/detail/cleanup_registry.h"
#include "exec/detail/errno_text.h"
#include "exec/detail/round_up.h"
#include "exec/detail/staging_pool.h"
#include "exec/detail/test_points.h"

namespace ssdtrain::exec {
namespace {

using detail::RoundUp;

using detail::ErrnoText;
using Clock = std::chrono::steady_clock;

// Fixed buffers are limited to 1 GiB each by the kernel.
constexpr int64_t kMaxStagingBytes = int64_t{1} << 30;
// The largest single request io_uring and pread/pwrite take in one go (uint32 len).
constexpr int64_t kMaxBlockSize = int64_t{1} << 30;
// The slowest bandwidth cap accepted: below it one 1 GiB request would take
// longer than ~18 minutes and the link's int64 ns clock could overflow.
constexpr double kMinBandwidthCap = 1e6;  // bytes/s
// -EAGAIN: the first answer is resubmitted at once; each further one in a row
// for the same request waits twice as long as the last, from 50 us up to 10 ms,
// so that a device that keeps answering EAGAIN does not spin the I/O thread.
constexpr int64_t kEagainBackoffMinNs = 50'000;
constexpr int64_t kEagainBackoffMaxNs = 10'000'000;
constexpr int kMaxBackoffShift = 8;  // 50 us << 8 is past the 10 ms cap
// After a failed wait for completions, the I/O thread pauses this long before
// reaping again (the requests in flight still belong to the kernel).
constexpr auto kReapRetryDelay = std::chrono::milliseconds(1);
// Distinguishes run directories of several engines in one process.
std::atomic<int> g_run_counter{0};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

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
    std::string file_key;
    int64_t offset = 0;
    int64_t bytes = 0;
    std::vector<uint32_t> crcs;  // per extent of block_size
    bool written = false;        // the write completed
    int active_jobs = 0;
  };
  struct Job {
    uint64_t id = 0;
    IoOp op = IoOp::kRead;
    traces::TensorId tensor = 0;
    char* buf = nullptr;  // the caller's src/dst
    int64_t bytes = 0;
    int64_t file_offset = 0;
    int fd = -1;
    bool direct = false;  // the file is open with O_DIRECT
    std::string path;
    std::string dir;
    int64_t blocks = 0;
    int64_t next_block = 0;
    int64_t blocks_done = 0;
    int in_flight = 0;
    bool finished = false;
    Status status;
    // Per extent: write: computed by WriteAsync's caller; read: the stored ones,
    // checked by Wait's caller (off the I/O thread, which only moves bytes).
    std::vector<uint32_t> crcs;
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
    uint32_t crc = 0;        // write: computed; read: expected
    int64_t release_ns = 0;  // bandwidth cap: not completed before this time (steady clock)
    int eagain_streak = 0;   // -EAGAIN answers in a row
    int64_t resubmit_ns = 0; // EAGAIN backoff: not resubmitted before this time
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

  mutable std::mutex mu;
  std::condition_variable cv;         // jobs finished, idle, purge done
  std::map<std::string, File> files;  // key "<dir>/<name>"
  std::unordered_map<traces::TensorId, Tensor> tensors;
  std::unordered_map<uint64_t, std::unique_ptr<Job>> jobs;
  std::deque<Job*> queue;  // jobs with blocks not yet submitted
  uint64_t next_ticket = 1;
  int in_flight = 0;    // requests, all directions (mirrors the I/O thread's view)
  // WriteAsync calls between reserving a tensor and queueing its job, with `mu`
  // dropped around fallocate: RemoveAll and the purge wait for them.
  int unlocked_writes = 0;
  Status failed;        // sticky first failure
  bool purged = false;  // files removed after `failed`
  bool stopping = false;
  OffloadStats stats;

  // I/O-thread-only state.
  std::vector<Request> requests;
  int dir_in_flight[2] = {0, 0};
  int64_t busy_since[2] = {0, 0};
  // Bandwidth cap (OffloadOptions::bandwidth_cap_bytes_per_s): each direction is
  // a link of that rate. A request is due when the link has moved its bytes after
  // the requests before it: release = max(now, link_free) + len / rate. Its
  // completion is held back until then, so a fast disk behaves like a slower one
  // for throughput and for the latency of each transfer.
  int64_t link_free_ns[2] = {0, 0};  // [read, write]
  std::vector<size_t> held;          // completed slots waiting for their release time
  std::vector<size_t> backoff;       // slots answered -EAGAIN, waiting to be resubmitted

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (backend) backend->Notify();
    if (io_thread.joinable()) io_thread.join();
    if (pool) pool->Close(Status::FailedPrecondition("the offload engine was destroyed"));
    std::lock_guard lock(mu);
    RemoveFilesLocked();
    for (Dir& d : dirs) {
      if (d.fd >= 0) ::close(d.fd);
      if (!d.run_path.empty()) detail::RemoveDirSignalSafe(d.run_path.c_str());
      detail::UnregisterCleanupDir(d.cleanup_slot);
    }
  }

  void Warn(const std::string& text) { (warn ? warn : DefaultWarn)(text); }

  Status Init() {
    if (options.dirs.empty()) {
      return Status::InvalidArgument("no offload directory given; pass --dir DIR (one per SSD)");
    }
    if (options.block_size < kDirectIoAlign || options.block_size % kDirectIoAlign != 0 ||
        options.block_size > kMaxBlockSize) {
      return Status::InvalidArgument("block size " + std::to_string(options.block_size) +
                                     " must be a multiple of 4096 between 4096 and 1 GiB");
    }
    if (options.queue_depth < 1) {
      return Status::InvalidArgument("queue depth must be at least 1, got " +
                                     std::to_string(options.queue_depth));
    }
    if (options.staging_bytes < 0 || options.staging_bytes > kMaxStagingBytes) {
      return Status::InvalidArgument("staging size " + std::to_string(options.staging_bytes) +
                                     " must be between 0 and 1 GiB");
    }
    const double cap = options.bandwidth_cap_bytes_per_s;
    if (!std::isfinite(cap) || cap < 0 || (cap > 0 && cap < kMinBandwidthCap)) {
      return Status::InvalidArgument(
          "SSD bandwidth cap (--ssd-bandwidth, OffloadOptions::bandwidth_cap_bytes_per_s) must "
          "be 0 for none or a finite rate of at least " +
          std::to_string(static_cast<int64_t>(kMinBandwidthCap)) + " bytes/s, got " +
          std::to_string(cap));
    }
    const int run_id = g_run_counter.fetch_add(1);
    for (size_t i = 0; i < options.dirs.size(); ++i) {
      SSDTRAIN_RETURN_IF_ERROR(OpenDir(options.dirs[i], run_id, static_cast<int>(i)));
    }
    SSDTRAIN_ASSIGN_OR_RETURN(pool,
                              detail::StagingPool::Create(options.queue_depth, options.block_size,
                                                          options.staging_bytes));
    if (options.external_staging.iov_len > 0 &&
        (reinterpret_cast<uintptr_t>(options.external_staging.iov_base) % kDirectIoAlign != 0 ||
         options.external_staging.iov_len % kDirectIoAlign != 0)) {
      return Status::InvalidArgument(
          "external staging memory must be aligned to and a multiple of " +
          std::to_string(kDirectIoAlign) + " bytes");
    }
    if (options.register_buffers) {
      std::vector<iovec> iov = pool->RegistrationIovecs();
      if (options.external_staging.iov_len > 0) {
        // The kernel takes at most 1 GiB per fixed buffer: a larger region is
        // registered as several.
        external_index = static_cast<int>(iov.size());
        for (const iovec& chunk :
             detail::SplitForRegistration(options.external_staging, detail::kMaxFixedBufferBytes)) {
          iov.push_back(chunk);
        }
      }
      Status s = backend->RegisterBuffers(iov);
      if (s.ok()) {
        registered = true;
      } else {
        Warn("cannot register the staging buffers as fixed buffers (" + s.message() +
             "; an unprivileged process is limited by `ulimit -l`): using unregistered buffers");
      }
    }
    requests.resize(static_cast<size_t>(options.queue_depth));
    io_thread = std::thread([this] { IoLoop(); });
    return Status::Ok();
  }

  Status OpenDir(const std::string& path, int run_id, int index) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      return Status::NotFound("offload directory " + path + " cannot be used: " + ErrnoText(errno) +
                              "; create it or point --dir elsewhere");
    }
    if (!S_ISDIR(st.st_mode)) {
      return Status::InvalidArgument("offload directory " + path +
                                     " is not a directory; point --dir at a directory");
    }
    Dir d;
    d.path = std::filesystem::absolute(path).lexically_normal().string();
    if (d.path.size() > 1 && d.path.back() == '/') d.path.pop_back();
    d.run_path = d.path + "/ssdtrain-" + std::to_string(::getpid()) + "-" + std::to_string(run_id) +
                 "-" + std::to_string(index);
    if (::mkdir(d.run_path.c_str(), 0700) != 0) {
      const int err = errno;
      return Status::IoError("offload directory " + d.path + " is not writable (mkdir " +
                             d.run_path + ": " + ErrnoText(err) +
                             "); make it writable or point --dir elsewhere");
    }
    d.cleanup_slot = detail::RegisterCleanupDir(d.run_path);
    dirs.push_back(d);
    run_dir_paths.push_back(d.run_path);
    Dir& dir = dirs.back();
    dir.fd = ::open(dir.run_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    if (dir.fd < 0) {
      return Status::IoError("cannot open offload run directory " + dir.run_path + ": " +
                             ErrnoText(errno));
    }
    // Probe O_DIRECT once per directory so the fallback warning is said once.
    if (options.direct_io) {
      constexpr const char* kProbe = ".direct-probe";
      const int fd =
          backend->OpenFile(dir.fd, kProbe, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
      if (fd >= 0) {
        ::close(fd);
      } else if (fd == -EINVAL) {
        dir.direct = false;
        Warn(dir.path +
             " refuses O_DIRECT (EINVAL; tmpfs and some overlay file systems do): "
             "using buffered I/O there, through the page cache");
      } else {
        return Status::IoError("offload directory " + dir.path + " is not writable (creating " +
                               dir.run_path + "/" + kProbe + ": " + ErrnoText(-fd) +
                               "); make it writable or point --dir elsewhere");
      }
      ::unlinkat(dir.fd, kProbe, 0);
    } else {
      dir.direct = false;
    }
    return Status::Ok();
  }

  // ---- Failures and cleanup (call with `mu` held) ----

  // Closes and unlinks every file; forgets every tensor.
  void RemoveFilesLocked() {
    for (auto& [key, f] : files) {
      if (f.fd >= 0) ::close(f.fd);
      ::unlinkat(dirs[static_cast<size_t>(f.dir)].fd, f.name.c_str(), 0);
    }
    files.clear();
    tensors.clear();
  }

  void RecordFailureLocked(const Status& s) {
    if (failed.ok()) failed = s;
  }

  Status StoppedStatusLocked() const {
    return Status(failed).WithPrefix("the offload engine stopped after an earlier failure");
  }

  // After a failure: once nothing is in flight, fails every queued job and
  // removes all files. Returns true when the purge has happened.
  void MaybePurgeLocked() {
    if (failed.ok() || purged || in_flight > 0 || unlocked_writes > 0) return;
    for (Job* job : queue) {
      if (job->in_flight == 0 && !job->finished) {
        if (job->status.ok()) job->status = StoppedStatusLocked();
        job->finished = true;
      }
    }
    queue.clear();
    RemoveFilesLocked();
    purged = true;
    if (pool) pool->Close(StoppedStatusLocked());
    cv.notify_all();
  }

  // A failure found outside the I/O thread: record it and wait for the purge.
  Status FailAndPurge(std::unique_lock<std::mutex>& lock, Status s) {
    RecordFailureLocked(s);
    backend->Notify();
    cv.wait(lock, [&] { return purged; });
    return s;
  }

  Status IoErrorStatus(const Job& job, int err) const {
    const char* verb = job.op == IoOp::kWrite ? "writing" : "reading";
    if (err == ENOSPC || err == EDQUOT) {
      return Status::ResourceExhausted(
          "disk full: " + std::to_string(RoundUp(job.bytes, kDirectIoAlign)) + " bytes needed in " +
          job.dir + " " + verb + " tensor " + std::to_string(job.tensor) + " (" + ErrnoText(err) +
          "); free space or point --dir elsewhere");
    }
    return Status::IoError(std::string(verb) + " tensor " + std::to_string(job.tensor) + " " +
                           (job.op == IoOp::kWrite ? "to " : "from ") + job.path +
                           " failed: " + ErrnoText(err) +
                           (err == EIO ? "; the disk reported an I/O error: check the device "
                                         "(dmesg) or point --dir elsewhere"
                                       : ""));
  }

  // ---- Public operations ----

  Result<File*> FileForLocked(const TensorKey& key, bool create) {
    const std::string name =
        key.file.empty() ? "t" + std::to_string(key.tensor) + ".bin" : key.file;
    SSDTRAIN_RETURN_IF_ERROR(CheckOffloadFileName(name));
    const int n = static_cast<int>(dirs.size());
    const int dir = key.device >= 0 ? key.device % n : static_cast<int>(key.tensor % n);
    const std::string fkey = std::to_string(dir) + "/" + name;
    auto it = files.find(fkey);
    if (it != files.end()) return &it->second;
    if (!create) return Status::NotFound("no offload file " + name);
    const Dir& d = dirs[static_cast<size_t>(dir)];
    const int flags = O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (d.direct ? O_DIRECT : 0);
    const int fd = backend->OpenFile(d.fd, name.c_str(), flags, 0600);
    if (fd < 0) {
      const std::string hint = -fd == ENOSPC || -fd == EDQUOT
                                   ? "; free space or point --dir elsewhere"
                                   : "; make the directory writable or point --dir elsewhere";
      return Status::IoError("cannot create offload file " + d.run_path + "/" + name + ": " +
                             ErrnoText(-fd) + hint);
    }
    File f;
    f.dir = dir;
    f.name = name;
    f.path = d.run_path + "/" + name;
    f.fd = fd;
    auto [ins, ok] = files.emplace(fkey, std::move(f));
    return &ins->second;
  }

  Result<Ticket> Enqueue(const TensorKey& key, IoOp op, char* buf, int64_t bytes) {
    if (buf == nullptr || bytes <= 0) {
      return Status::InvalidArgument("tensor " + std::to_string(key.tensor) +
                                     ": buffer must be non-null and bytes > 0, got " +
                                     std::to_string(bytes));
    }
    if (key.tensor < 0) {
      return Status::InvalidArgument("tensor id " + std::to_string(key.tensor) +
                                     " is negative; tensor ids are >= 0");
    }
    if (!key.file.empty()) SSDTRAIN_RETURN_IF_ERROR(CheckOffloadFileName(key.file));
    const int64_t blocks = (bytes + options.block_size - 1) / options.block_size;
    std::vector<uint32_t> crcs(static_cast<size_t>(blocks));
    if (op == IoOp::kWrite) {
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t start = b * options.block_size;
        crcs[static_cast<size_t>(b)] =
            Crc32c(buf + start, static_cast<size_t>(std::min(options.block_size, bytes - start)));
      }
    }
    std::unique_lock lock(mu);
    if (!failed.ok()) return StoppedStatusLocked();
    if (stopping) return Status::FailedPrecondition("the offload engine is shutting down");
    auto job = std::make_unique<Job>();
    job->op = op;
    job->tensor = key.tensor;
    job->buf = buf;
    job->bytes = bytes;
    job->blocks = blocks;
    job->crcs = std::move(crcs);
    Tensor* t = nullptr;
    File* file = nullptr;
    if (op == IoOp::kWrite) {
      if (key.offset < 0 || key.offset % kDirectIoAlign != 0) {
        return Status::InvalidArgument("tensor " + std::to_string(key.tensor) + ": file offset " +
                                       std::to_string(key.offset) +
                                       " is not a non-negative multiple of 4096");
      }
      if (tensors.count(key.tensor) != 0) {
        return Status::FailedPrecondition("tensor " + std::to_string(key.tensor) +
                                          " is already offloaded; Remove it before writing again");
      }
      const int64_t end = key.offset + RoundUp(bytes, kDirectIoAlign);
      // Every refusal comes before the file is created: a refused write leaves
      // no file and no open fd behind.
      auto existing = FileForLocked(key, /*create=*/false);
      if (existing.ok()) {
        const File& f = **existing;
        auto next = f.extents.lower_bound(key.offset);
        const bool overlaps_next = next != f.extents.end() && next->first < end;
        const bool overlaps_prev = next != f.extents.begin() && std::prev(next)->second > key.offset;
        if (overlaps_next || overlaps_prev) {
          return Status::InvalidArgument("tensor " + std::to_string(key.tensor) + " at [" +
                                         std::to_string(key.offset) + ", " + std::to_string(end) +
                                         ") overlaps another tensor in " + f.path);
        }
      } else if (existing.status().code() != Status::Code::kNotFound) {
        return existing.status();
      }
      auto f = FileForLocked(key, /*create=*/true);
      if (!f.ok()) return FailAndPurge(lock, f.status());
      file = *f;
      file->extents[key.offset] = end;
      Tensor rec;
      rec.file_key = std::to_string(file->dir) + "/" + file->name;
      rec.offset = key.offset;
      rec.bytes = bytes;
      rec.crcs.assign(static_cast<size_t>(job->blocks), 0);
      t = &tensors.emplace(key.tensor, std::move(rec)).first->second;
      if (options.preallocate && end > file->reserved_end) {
        const int fd = file->fd;
        const int64_t len = end - key.offset;
        t->active_jobs++;  // keeps Remove away while unlocked
        ++unlocked_writes;  // keeps RemoveAll and the purge away (they would free t, close fd)
        lock.unlock();
        detail::HitTestPoint(detail::TestPoint::kWriteUnlocked, key.tensor);
        const int rc = ::fallocate(fd, 0, key.offset, len);
        const int err = rc == 0 ? 0 : errno;
        lock.lock();
        t->active_jobs--;
        --unlocked_writes;
        if (!failed.ok()) {
          // A failure came meanwhile; the purge waited for this write to let go.
          backend->Notify();
          cv.wait(lock, [&] { return purged; });
          return StoppedStatusLocked();
        }
        if (err != 0 && err != EOPNOTSUPP && err != ENOSYS) {
          job->dir = dirs[static_cast<size_t>(file->dir)].path;
          job->path = file->path;
          return FailAndPurge(lock, IoErrorStatus(*job, err));
        }
      }
    } else {
      auto it = tensors.find(key.tensor);
      if (it == tensors.end()) {
        return Status::NotFound("tensor " + std::to_string(key.tensor) +
                                " was never offloaded (or was removed); nothing to read");
      }
      t = &it->second;
      if (!t->written) {
        return Status::FailedPrecondition("tensor " + std::to_string(key.tensor) +
                                          ": its write has not completed; Wait on it first");
      }
      if (t->bytes != bytes) {
        return Status::InvalidArgument("tensor " + std::to_string(key.tensor) + ": read of " +
                                       std::to_string(bytes) + " bytes but " +
                                       std::to_string(t->bytes) + " were written");
      }
      file = &files.at(t->file_key);
      job->crcs = t->crcs;
    }
    job->fd = file->fd;
    job->direct = dirs[static_cast<size_t>(file->dir)].direct;
    job->path = file->path;
    job->dir = dirs[static_cast<size_t>(file->dir)].path;
    job->file_offset = t->offset;
    t->active_jobs++;
    job->id = next_ticket++;
    Job* raw = job.get();
    jobs.emplace(job->id, std::move(job));
    queue.push_back(raw);
    lock.unlock();
    cv.notify_all();  // RemoveAll may be waiting for this write to be queued
    backend->Notify();
    return Ticket{raw->id};
  }

  Status Wait(Ticket ticket) {
    std::unique_lock lock(mu);
    auto it = jobs.find(ticket.id);
    if (it == jobs.end()) {
      return Status::InvalidArgument("unknown ticket " + std::to_string(ticket.id) +
                                     " (already waited for?)");
    }
    Job* job = it->second.get();
    cv.wait(lock, [&] { return job->finished; });
    if (job->status.ok() && job->op == IoOp::kRead) {
      lock.unlock();
      Status check = VerifyRead(*job);
      lock.lock();
      if (!check.ok()) {
        job->status = check;
        RecordFailureLocked(check);
        backend->Notify();
      } else {
        stats.bytes_read += job->bytes;
      }
    }
    // A failing job's files go away before its waiter hears of the failure.
    if (!job->status.ok()) cv.wait(lock, [&] { return purged; });
    Status s = job->status;
    jobs.erase(it);
    return s;
  }

  // Checks every extent of a completed read against its stored CRC32C.
  Status VerifyRead(const Job& job) const {
    for (int64_t b = 0; b < job.blocks; ++b) {
      const int64_t start = b * options.block_size;
      const int64_t payload = std::min(options.block_size, job.bytes - start);
      const uint32_t want = job.crcs[static_cast<size_t>(b)];
      const uint32_t got = Crc32c(job.buf + start, static_cast<size_t>(payload));
      if (got != want) {
        char hex[64];
        std::snprintf(hex, sizeof(hex), "stored CRC32C %08x, read %08x", want, got);
        const int64_t at = job.file_offset + start;
        return Status::Corruption("checksum mismatch reading tensor " + std::to_string(job.tensor) +
                                  " from " + job.path + " at bytes [" + std::to_string(at) + ", " +
                                  std::to_string(at + payload) + "): " + hex +
                                  "; the file was modified or the disk returned bad data");
      }
    }
    return Status::Ok();
  }

  bool Done(Ticket ticket) const {
    std::lock_guard lock(mu);
    auto it = jobs.find(ticket.id);
    return it != jobs.end() && it->second->finished && (it->second->status.ok() || purged);
  }

  Status Preallocate(const std::string& name, int device, int64_t bytes) {
    SSDTRAIN_RETURN_IF_ERROR(CheckOffloadFileName(name));
    if (bytes <= 0) return Status::InvalidArgument("preallocate " + name + ": bytes must be > 0");
    std::unique_lock lock(mu);
    if (!failed.ok()) return StoppedStatusLocked();
    TensorKey key;
    key.file = name;
    key.device = device < 0 ? 0 : device;
    auto f = FileForLocked(key, /*create=*/true);
    if (!f.ok()) return FailAndPurge(lock, f.status());
    File* file = *f;
    const int64_t len = RoundUp(bytes, kDirectIoAlign);
    if (len <= file->reserved_end) return Status::Ok();
    // No I/O can be in flight on a file nobody has written yet, so holding the
    // lock through fallocate does not stall completions for long.
    if (::fallocate(file->fd, 0, 0, len) != 0 && errno != EOPNOTSUPP && errno != ENOSYS) {
      const int err = errno;
      Job probe;
      probe.op = IoOp::kWrite;
      probe.tensor = -1;
      probe.bytes = len;
      probe.dir = dirs[static_cast<size_t>(file->dir)].path;
      probe.path = file->path;
      Status st = err == ENOSPC || err == EDQUOT
                      ? Status::ResourceExhausted(
                            "disk full: " + std::to_string(len) + " bytes needed in " + probe.dir +
                            " (" + ErrnoText(err) + "); free space or point --dir elsewhere")
                      : IoErrorStatus(probe, err);
      return FailAndPurge(lock, st);
    }
    file->reserved_end = len;
    return Status::Ok();
  }

  Status Remove(traces::TensorId tensor) {
    std::lock_guard lock(mu);
    if (!failed.ok()) return StoppedStatusLocked();
    auto it = tensors.find(tensor);
    if (it == tensors.end()) {
      return Status::NotFound("tensor " + std::to_string(tensor) + " is not offloaded");
    }
    if (it->second.active_jobs > 0) {
      return Status::FailedPrecondition("tensor " + std::to_string(tensor) +
                                        " has I/O in flight; Wait on its tickets first");
    }
    auto fit = files.find(it->second.file_key);
    fit->second.extents.erase(it->second.offset);
    if (fit->second.extents.empty()) {
      ::close(fit->second.fd);
      ::unlinkat(dirs[static_cast<size_t>(fit->second.dir)].fd, fit->second.name.c_str(), 0);
      files.erase(fit);
    }
    tensors.erase(it);
    return Status::Ok();
  }

  Status RemoveAll() {
    std::unique_lock lock(mu);
    cv.wait(lock,
            [&] { return (queue.empty() && in_flight == 0 && unlocked_writes == 0) || purged; });
    RemoveFilesLocked();
    return failed.ok() ? Status::Ok() : StoppedStatusLocked();
  }

  // ---- The I/O thread ----

  void SetBusy(IoOp op, int delta) {
    const int d = op == IoOp::kRead ? 0 : 1;
    const int before = dir_in_flight[d];
    dir_in_flight[d] += delta;
    if (before == 0 && dir_in_flight[d] > 0) busy_since[d] = NowNs();
    if (before > 0 && dir_in_flight[d] == 0) {
      const int64_t busy = NowNs() - busy_since[d];
      std::lock_guard lock(mu);
      (op == IoOp::kRead ? stats.read_busy_ns : stats.write_busy_ns) += busy;
    }
  }

  IoRequest ToIoRequest(const Request& r, size_t slot) const {
    IoRequest io;
    io.op = r.job->op;
    io.fd = r.job->fd;
    io.buf = r.io_buf + r.done;
    io.len = static_cast<uint32_t>(r.len - r.done);
    io.offset = r.offset + r.done;
    io.buf_index = r.buf_index;
    io.user_data = slot;
    return io;
  }

  bool InExternal(const char* p, int64_t n) const {
    const auto* base = static_cast<const char*>(options.external_staging.iov_base);
    return base != nullptr && p >= base &&
           p + n <= base + static_cast<int64_t>(options.external_staging.iov_len);
  }

  // The fixed-buffer index of the external staging chunk holding [p, p + n),
  // or -1 when the range straddles two chunks (it then goes unregistered).
  int ExternalFixedIndex(const char* p, int64_t n) const {
    const int chunk = detail::ChunkOf(static_cast<const char*>(options.external_staging.iov_base),
                                      p, n, detail::kMaxFixedBufferBytes);
    return chunk < 0 ? -1 : external_index + chunk;
  }

  // Prepares slot `s` for the job's next block: chooses the memory (zero-copy
  // when possible, else the slot's bounce block), copies and checksums writes.
  void Prepare(size_t s, Job* job, int64_t block) {
    Request& r = requests[s];
    r = Request{};
    r.busy = true;
    r.job = job;
    r.block = block;
    const int64_t start = block * options.block_size;
    r.payload = std::min(options.block_size, job->bytes - start);
    r.len = RoundUp(r.payload, kDirectIoAlign);
    r.offset = job->file_offset + start;
    char* user = job->buf + start;
    const bool in_lease = pool->InLeaseRegion(user, r.len);
    const bool in_external = InExternal(user, r.len);
    const bool aligned_start = reinterpret_cast<uintptr_t>(user) % kDirectIoAlign == 0;
    // In place when O_DIRECT can take the memory as it is: an aligned start,
    // and whole pages, or the padding up to the page owned by us (the lease
    // region) or by the caller's external staging.
    r.bounced = !(aligned_start && (in_lease || in_external || r.payload == r.len));
    r.io_buf = r.bounced ? pool->slot(static_cast<int>(s)) : user;
    r.buf_index = !registered ? -1
                  : in_external && !r.bounced
                      ? ExternalFixedIndex(r.io_buf, r.len)
                      : pool->FixedIndexOf(r.io_buf, r.len);
    r.crc = job->crcs[static_cast<size_t>(block)];
    if (job->op == IoOp::kWrite) {
      if (r.bounced) std::memcpy(r.io_buf, user, static_cast<size_t>(r.payload));
      if (r.len > r.payload) {
        std::memset(r.io_buf + r.payload, 0, static_cast<size_t>(r.len - r.payload));
      }
    }
  }

  // Handles one completion; returns true when the request must be resubmitted.
  bool Complete(size_t s, int64_t res, Status* error) {
    Request& r = requests[s];
    Job& job = *r.job;
    if (res == -EAGAIN) {
      const int64_t delay =
          ++r.eagain_streak < 2
              ? 0
              : std::min(kEagainBackoffMaxNs,
                         kEagainBackoffMinNs << std::min(r.eagain_streak - 2, kMaxBackoffShift));
      r.resubmit_ns = delay > 0 ? NowNs() + delay : 0;
      std::lock_guard lock(mu);
      stats.eagain_resubmits++;
      stats.eagain_backoff_ns += delay;
      return true;
    }
    r.eagain_streak = 0;
    if (res < 0) {
      *error = IoErrorStatus(job, static_cast<int>(-res));
      return false;
    }
    if (res == 0) {
      *error = Status::IoError(std::string(job.op == IoOp::kRead ? "unexpected end of file reading"
                                                                 : "zero-byte write writing") +
                               " tensor " + std::to_string(job.tensor) + " in " + job.path +
                               " at byte " + std::to_string(r.offset + r.done) + " (" +
                               std::to_string(r.len - r.done) +
                               " bytes missing); the file was truncated or the disk is failing");
      return false;
    }
    r.done += res;
    if (r.done < r.len && job.direct && r.done % kDirectIoAlign != 0) {
      *error = Status::IoError(
          std::string(job.op == IoOp::kRead ? "reading" : "writing") + " tensor " +
          std::to_string(job.tensor) + " in " + job.path + ": the device transferred " +
          std::to_string(r.done) + " of " + std::to_string(r.len) + " bytes at byte " +
          std::to_string(r.offset) + ", stopping inside a " + std::to_string(kDirectIoAlign) +
          "-byte block where O_DIRECT cannot continue; the file system or device is "
          "misbehaving: check it (dmesg) or point --dir elsewhere");
      return false;
    }
    if (r.done < r.len) {
      std::lock_guard lock(mu);
      stats.short_continuations++;
      return true;
    }
    if (job.op == IoOp::kRead && r.bounced) {
      std::memcpy(job.buf + r.block * options.block_size, r.io_buf, static_cast<size_t>(r.payload));
    }
    return false;
  }

  // Submits `batch`; the requests the backend did not queue are failed here,
  // once, and never reach the kernel afterwards.
  void SubmitBatch(const std::vector<IoRequest>& batch, const char* what,
                   std::vector<size_t>* free_slots) {
    if (batch.empty()) return;
    size_t queued = 0;
    Status s = backend->Submit(batch, &queued);
    if (s.ok() && queued == batch.size()) return;
    if (s.ok()) s = Status::Internal("the I/O backend queued only part of a batch");
    for (size_t i = queued; i < batch.size(); ++i) {
      FinishRequest(static_cast<size_t>(batch[i].user_data), s.WithPrefix(what), free_slots);
    }
  }

  void IoLoop() {
    const size_t depth = requests.size();
    std::vector<IoRequest> batch;
    std::vector<IoCompletion> done(depth);
    std::vector<size_t> free_slots;
    for (size_t i = depth; i-- > 0;) free_slots.push_back(i);
    while (true) {
      batch.clear();
      int64_t wait_ns = -1;
      {
        std::unique_lock lock(mu);
        MaybePurgeLocked();
        if (stopping && in_flight == 0) {
          for (Job* job : queue) {
            if (job->in_flight == 0) {
              job->status = Status::FailedPrecondition("the offload engine was destroyed");
              job->finished = true;
            }
          }
          queue.clear();
          cv.notify_all();
          return;
        }
        // Take blocks while slots are free.
        while (failed.ok() && !stopping && !queue.empty() && !free_slots.empty()) {
          Job* job = queue.front();
          const int64_t block = job->next_block++;
          if (job->next_block == job->blocks) queue.pop_front();
          const size_t s = free_slots.back();
          free_slots.pop_back();
          job->in_flight++;
          in_flight++;
          stats.requests++;
          lock.unlock();
          Prepare(s, job, block);
          ScheduleRelease(s, job->op);
          SetBusy(job->op, +1);
          batch.push_back(ToIoRequest(requests[s], s));
          lock.lock();
        }
      }
      SubmitBatch(batch, "submitting I/O", &free_slots);
      batch.clear();
      ResubmitDue(&batch, &free_slots, &wait_ns);
      SubmitBatch(batch, "resubmitting I/O", &free_slots);
      ReleaseHeld(&free_slots, &wait_ns);
      Result<int> n = backend->Reap(done, 1, wait_ns);
      if (!n.ok()) {
        // Waiting failed, but the requests in flight are still the kernel's:
        // record the failure (no new blocks are taken) and keep reaping until
        // every one has come back; the purge follows then.
        {
          std::lock_guard lock(mu);
          RecordFailureLocked(n.status().WithPrefix("waiting for I/O completions"));
        }
        std::this_thread::sleep_for(kReapRetryDelay);
        continue;
      }
      batch.clear();
      for (int i = 0; i < *n; ++i) {
        const size_t s = static_cast<size_t>(done[static_cast<size_t>(i)].user_data);
        Status error;
        bool failed_already;
        {
          std::lock_guard lock(mu);
          failed_already = !failed.ok();
        }
        if (Complete(s, done[static_cast<size_t>(i)].result, &error) && !failed_already) {
          if (requests[s].resubmit_ns > 0) {
            backoff.push_back(s);  // -EAGAIN again: resubmitted after its backoff
            continue;
          }
          batch.push_back(ToIoRequest(requests[s], s));
          std::lock_guard lock(mu);
          stats.requests++;
          continue;
        }
        if (error.ok() && failed_already && requests[s].done < requests[s].len) {
          error = Status::IoError("cancelled after an earlier failure");
        }
        if (error.ok() && !failed_already && requests[s].release_ns > 0 &&
            requests[s].release_ns > NowNs()) {
          held.push_back(s);  // the capped link has not moved these bytes yet
          continue;
        }
        FinishRequest(s, error, &free_slots);
      }
      SubmitBatch(batch, "resubmitting I/O", &free_slots);
    }
  }

  // EAGAIN backoff: moves the slots whose backoff has passed into `batch` (or
  // cancels them after a failure); sets `wait_ns` to the time until the next.
  void ResubmitDue(std::vector<IoRequest>* batch, std::vector<size_t>* free_slots,
                   int64_t* wait_ns) {
    if (backoff.empty()) return;
    bool failed_already;
    {
      std::lock_guard lock(mu);
      failed_already = !failed.ok();
    }
    const int64_t now = NowNs();
    int64_t next = -1;
    size_t kept = 0;
    for (size_t s : backoff) {
      if (failed_already) {
        FinishRequest(s, Status::IoError("cancelled after an earlier failure"), free_slots);
      } else if (requests[s].resubmit_ns <= now) {
        batch->push_back(ToIoRequest(requests[s], s));
        std::lock_guard lock(mu);
        stats.requests++;
      } else {
        backoff[kept++] = s;
        const int64_t left = requests[s].resubmit_ns - now;
        next = next < 0 ? left : std::min(next, left);
      }
    }
    backoff.resize(kept);
    if (next >= 0 && (*wait_ns < 0 || next < *wait_ns)) *wait_ns = next;
  }

  // Retires slot `s` with `error` (OK: its block is done and checked).
  // Bandwidth cap: the time request `s` may complete (0: uncapped).
  void ScheduleRelease(size_t s, IoOp op) {
    requests[s].release_ns = 0;
    const double rate = options.bandwidth_cap_bytes_per_s;
    if (rate <= 0) return;
    int64_t& link = link_free_ns[op == IoOp::kWrite ? 1 : 0];
    const int64_t start = std::max(NowNs(), link);
    link =
        start + static_cast<int64_t>(std::ceil(static_cast<double>(requests[s].len) / rate * 1e9));
    requests[s].release_ns = link;
  }

  // Finishes held completions whose release time has come; sets `wait_ns` to
  // the time until the next one (keeping a shorter wait already set).
  void ReleaseHeld(std::vector<size_t>* free_slots, int64_t* wait_ns) {
    if (held.empty()) return;
    const int64_t now = NowNs();
    int64_t next = -1;
    size_t kept = 0;
    for (size_t s : held) {
      if (requests[s].release_ns <= now) {
        FinishRequest(s, Status::Ok(), free_slots);
      } else {
        held[kept++] = s;  // in place: this runs on every pass of the I/O loop
        const int64_t left = requests[s].release_ns - now;
        next = next < 0 ? left : std::min(next, left);
      }
    }
    held.resize(kept);
    if (next >= 0 && (*wait_ns < 0 || next < *wait_ns)) *wait_ns = next;
  }

  void FinishRequest(size_t s, const Status& error, std::vector<size_t>* free_slots) {
    Request& r = requests[s];
    Job& job = *r.job;
    SetBusy(job.op, -1);
    std::lock_guard lock(mu);
    r.busy = false;
    free_slots->push_back(s);
    in_flight--;
    job.in_flight--;
    if (error.ok()) {
      job.blocks_done++;
      if (r.bounced) stats.bounce_copies++;
      if (job.op == IoOp::kWrite) {
        auto it = tensors.find(job.tensor);
        if (it != tensors.end()) it->second.crcs[static_cast<size_t>(r.block)] = r.crc;
        stats.bytes_written += r.payload;
      }
    } else {
      if (job.status.ok()) job.status = error;
      RecordFailureLocked(error);
      // No more blocks of this job.
      auto q = std::find(queue.begin(), queue.end(), &job);
      if (q != queue.end()) queue.erase(q);
      job.next_block = job.blocks;
    }
    const bool all_submitted = job.next_block >= job.blocks;
    if (job.in_flight == 0 && all_submitted && !job.finished) {
      job.finished = true;
      if (job.status.ok()) {
        if (job.blocks_done != job.blocks) {
          job.status = Status::Internal("tensor " + std::to_string(job.tensor) +
                                        ": job finished with blocks missing");
        }
      }
      auto it = tensors.find(job.tensor);
      if (it != tensors.end()) {
        it->second.active_jobs--;
        if (job.op == IoOp::kWrite && job.status.ok()) it->second.written = true;
      }
      cv.notify_all();
    }
  }
};

// ---- OffloadEngine ----

OffloadEngine::OffloadEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OffloadEngine::~OffloadEngine() = default;

Result<std::unique_ptr<OffloadEngine>> OffloadEngine::Create(OffloadOptions options) {
  SSDTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<IoBackend> backend,
                            MakeIoBackend(options.backend, options.queue_depth, options.warn));
  return Create(std::move(options), std::move(backend));
}

Result<std::unique_ptr<OffloadEngine>> OffloadEngine::Create(OffloadOptions options,
                                                             std::unique_ptr<IoBackend> backend) {
  if (backend == nullptr) return Status::InvalidArgument("no I/O backend given");
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->warn = impl->options.warn;
  impl->backend = std::move(backend);
  SSDTRAIN_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<OffloadEngine>(new OffloadEngine(std::move(impl)));
}

Result<Ticket> OffloadEngine::WriteAsync(const TensorKey& key, const void* src, int64_t bytes) {
  // The engine only reads from src on writes.
  return impl_->Enqueue(key, IoOp::kWrite, const_cast<char*>(static_cast<const char*>(src)), bytes);
}

Result<Ticket> OffloadEngine::ReadAsync(const TensorKey& key, void* dst, int64_t bytes) {
  return impl_->Enqueue(key, IoOp::kRead, static_cast<char*>(dst), bytes);
}

Status OffloadEngine::Wait(Ticket ticket) { return impl_->Wait(ticket); }
bool OffloadEngine::Done(Ticket ticket) const { return impl_->Done(ticket); }

Status OffloadEngine::Write(const TensorKey& key, const void* src, int64_t bytes) {
  SSDTRAIN_ASSIGN_OR_RETURN(Ticket t, WriteAsync(key, src, bytes));
  return Wait(t);
}

Status OffloadEngine::Read(const TensorKey& key, void* dst, int64_t bytes) {
  SSDTRAIN_ASSIGN_OR_RETURN(Ticket t, ReadAsync(key, dst, bytes));
  return Wait(t);
}

Status OffloadEngine::Remove(traces::TensorId tensor) { return impl_->Remove(tensor); }
Status OffloadEngine::Preallocate(const std::string& file, int device, int64_t bytes) {
  return impl_->Preallocate(file, device, bytes);
}
Status OffloadEngine::RemoveAll() { return impl_->RemoveAll(); }

Result<StagingLease> OffloadEngine::AcquireStaging(int64_t bytes) {
  int64_t capacity = 0;
  SSDTRAIN_ASSIGN_OR_RETURN(char* p, impl_->pool->Acquire(bytes, &capacity));
  StagingLease lease;
  lease.owner_ = this;
  lease.data_ = p;
  lease.capacity_ = capacity;
  return lease;
}

void OffloadEngine::ReleaseStaging(void* data, int64_t capacity) {
  impl_->pool->Release(data, capacity);
}

OffloadStats OffloadEngine::Stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

std::string OffloadEngine::BackendName() const { return impl_->backend->Name(); }

bool OffloadEngine::direct_io() const {
  return std::all_of(impl_->dirs.begin(), impl_->dirs.end(),
                     [](const Impl::Dir& d) { return d.direct; });
}

bool OffloadEngine::buffers_registered() const { return impl_->registered; }

const std::vector<std::string>& OffloadEngine::run_dirs() const { return impl_->run_dir_paths; }

Result<std::string> OffloadEngine::FilePath(traces::TensorId tensor) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->tensors.find(tensor);
  if (it == impl_->tensors.end()) {
    return Status::NotFound("tensor " + std::to_string(tensor) + " is not offloaded");
  }
  return impl_->files.at(it->second.file_key).path;
}

}  // namespace ssdtrain::exec

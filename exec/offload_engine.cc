// OffloadEngine: setup (options, run directories, the backend, staging), teardown
// and the public methods. The parts of Impl are listed in detail/engine_impl.h.
#include "exec/offload_engine.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "exec/cufile_backend.h"
#include "exec/detail/cleanup_registry.h"
#include "exec/detail/engine_impl.h"
#include "exec/detail/errno_text.h"
#include "exec/detail/round_up.h"
#include "exec/detail/staging_pool.h"
#include "exec/offload_dir.h"

namespace ssdtrain::exec {
namespace {

using detail::ErrnoText;
using detail::NowNs;
using detail::RoundUp;

// Fixed buffers are limited to 1 GiB each by the kernel.
constexpr int64_t kMaxStagingBytes = int64_t{1} << 30;
// The largest single request io_uring and pread/pwrite take in one go (uint32 len).
constexpr int64_t kMaxBlockSize = int64_t{1} << 30;
// The slowest bandwidth cap accepted: below it one 1 GiB request would take
// longer than ~18 minutes and the link's int64 ns clock could overflow.
constexpr double kMinBandwidthCap = 1e6;  // bytes/s
// Distinguishes run directories of several engines in one process.
std::atomic<int> g_run_counter{0};

}  // namespace

OffloadEngine::Impl::~Impl() {
  {
    detail::MutexLock lock(&mu);
    stopping = true;
  }
  cv.NotifyAll();
  if (backend) backend->Notify();
  if (io_thread.joinable()) io_thread.join();
  if (pool) pool->Close(Status::FailedPrecondition("the offload engine was destroyed"));
  detail::MutexLock lock(&mu);
  // What an unlink leaves here goes with the run directory just below.
  (void)RemoveFilesLocked();
  for (Dir& d : dirs) {
    if (d.fd >= 0) ::close(d.fd);
    if (!d.run_path.empty() && !detail::RemoveDirSignalSafe(d.run_path.c_str())) {
      Warn("could not remove offload run directory " + d.run_path + " (" + ErrnoText(errno) +
           "); `ssdtrain clean --dir " + d.path + "` removes it once this process has ended");
    }
    detail::UnregisterCleanupDir(d.cleanup_slot);
  }
}

Status OffloadEngine::Impl::Init() {
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
  {
    detail::MutexLock lock(&mu);
    stats.bytes_written_per_dir.assign(dirs.size(), 0);
  }
  SSDTRAIN_ASSIGN_OR_RETURN(
      pool,
      detail::StagingPool::Create(options.queue_depth, options.block_size, options.staging_bytes));
  if (options.external_staging.iov_len > 0 &&
      (reinterpret_cast<uintptr_t>(options.external_staging.iov_base) % kDirectIoAlign != 0 ||
       options.external_staging.iov_len % kDirectIoAlign != 0)) {
    return Status::InvalidArgument("external staging memory must be aligned to and a multiple of " +
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

Status OffloadEngine::Impl::OpenDir(const std::string& path, int run_id, int index) {
  // A file system in memory is refused below, after the O_DIRECT probe (whose
  // refusal, tmpfs's before Linux 6.6, says more).
  SSDTRAIN_RETURN_IF_ERROR(CheckOffloadDir(path, /*allow_buffered_io=*/true));
  Dir d;
  d.path = std::filesystem::absolute(path).lexically_normal().string();
  if (d.path.size() > 1 && d.path.back() == '/') d.path.pop_back();
  d.run_path = d.path + "/ssdtrain-" + std::to_string(::getpid()) + "-" + std::to_string(run_id) +
               "-" + std::to_string(index);
  // Runs killed without cleanup (SIGKILL, a crash) left their files here.
  std::vector<std::string> swept;
  if (Status s = SweepDeadRuns(d.path, &swept); !s.ok()) Warn(s.message());
  if (!swept.empty()) {
    std::string list;
    for (const std::string& p : swept) list += (list.empty() ? "" : ", ") + p;
    Warn("removed " + std::to_string(swept.size()) +
         " offload run directories left by processes that no longer run: " + list);
  }
  if (::mkdir(d.run_path.c_str(), 0700) != 0) {
    const int err = errno;
    return Status::IoError("offload directory " + d.path + " is not writable (mkdir " + d.run_path +
                           ": " + ErrnoText(err) + "); make it writable or point --dir elsewhere");
  }
  Result<int> slot = detail::RegisterCleanupDir(d.run_path);
  if (!slot.ok()) {
    ::rmdir(d.run_path.c_str());
    return slot.status();
  }
  d.cleanup_slot = *slot;
  dirs.push_back(d);
  run_dir_paths.push_back(d.run_path);
  Dir& dir = dirs.back();
  dir.fd = ::open(dir.run_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dir.fd < 0) {
    return Status::IoError("cannot open offload run directory " + dir.run_path + ": " +
                           ErrnoText(errno));
  }
  // Held while the engine lives: SweepDeadRuns leaves a locked run directory alone.
  if (::flock(dir.fd, LOCK_EX | LOCK_NB) != 0) {
    return Status::IoError("cannot lock offload run directory " + dir.run_path + ": " +
                           ErrnoText(errno));
  }
  // Probe O_DIRECT once per directory, so that a refusal is reported (or, when
  // allowed, warned about) once and not per file.
  if (options.direct_io) {
    constexpr const char* kProbe = ".direct-probe";
    const int fd =
        backend->OpenFile(dir.fd, kProbe, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
    // Some kernels create the file before refusing O_DIRECT on it.
    ::unlinkat(dir.fd, kProbe, 0);
    if (fd >= 0) {
      ::close(fd);
      // It took O_DIRECT, as tmpfs does since Linux 6.6: memory all the same.
      const std::string memory = MemoryFileSystem(dir.path);
      if (!memory.empty() && !options.allow_buffered_io) {
        return CheckOffloadDir(dir.path, /*allow_buffered_io=*/false);
      }
      if (!memory.empty()) {
        dir.direct = false;
        Warn(dir.path + ": is on " + memory +
             ", which keeps its files in memory; using buffered I/O there "
             "(--allow-buffered-io): what is measured there is memory, not the drive");
      }
    } else if (fd == -EINVAL && options.allow_buffered_io) {
      dir.direct = false;
      Warn(dir.path +
           ": the filesystem refused O_DIRECT (EINVAL); using buffered I/O there "
           "(--allow-buffered-io): what is measured there is the page cache, not the drive");
    } else if (fd == -EINVAL) {
      return Status::Unavailable(
          dir.path +
          ": the filesystem refused O_DIRECT (EINVAL; tmpfs before Linux 6.6, ramfs and some "
          "overlay file systems do); point --dir at a directory on the SSD, or pass "
          "--allow-buffered-io to measure through the page cache");
    } else {
      return Status::IoError("offload directory " + dir.path + " is not writable (creating " +
                             dir.run_path + "/" + kProbe + ": " + ErrnoText(-fd) +
                             "); make it writable or point --dir elsewhere");
    }
  } else {
    // Buffered by choice: a file system in memory is still not a drive.
    if (!MemoryFileSystem(dir.path).empty() && !options.allow_buffered_io) {
      return CheckOffloadDir(dir.path, /*allow_buffered_io=*/false);
    }
    dir.direct = false;
  }
  return Status::Ok();
}

// ---- OffloadEngine ----

OffloadEngine::OffloadEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OffloadEngine::~OffloadEngine() = default;

Result<std::unique_ptr<OffloadEngine>> OffloadEngine::Create(OffloadOptions options) {
  // A cuFile request blocks its thread for its whole transfer: one thread per
  // request in flight.
  SSDTRAIN_ASSIGN_OR_RETURN(
      std::unique_ptr<IoBackend> backend,
      options.cufile != nullptr
          ? MakeCuFileBackend(options.cufile, std::max(options.queue_depth, 1), options.warn)
          : MakeIoBackend(options.backend, options.queue_depth, options.warn));
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

Result<Ticket> OffloadEngine::WriteDeviceAsync(const TensorKey& key, const void* device_src,
                                               int64_t bytes) {
  return impl_->Enqueue(key, IoOp::kWrite, const_cast<char*>(static_cast<const char*>(device_src)),
                        bytes, /*device=*/true);
}

Result<Ticket> OffloadEngine::ReadDeviceAsync(const TensorKey& key, void* device_dst,
                                              int64_t bytes) {
  return impl_->Enqueue(key, IoOp::kRead, static_cast<char*>(device_dst), bytes, /*device=*/true);
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
  detail::MutexLock lock(&impl_->mu);
  return impl_->stats;
}

std::string OffloadEngine::BackendName() const { return impl_->backend->Name(); }

bool OffloadEngine::direct_io() const {
  return std::all_of(impl_->dirs.begin(), impl_->dirs.end(),
                     [](const Impl::Dir& d) { return d.direct; });
}

bool OffloadEngine::buffers_registered() const { return impl_->registered; }
bool OffloadEngine::device_io() const { return impl_->options.cufile != nullptr; }

const std::vector<std::string>& OffloadEngine::run_dirs() const { return impl_->run_dir_paths; }

Result<std::string> OffloadEngine::FilePath(traces::TensorId tensor) const {
  detail::MutexLock lock(&impl_->mu);
  auto it = impl_->tensors.find(tensor);
  if (it == impl_->tensors.end()) {
    return Status::NotFound("tensor " + std::to_string(tensor) + " is not offloaded");
  }
  return impl_->files.at(it->second.file_keys.front()).path;
}

}  // namespace ssdtrain::exec

#include "exec/cpu_device.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>
#include <vector>

#include "exec/detail/format_bytes.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec {
namespace {

// Allocation alignment: a cache line, as cudaMalloc's 256 B is for a GPU.
constexpr int64_t kAlignment = 64;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Records are numbered; a stream completes them in order, so waiting for
// number g means waiting until completed_ >= g (a later record does not
// release an earlier wait, even when the host has already re-recorded).
class CpuEvent final : public Event {
 public:
  // A new record: pending until Complete(number).
  uint64_t Arm() {
    std::lock_guard<std::mutex> lock(mu_);
    return ++armed_;
  }
  void Complete(uint64_t number, Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (number <= completed_) return;
    completed_ = number;
    status_ = std::move(status);
    time_ns_ = NowNs();
    // Notify under the lock: a waiter that sees the completion may destroy the
    // event at once, and a notify after unlocking would touch a freed condvar
    // (ThreadSanitizer found it in the device conformance test).
    cv_.notify_all();
  }
  uint64_t armed() {
    std::lock_guard<std::mutex> lock(mu_);
    return armed_;
  }
  Status WaitFor(uint64_t number) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return completed_ >= number; });
    return status_;
  }
  Status Synchronize() override { return WaitFor(armed()); }
  bool Query() override {
    std::lock_guard<std::mutex> lock(mu_);
    return completed_ >= armed_;
  }
  Result<int64_t> TimeNs() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (completed_ < armed_)
      return Status::FailedPrecondition("event time read before it completed");
    if (!status_.ok()) return status_;
    return time_ns_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t armed_ = 0;      // records made (never recorded: complete)
  uint64_t completed_ = 0;  // records completed, in stream order
  Status status_;
  int64_t time_ns_ = 0;
};

Status CheckRange(const DeviceBuffer& b, int64_t offset, int64_t bytes, const char* what) {
  if (!b.valid() || offset < 0 || bytes < 0 || offset + bytes > b.bytes) {
    return Status::InvalidArgument(std::string(what) + ": range [" + std::to_string(offset) + ", " +
                                   std::to_string(offset + bytes) +
                                   ") is outside the device buffer of " + std::to_string(b.bytes) +
                                   " bytes");
  }
  return Status::Ok();
}

}  // namespace

CpuDevice::CpuDevice(const DeviceOptions& options)
    : capacity_(options.capacity_bytes),
      compute_threads_(std::max(1, options.cpu_compute_threads)),
      ranges_(options.capacity_bytes, kAlignment),
      compute_(std::make_unique<detail::StreamWorker>("cpu compute")),
      d2h_(std::make_unique<detail::StreamWorker>("cpu d2h")),
      h2d_(std::make_unique<detail::StreamWorker>("cpu h2d")),
      send_(std::make_unique<detail::StreamWorker>("cpu send")),
      receive_(std::make_unique<detail::StreamWorker>("cpu recv")) {
  // The arena is reserved, not committed: pages cost memory once touched.
  void* p = capacity_ > 0 ? mmap(nullptr, static_cast<size_t>(capacity_), PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                          : MAP_FAILED;
  if (p == MAP_FAILED) {
    base_error_ = "reserving a CPU arena of " + detail::FormatBytes(capacity_) +
                  " failed: " + std::strerror(errno) + "; lower --device-memory";
  } else {
    base_ = static_cast<uint8_t*>(p);
    // Transparent huge pages where the kernel offers them on request
    // (`madvise` mode): the first touch of each 4 KiB page otherwise costs a
    // fault, which made a replay's first step of small-gpt take 7 s instead of
    // 4 (286k faults). Best effort: without THP the arena works as before.
    (void)madvise(p, static_cast<size_t>(capacity_), MADV_HUGEPAGE);
  }
  if (options.cpu_pin_threads) cores_ = detail::SplitCores(detail::AllowedCpus(), compute_threads_);
  if (!cores_.compute.empty()) {
    // Each worker pins itself (GEMM helper threads inherit the compute mask).
    // A failure is reported here, not made the stream's sticky error.
    Status results[std::size(kAllStreams)];
    for (size_t i = 0; i < std::size(kAllStreams); ++i) {
      const Stream s = kAllStreams[i];
      std::vector<int> cpus = s == Stream::kCompute ? cores_.compute : cores_.helpers;
      worker(s).Enqueue([cpus = std::move(cpus), out = &results[i]] {
        *out = detail::PinCurrentThread(cpus);
        return Status::Ok();
      });
    }
    for (Stream s : kAllStreams) (void)worker(s).Synchronize();
    Status pinned;
    for (const Status& r : results) {
      if (pinned.ok()) pinned = r;
    }
    if (pinned.ok()) {
      pin_note_ = ", compute on CPU " + detail::FormatCpus(cores_.compute) + ", copies on CPU " +
                  detail::FormatCpus(cores_.helpers);
    } else {
      // Not fatal (a container may forbid it), but said: the run is unpinned.
      pin_note_ = ", threads not pinned (" + pinned.message() + ")";
      cores_ = {};
    }
  }
}

CpuDevice::~CpuDevice() {
  // Let enqueued work finish before the workspace goes.
  compute_.reset();
  d2h_.reset();
  h2d_.reset();
  send_.reset();
  receive_.reset();
  Free(workspace_.buffer);
  if (base_ != nullptr) munmap(base_, static_cast<size_t>(capacity_));
}

std::string CpuDevice::Describe() const {
  return "cpu (arena " + detail::FormatBytes(capacity_) + ", " + std::to_string(compute_threads_) +
         " Eigen thread" + (compute_threads_ == 1 ? "" : "s") + pin_note_ + ", fp32 compute)";
}

Result<DeviceBuffer> CpuDevice::Allocate(int64_t bytes) {
  if (bytes <= 0) {
    return Status::InvalidArgument("device allocation of " + std::to_string(bytes) + " bytes");
  }
  std::lock_guard<std::mutex> lock(alloc_mu_);
  if (base_ == nullptr) return Status::ResourceExhausted(base_error_);
  std::optional<int64_t> offset = ranges_.Allocate(bytes);
  if (!offset) {
    return Status::ResourceExhausted(
        "device arena out of memory: allocating " + detail::FormatBytes(ranges_.Rounded(bytes)) +
        " with " + detail::FormatBytes(ranges_.used()) + " in use of a " +
        detail::FormatBytes(capacity_) + " capacity (largest free block " +
        detail::FormatBytes(ranges_.largest_free()) + ")");
  }
  used_.store(ranges_.used());
  if (ranges_.used() > peak_.load()) peak_.store(ranges_.used());
  return DeviceBuffer{base_ + *offset, bytes};
}

void CpuDevice::Free(DeviceBuffer buffer) {
  if (!buffer.valid()) return;
  std::lock_guard<std::mutex> lock(alloc_mu_);
  ranges_.Free(static_cast<uint8_t*>(buffer.ptr) - base_, buffer.bytes);
  used_.store(ranges_.used());
}

detail::StreamWorker& CpuDevice::worker(Stream stream) {
  switch (stream) {
    case Stream::kCompute:
      return *compute_;
    case Stream::kDeviceToHost:
      return *d2h_;
    case Stream::kHostToDevice:
      return *h2d_;
    case Stream::kSend:
      return *send_;
    case Stream::kReceive:
      break;
  }
  return *receive_;
}

int64_t CpuDevice::allocation_alignment() const { return kAlignment; }

Status CpuDevice::FillPatternAsync(DeviceBuffer buffer, uint64_t seed, Stream stream) {
  SSDTRAIN_RETURN_IF_ERROR(CheckRange(buffer, 0, buffer.bytes, "fill pattern"));
  worker(stream).Enqueue([buffer, seed]() -> Status {
    auto* p = static_cast<uint8_t*>(buffer.ptr);
    const uint64_t n = static_cast<uint64_t>(buffer.bytes);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const uint64_t w = PatternWord(seed, i >> 3);
      std::memcpy(p + i, &w, 8);  // little-endian: byte j is bits 8j..8j+7
    }
    for (; i < n; ++i) p[i] = PatternByte(seed, i);
    return Status::Ok();
  });
  return Status::Ok();
}

Status CpuDevice::CheckPattern(DeviceBuffer buffer, uint64_t seed, Stream stream) {
  SSDTRAIN_RETURN_IF_ERROR(CheckRange(buffer, 0, buffer.bytes, "check pattern"));
  SSDTRAIN_RETURN_IF_ERROR(Synchronize(stream));
  const auto* p = static_cast<const uint8_t*>(buffer.ptr);
  const uint64_t n = static_cast<uint64_t>(buffer.bytes);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != PatternWord(seed, i >> 3)) break;  // the byte loop below names the offset
  }
  for (; i < n; ++i) {
    if (p[i] != PatternByte(seed, i)) {
      return Status::Corruption("pattern mismatch at byte " + std::to_string(i) + " of " +
                                std::to_string(n) + " (seed " + std::to_string(seed) + ")");
    }
  }
  return Status::Ok();
}

Status CpuDevice::CopyToHostAsync(void* host_dst, DeviceBuffer src, int64_t offset, int64_t bytes,
                                  Stream stream) {
  SSDTRAIN_RETURN_IF_ERROR(CheckRange(src, offset, bytes, "device-to-host copy"));
  worker(stream).Enqueue([=]() -> Status {
    std::memcpy(host_dst, static_cast<const uint8_t*>(src.ptr) + offset,
                static_cast<size_t>(bytes));
    return Status::Ok();
  });
  return Status::Ok();
}

Status CpuDevice::CopyToDeviceAsync(DeviceBuffer dst, int64_t offset, const void* host_src,
                                    int64_t bytes, Stream stream) {
  SSDTRAIN_RETURN_IF_ERROR(CheckRange(dst, offset, bytes, "host-to-device copy"));
  worker(stream).Enqueue([=]() -> Status {
    std::memcpy(static_cast<uint8_t*>(dst.ptr) + offset, host_src, static_cast<size_t>(bytes));
    return Status::Ok();
  });
  return Status::Ok();
}

Result<std::unique_ptr<Event>> CpuDevice::CreateEvent() {
  return std::unique_ptr<Event>(std::make_unique<CpuEvent>());
}

Status CpuDevice::Record(Event& event, Stream stream) {
  auto& e = static_cast<CpuEvent&>(event);
  const uint64_t number = e.Arm();
  detail::StreamWorker& w = worker(stream);
  w.Enqueue(
      [&e, &w, number]() -> Status {
        e.Complete(number, w.error());
        return Status::Ok();
      },
      /*run_after_error=*/true);
  return Status::Ok();
}

Status CpuDevice::Wait(Stream stream, Event& event) {
  auto& e = static_cast<CpuEvent&>(event);
  const uint64_t number = e.armed();
  worker(stream).Enqueue([&e, number]() -> Status { return e.WaitFor(number); },
                         /*run_after_error=*/true);
  return Status::Ok();
}

Status CpuDevice::Synchronize(Stream stream) { return worker(stream).Synchronize(); }

}  // namespace ssdtrain::exec

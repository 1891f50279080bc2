#include "exec/cpu_device.h"

#include <sys/mman.h>

#include <Eigen/Core>
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

// Reads `bytes` from the buffers (cycling over them) and returns a sum that
// depends on every 8-byte word read, so the loop cannot be elided.
uint64_t TouchRead(std::span<const DeviceBuffer> buffers, int64_t bytes) {
  uint64_t sum = 0;
  int64_t total = 0;
  for (const DeviceBuffer& b : buffers) total += b.bytes;
  if (total == 0) return 0;
  while (bytes > 0) {
    for (const DeviceBuffer& b : buffers) {
      const int64_t n = std::min(bytes, b.bytes);
      const auto* p = static_cast<const uint8_t*>(b.ptr);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        uint64_t w;
        std::memcpy(&w, p + i, 8);
        sum += w;
      }
      for (; i < n; ++i) sum += p[i];
      bytes -= n;
      if (bytes <= 0) break;
    }
  }
  return sum;
}

// Keeps `value` alive so that a read loop whose result is otherwise unused is run.
inline void KeepAlive(uint64_t value) { asm volatile("" : : "r"(value) : "memory"); }

// Writes `bytes` over the buffers (cycling), each byte derived from `seed`.
void TouchWrite(std::span<const DeviceBuffer> buffers, int64_t bytes, uint64_t seed) {
  int64_t total = 0;
  for (const DeviceBuffer& b : buffers) total += b.bytes;
  if (total == 0) return;
  while (bytes > 0) {
    for (const DeviceBuffer& b : buffers) {
      const int64_t n = std::min(bytes, b.bytes);
      std::memset(b.ptr, static_cast<int>(seed & 0xff), static_cast<size_t>(n));
      bytes -= n;
      if (bytes <= 0) break;
    }
  }
}

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

Result<int64_t> CpuDevice::ReserveWorkspace(const traces::Trace& trace) {
  // The rule is the trace's (traces/storage_plan.h), so predictions count it too.
  const int64_t floats = traces::ReplayWorkspaceBytes(trace, workspace_output_region_bytes()) /
                         static_cast<int64_t>(sizeof(float));
  if (floats <= workspace_.floats) return workspace_.buffer.bytes;
  SSDTRAIN_RETURN_IF_ERROR(Synchronize(Stream::kCompute));
  Free(workspace_.buffer);
  workspace_ = {};
  if (floats == 0) return int64_t{0};
  auto buffer = Allocate(floats * static_cast<int64_t>(sizeof(float)));
  if (!buffer.ok()) return buffer.status().WithPrefix("GEMM workspace");
  workspace_.buffer = *buffer;
  workspace_.floats = floats;
  // Fixed operand values: the FLOPs are what is measured, not the numbers.
  std::fill_n(static_cast<float*>(workspace_.buffer.ptr), floats, 0.5f);
  return workspace_.buffer.bytes;
}

Status CpuDevice::RunGemm(int64_t m, int64_t n, int64_t k, int64_t batch, int64_t bytes_read,
                          const OpBuffers& buffers) {
  if (m * k + k * n + m * n > workspace_.floats) {
    return Status::FailedPrecondition("GEMM " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                      std::to_string(k) +
                                      " needs a larger workspace: call ReserveWorkspace first");
  }
  float* base = static_cast<float*>(workspace_.buffer.ptr);
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;
  Eigen::Map<const Mat> a(base, m, k);
  Eigen::Map<const Mat> b(base + m * k, k, n);
  Eigen::Map<Mat> c(base + m * k + k * n, m, n);
  // The inputs' bytes are read once, as the real op streams them in.
  KeepAlive(TouchRead(buffers.inputs, bytes_read));
  for (int64_t i = 0; i < batch; ++i) {
    if (compute_threads_ == 1 || n < compute_threads_) {
      c.noalias() = a * b;
    } else {
      std::vector<std::thread> threads;
      const int64_t per = (n + compute_threads_ - 1) / compute_threads_;
      for (int t = 0; t < compute_threads_; ++t) {
        const int64_t col = t * per;
        const int64_t cols = std::min(per, n - col);
        if (cols <= 0) break;
        threads.emplace_back(
            [&, col, cols] { c.middleCols(col, cols).noalias() = a * b.middleCols(col, cols); });
      }
      for (auto& th : threads) th.join();
    }
  }
  // The result lands in the outputs: copy C over them (cycling when larger).
  const auto* src = reinterpret_cast<const uint8_t*>(c.data());
  const int64_t c_bytes = m * n * static_cast<int64_t>(sizeof(float));
  for (const DeviceBuffer& out : buffers.outputs) {
    auto* dst = static_cast<uint8_t*>(out.ptr);
    for (int64_t off = 0; off < out.bytes; off += c_bytes) {
      std::memcpy(dst + off, src, static_cast<size_t>(std::min(c_bytes, out.bytes - off)));
    }
  }
  return Status::Ok();
}

Status CpuDevice::RunOpAsync(const traces::Op& op, const OpBuffers& buffers) {
  if (buffers.inputs.size() != op.inputs.size() || buffers.outputs.size() != op.outputs.size()) {
    return Status::InvalidArgument("op " + std::to_string(op.id) + " (" + op.name +
                                   "): " + std::to_string(buffers.inputs.size()) + " input and " +
                                   std::to_string(buffers.outputs.size()) + " output buffers for " +
                                   std::to_string(op.inputs.size()) + " inputs and " +
                                   std::to_string(op.outputs.size()) + " outputs");
  }
  // The buffer lists are copied: the caller's spans need not outlive the call.
  std::vector<DeviceBuffer> ins(buffers.inputs.begin(), buffers.inputs.end());
  std::vector<DeviceBuffer> outs(buffers.outputs.begin(), buffers.outputs.end());
  const traces::OpKind kind = op.kind;
  const std::optional<traces::GemmDims> gemm = op.gemm;
  const int64_t flops = op.flops, bytes_read = op.bytes_read, bytes_written = op.bytes_written;
  const int64_t attention_batch = traces::ReplayAttentionBatch(op);
  const int64_t id = op.id;
  compute_->Enqueue([=, this]() -> Status {
    OpBuffers b{ins, outs};
    if (gemm) return RunGemm(gemm->m, gemm->n, gemm->k, gemm->batch, bytes_read, b);
    if (kind == traces::OpKind::kAttention && flops > 0) {
      const int64_t s = traces::kReplayAttentionGemmSide;
      return RunGemm(s, s, s, attention_batch, bytes_read, b);
    }
    const uint64_t sum = TouchRead(ins, bytes_read);
    TouchWrite(outs, bytes_written, sum + static_cast<uint64_t>(id));
    return Status::Ok();
  });
  return Status::Ok();
}

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

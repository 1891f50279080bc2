// The CUDA backend's parts (exec/cuda_device.h): the CudaDevice, its events
// and their timing anchors, shared by the device itself, its arena and
// MakeCudaDevice (cuda_device.cc), its ops: GEMMs, touch kernels, patterns
// (cuda_ops.cc), and its copies, events and streams (cuda_streams.cc). Built
// only with CUDA (SSDTRAIN_WITH_CUDA).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "exec/detail/cublas_api.h"
#include "exec/detail/gemm_workspace.h"
#include "exec/detail/range_allocator.h"
#include "exec/device.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec::cuda_impl {

// cudaMalloc's own alignment; also what the uint4 kernels need.
inline constexpr int64_t kAlignment = 256;
// Left free when the capacity is "the GPU's free memory": cuBLAS workspaces
// and the context's own allocations live outside the arena.
inline constexpr int64_t kFreeMemoryMargin = int64_t{1} << 30;
// A capacity of "the GPU's free memory" is rounded down to whole GiB, so that
// a later device asking for the same capacity (the demo, from a calibrated
// config's memory_GiB) still fits when free memory has moved by a little.
inline constexpr int64_t kFreeMemoryGranule = int64_t{1} << 30;
// Side of the GEMM that stands in for a fused attention kernel (FLOPs only).
inline constexpr int64_t kAttentionGemmSide = traces::kReplayAttentionGemmSide;

// The host's steady clock, in nanoseconds.
int64_t NowNs();

// Makes `index` the calling thread's current device. The runtime's current
// device is per thread, and the replay drives the device from several threads
// (device.h): every entry point that enqueues work binds first. Remembered
// per thread, so a thread already bound pays nothing; nothing else in the
// process changes a thread's device.
Status BindDevice(int index);

// Blocking-sync events: a host thread waiting on one sleeps instead of
// spinning a core (cudaEventSynchronize spins by default), which the replay's
// I/O threads need. Timing stays on (no cudaEventDisableTiming).
inline constexpr unsigned kEventFlags = cudaEventBlockingSync;

// A timing event taken on the device's idle clock stream (see
// exec/detail/event_clock.h): `host_ns` is its time on the host's steady
// clock, `taken_ns` the host clock when it was taken.
struct Anchor {
  cudaEvent_t event = nullptr;
  int64_t host_ns = 0;
  int64_t taken_ns = 0;
  Anchor() = default;
  Anchor(const Anchor&) = delete;
  Anchor& operator=(const Anchor&) = delete;
  ~Anchor() {
    if (event != nullptr) cudaEventDestroy(event);
  }
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(cudaEvent_t event) : event_(event) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  Status Synchronize() override;
  bool Query() override { return cudaEventQuery(event_) == cudaSuccess; }
  Result<int64_t> TimeNs() override;
  cudaEvent_t get() const { return event_; }
  // The anchor this event is timed from, set by each Record.
  void set_anchor(std::shared_ptr<const Anchor> anchor) {
    std::lock_guard<std::mutex> lock(mu_);
    anchor_ = std::move(anchor);
  }

 private:
  cudaEvent_t event_;
  std::mutex mu_;
  std::shared_ptr<const Anchor> anchor_;  // guarded by mu_
};

class CudaDevice final : public Device {
 public:
  CudaDevice(const DeviceOptions& options) : options_(options), ranges_(0, kAlignment) {}
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  Status Init();
  std::string Describe() const override;
  std::string_view kind() const override { return "cuda"; }

  Result<DeviceBuffer> Allocate(int64_t bytes) override;
  void Free(DeviceBuffer buffer) override;
  int64_t capacity_bytes() const override { return capacity_; }
  int64_t allocation_alignment() const override { return kAlignment; }
  int64_t workspace_output_region_bytes() const override { return detail::kOutputRegionBytes; }
  int64_t used_bytes() const override;
  int64_t peak_bytes() const override;
  void ResetPeak() override;
  Result<int64_t> ReserveWorkspace(const traces::Trace& trace) override;

  // The ops (cuda_ops.cc).
  Status RunOpAsync(const traces::Op& op, const OpBuffers& buffers) override;
  Status FillPatternAsync(DeviceBuffer buffer, uint64_t seed, Stream stream) override;
  Status CheckPattern(DeviceBuffer buffer, uint64_t seed, Stream stream) override;

  // Copies, events and streams (cuda_streams.cc).
  Status CopyToHostAsync(void* host_dst, DeviceBuffer src, int64_t offset, int64_t bytes,
                         Stream stream) override;
  Status CopyToDeviceAsync(DeviceBuffer dst, int64_t offset, const void* host_src, int64_t bytes,
                           Stream stream) override;
  Status RegisterHostMemory(void* ptr, int64_t bytes) override;
  Status UnregisterHostMemory(void* ptr) override;
  Result<std::unique_ptr<Event>> CreateEvent() override;
  Status Record(Event& event, Stream stream) override;
  Status Wait(Stream stream, Event& event) override;
  Status Synchronize(Stream stream) override;

 private:
  cudaStream_t get(Stream s) const {
    switch (s) {
      case Stream::kCompute:
        return compute_;
      case Stream::kDeviceToHost:
        return d2h_;
      case Stream::kHostToDevice:
        return h2d_;
      case Stream::kSend:
        return send_;
      case Stream::kReceive:
        break;
    }
    return receive_;
  }

  // Records a new anchor on the idle clock stream and waits for it (at once:
  // nothing else runs there); its host time chains from the previous anchor
  // (exec/detail/event_clock.h). Caller holds anchor_mu_.
  Status TakeAnchor();

  // The batch of kAttentionGemmSide-cubed GEMMs that stands in for an
  // attention op of op.flops.
  static int64_t AttentionBatch(const traces::Op& op) { return traces::ReplayAttentionBatch(op); }

  // An operand: the buffer itself when it holds `batch` matrices of `elems`
  // elements (stride `elems`), else the workspace at element `ws_offset`.
  struct Operand {
    uint8_t* ptr;
    long long stride;  // elements between the batch's matrices
    bool in_workspace;
  };
  Operand Pick(const std::span<const DeviceBuffer>& buffers, size_t i, int64_t elems, int64_t batch,
               int64_t elt, int64_t ws_offset, long long ws_stride) const;
  Status Gemm(int64_t m, int64_t n, int64_t k, int64_t batch, const OpBuffers& buffers);
  Status TouchRead(std::span<const DeviceBuffer> buffers, int64_t bytes);
  Status TouchWrite(std::span<const DeviceBuffer> buffers, int64_t bytes);

  DeviceOptions options_;
  std::string name_;
  int64_t capacity_ = 0;
  mutable std::mutex mu_;
  detail::RangeAllocator ranges_;  // guarded by mu_
  int64_t peak_ = 0;               // guarded by mu_
  uint8_t* base_ = nullptr;
  DeviceBuffer workspace_;
  unsigned long long* words_ = nullptr;  // layout: exec/detail/device_words.h
  // clock_ only ever holds anchors, so an anchor completes as soon as it is recorded.
  cudaStream_t compute_ = nullptr, d2h_ = nullptr, h2d_ = nullptr, send_ = nullptr,
               receive_ = nullptr, clock_ = nullptr;
  const CublasApi* cublas_ = nullptr;  // loaded by Init (exec/detail/cublas_api.h)
  cublasHandle_t blas_ = nullptr;
  std::mutex anchor_mu_;
  std::shared_ptr<const Anchor> anchor_;  // guarded by anchor_mu_
};

}  // namespace ssdtrain::exec::cuda_impl

#include "exec/cuda_device.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "exec/cuda_error.h"
#include "exec/detail/cuda_kernels.h"
#include "exec/detail/device_words.h"
#include "exec/detail/event_clock.h"
#include "exec/detail/format_bytes.h"
#include "exec/detail/gemm_workspace.h"
#include "exec/detail/range_allocator.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec {
namespace {

// cudaMalloc's own alignment; also what the uint4 kernels need.
constexpr int64_t kAlignment = 256;
// Left free when the capacity is "the GPU's free memory": cuBLAS workspaces
// and the context's own allocations live outside the arena.
constexpr int64_t kFreeMemoryMargin = int64_t{1} << 30;
// A capacity of "the GPU's free memory" is rounded down to whole GiB, so that
// a later device asking for the same capacity (the demo, from a calibrated
// config's memory_GiB) still fits when free memory has moved by a little.
constexpr int64_t kFreeMemoryGranule = int64_t{1} << 30;
// Side of the GEMM that stands in for a fused attention kernel (FLOPs only).
constexpr int64_t kAttentionGemmSide = traces::kReplayAttentionGemmSide;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Makes `index` the calling thread's current device. The runtime's current
// device is per thread, and the replay drives the device from several threads
// (device.h): every entry point that enqueues work binds first. Remembered
// per thread, so a thread already bound pays nothing; nothing else in the
// process changes a thread's device.
Status BindDevice(int index) {
  thread_local int bound = -1;
  if (bound == index) return Status::Ok();
  SSDTRAIN_CUDA_TRY(cudaSetDevice(index));
  bound = index;
  return Status::Ok();
}

// Blocking-sync events: a host thread waiting on one sleeps instead of
// spinning a core (cudaEventSynchronize spins by default), which the replay's
// I/O threads need. Timing stays on (no cudaEventDisableTiming).
constexpr unsigned kEventFlags = cudaEventBlockingSync;

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

  Status Synchronize() override {
    SSDTRAIN_CUDA_TRY(cudaEventSynchronize(event_));
    return Status::Ok();
  }
  bool Query() override { return cudaEventQuery(event_) == cudaSuccess; }
  Result<int64_t> TimeNs() override {
    std::shared_ptr<const Anchor> anchor;
    {
      std::lock_guard<std::mutex> lock(mu_);
      anchor = anchor_;
    }
    if (anchor == nullptr) return Status::FailedPrecondition("TimeNs of an event never recorded");
    float ms = 0;
    SSDTRAIN_CUDA_TRY(cudaEventElapsedTime(&ms, anchor->event, event_));
    return detail::EventHostNs(anchor->host_ns, ms);
  }
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

cudaDataType_t CudaType(traces::DType dtype) {
  switch (dtype) {
    case traces::DType::kBf16:
      return CUDA_R_16BF;
    case traces::DType::kFp32:
      return CUDA_R_32F;
    default:
      return CUDA_R_16F;
  }
}

class CudaDevice final : public Device {
 public:
  CudaDevice(const DeviceOptions& options) : options_(options), ranges_(0, kAlignment) {}
  ~CudaDevice() override {
    if (!BindDevice(options_.cuda_device_index).ok()) return;
    if (compute_ != nullptr) cudaDeviceSynchronize();
    if (blas_ != nullptr) cublasDestroy(blas_);
    anchor_.reset();
    for (cudaStream_t s : {compute_, d2h_, h2d_, clock_}) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
    if (words_ != nullptr) cudaFree(words_);
    if (base_ != nullptr) cudaFree(base_);
  }
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  Status Init() {
    int count = 0;
    SSDTRAIN_CUDA_TRY(cudaGetDeviceCount(&count));
    if (options_.cuda_device_index < 0 || options_.cuda_device_index >= count) {
      return Status::InvalidArgument("CUDA device index " +
                                     std::to_string(options_.cuda_device_index) +
                                     " does not exist: this machine has " + std::to_string(count) +
                                     " CUDA device(s), numbered from 0");
    }
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    cudaDeviceProp prop{};
    SSDTRAIN_CUDA_TRY(cudaGetDeviceProperties(&prop, options_.cuda_device_index));
    name_ = prop.name;
    size_t free_bytes = 0, total_bytes = 0;
    SSDTRAIN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
    const int64_t usable = static_cast<int64_t>(free_bytes) - kFreeMemoryMargin;
    capacity_ = options_.capacity_bytes > 0 ? options_.capacity_bytes
                                            : usable / kFreeMemoryGranule * kFreeMemoryGranule;
    if (capacity_ > usable || capacity_ <= 0) {
      return Status::ResourceExhausted("device memory of " + detail::FormatBytes(capacity_) +
                                       " asked for, but " + name_ + " has " +
                                       detail::FormatBytes(static_cast<int64_t>(free_bytes)) +
                                       " free (less a 1 GiB margin); lower --device-memory");
    }
    capacity_ = capacity_ / kAlignment * kAlignment;
    void* base = nullptr;
    SSDTRAIN_CUDA_TRY(cudaMalloc(&base, static_cast<size_t>(capacity_)));
    base_ = static_cast<uint8_t*>(base);
    ranges_ = detail::RangeAllocator(capacity_, kAlignment);
    SSDTRAIN_CUDA_TRY(
        cudaMalloc(reinterpret_cast<void**>(&words_), detail::kDeviceWords * sizeof(*words_)));
    for (cudaStream_t* s : {&compute_, &d2h_, &h2d_, &clock_}) {
      SSDTRAIN_CUDA_TRY(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
    }
    SSDTRAIN_CUDA_TRY(cublasCreate(&blas_));
    SSDTRAIN_CUDA_TRY(cublasSetStream(blas_, compute_));
    // fp32 GEMMs stay fp32 (no TF32): PyTorch's default for fp32 matmuls
    // (torch.backends.cuda.matmul.allow_tf32 = False), which the measured
    // times must match; fp16 and bf16 GEMMs use tensor cores either way.
    SSDTRAIN_CUDA_TRY(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    std::lock_guard<std::mutex> lock(anchor_mu_);
    return TakeAnchor();
  }

  std::string Describe() const override {
    return "cuda:" + std::to_string(options_.cuda_device_index) + " " + name_ + " (arena " +
           detail::FormatBytes(capacity_) + ", cuBLAS, host-bounce SSD path)";
  }
  std::string_view kind() const override { return "cuda"; }

  Result<DeviceBuffer> Allocate(int64_t bytes) override {
    if (bytes <= 0) {
      return Status::InvalidArgument("device allocation of " + std::to_string(bytes) + " bytes");
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<int64_t> offset = ranges_.Allocate(bytes);
    if (!offset) {
      return Status::ResourceExhausted(
          "GPU arena out of memory: allocating " + detail::FormatBytes(ranges_.Rounded(bytes)) +
          " with " + detail::FormatBytes(ranges_.used()) + " in use of a " +
          detail::FormatBytes(capacity_) + " capacity (largest free block " +
          detail::FormatBytes(ranges_.largest_free()) + ")");
    }
    peak_ = std::max(peak_, ranges_.used());
    return DeviceBuffer{base_ + *offset, bytes};
  }
  void Free(DeviceBuffer buffer) override {
    if (!buffer.valid()) return;
    std::lock_guard<std::mutex> lock(mu_);
    ranges_.Free(static_cast<uint8_t*>(buffer.ptr) - base_, buffer.bytes);
  }
  int64_t capacity_bytes() const override { return capacity_; }
  int64_t allocation_alignment() const override { return kAlignment; }
  int64_t workspace_output_region_bytes() const override { return detail::kOutputRegionBytes; }
  int64_t used_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return ranges_.used();
  }
  int64_t peak_bytes() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }
  void ResetPeak() override {
    std::lock_guard<std::mutex> lock(mu_);
    peak_ = ranges_.used();
  }

  Result<int64_t> ReserveWorkspace(const traces::Trace& trace) override {
    // The layout is exec/detail/gemm_workspace.h's; its size rule is the
    // trace's (traces/storage_plan.h), so predictions count it too.
    const int64_t bytes = traces::ReplayWorkspaceBytes(trace, detail::kOutputRegionBytes);
    if (bytes <= workspace_.bytes) return workspace_.bytes;
    SSDTRAIN_RETURN_IF_ERROR(Synchronize(Stream::kCompute));
    Free(workspace_);
    workspace_ = {};
    auto buffer = Allocate(bytes);
    if (!buffer.ok()) return buffer.status().WithPrefix("GEMM workspace");
    workspace_ = *buffer;
    SSDTRAIN_CUDA_TRY(cudaMemsetAsync(workspace_.ptr, 0, static_cast<size_t>(bytes), compute_));
    return workspace_.bytes;
  }

  Status RunOpAsync(const traces::Op& op, const OpBuffers& buffers) override {
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    if (buffers.inputs.size() != op.inputs.size() || buffers.outputs.size() != op.outputs.size()) {
      return Status::InvalidArgument("op " + std::to_string(op.id) + " (" + op.name +
                                     "): buffer count does not match its inputs and outputs");
    }
    if (op.gemm) {
      return Gemm(op.gemm->m, op.gemm->n, op.gemm->k, op.gemm->batch, buffers);
    }
    if (op.kind == traces::OpKind::kAttention && op.flops > 0) {
      const int64_t s = kAttentionGemmSide;
      SSDTRAIN_RETURN_IF_ERROR(TouchRead(buffers.inputs, op.bytes_read));
      OpBuffers none{{}, {}, buffers.dtype};
      SSDTRAIN_RETURN_IF_ERROR(Gemm(s, s, s, AttentionBatch(op), none));
      return TouchWrite(buffers.outputs, op.bytes_written);
    }
    SSDTRAIN_RETURN_IF_ERROR(TouchRead(buffers.inputs, op.bytes_read));
    return TouchWrite(buffers.outputs, op.bytes_written);
  }

  Status FillPatternAsync(DeviceBuffer buffer, uint64_t seed, Stream stream) override {
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    SSDTRAIN_CUDA_TRY(detail::LaunchFillPattern(buffer.ptr, buffer.bytes, seed, get(stream)));
    return Status::Ok();
  }
  Status CheckPattern(DeviceBuffer buffer, uint64_t seed, Stream stream) override {
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    const unsigned long long none = static_cast<unsigned long long>(buffer.bytes);
    cudaStream_t s = get(stream);
    // This stream's own word: checks on other streams may run at the same time.
    unsigned long long* word = words_ + detail::MismatchWord(stream);
    SSDTRAIN_CUDA_TRY(cudaMemcpyAsync(word, &none, sizeof(none), cudaMemcpyHostToDevice, s));
    SSDTRAIN_CUDA_TRY(detail::LaunchCheckPattern(buffer.ptr, buffer.bytes, seed, word, s));
    unsigned long long first = 0;
    SSDTRAIN_CUDA_TRY(cudaMemcpyAsync(&first, word, sizeof(first), cudaMemcpyDeviceToHost, s));
    SSDTRAIN_CUDA_TRY(cudaStreamSynchronize(s));
    if (first != none) {
      return Status::Corruption("pattern mismatch at byte " + std::to_string(first) + " of " +
                                std::to_string(buffer.bytes) + " (seed " + std::to_string(seed) +
                                ")");
    }
    return Status::Ok();
  }

  Status CopyToHostAsync(void* host_dst, DeviceBuffer src, int64_t offset, int64_t bytes) override {
    if (offset < 0 || bytes < 0 || offset + bytes > src.bytes) {
      return Status::InvalidArgument("device-to-host copy outside its device buffer");
    }
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    SSDTRAIN_CUDA_TRY(cudaMemcpyAsync(host_dst, static_cast<const uint8_t*>(src.ptr) + offset,
                                      static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, d2h_));
    return Status::Ok();
  }
  Status CopyToDeviceAsync(DeviceBuffer dst, int64_t offset, const void* host_src,
                           int64_t bytes) override {
    if (offset < 0 || bytes < 0 || offset + bytes > dst.bytes) {
      return Status::InvalidArgument("host-to-device copy outside its device buffer");
    }
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    SSDTRAIN_CUDA_TRY(cudaMemcpyAsync(static_cast<uint8_t*>(dst.ptr) + offset, host_src,
                                      static_cast<size_t>(bytes), cudaMemcpyHostToDevice, h2d_));
    return Status::Ok();
  }
  Status RegisterHostMemory(void* ptr, int64_t bytes) override {
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    SSDTRAIN_CUDA_TRY(cudaHostRegister(ptr, static_cast<size_t>(bytes), cudaHostRegisterDefault));
    return Status::Ok();
  }
  Status UnregisterHostMemory(void* ptr) override {
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    SSDTRAIN_CUDA_TRY(cudaHostUnregister(ptr));
    return Status::Ok();
  }

  Result<std::unique_ptr<Event>> CreateEvent() override {
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    cudaEvent_t e = nullptr;
    SSDTRAIN_CUDA_TRY(cudaEventCreateWithFlags(&e, kEventFlags));
    return std::unique_ptr<Event>(std::make_unique<CudaEvent>(e));
  }
  Status Record(Event& event, Stream stream) override {
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    CudaEvent& e = static_cast<CudaEvent&>(event);
    std::shared_ptr<const Anchor> anchor;
    {
      std::lock_guard<std::mutex> lock(anchor_mu_);
      if (detail::AnchorIsStale(anchor_->taken_ns, NowNs())) SSDTRAIN_RETURN_IF_ERROR(TakeAnchor());
      anchor = anchor_;
    }
    // The anchor has completed, so the event completes after it.
    e.set_anchor(std::move(anchor));
    SSDTRAIN_CUDA_TRY(cudaEventRecord(e.get(), get(stream)));
    return Status::Ok();
  }
  Status Wait(Stream stream, Event& event) override {
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    SSDTRAIN_CUDA_TRY(cudaStreamWaitEvent(get(stream), static_cast<CudaEvent&>(event).get(), 0));
    return Status::Ok();
  }
  Status Synchronize(Stream stream) override {
    SSDTRAIN_RETURN_IF_ERROR(BindDevice(options_.cuda_device_index));
    SSDTRAIN_CUDA_TRY(cudaStreamSynchronize(get(stream)));
    return Status::Ok();
  }

 private:
  cudaStream_t get(Stream s) const {
    return s == Stream::kCompute ? compute_ : s == Stream::kDeviceToHost ? d2h_ : h2d_;
  }

  // Records a new anchor on the idle clock stream and waits for it (at once:
  // nothing else runs there); its host time chains from the previous anchor
  // (exec/detail/event_clock.h). Caller holds anchor_mu_.
  Status TakeAnchor() {
    auto next = std::make_shared<Anchor>();
    SSDTRAIN_CUDA_TRY(cudaEventCreateWithFlags(&next->event, kEventFlags));
    SSDTRAIN_CUDA_TRY(cudaEventRecord(next->event, clock_));
    SSDTRAIN_CUDA_TRY(cudaEventSynchronize(next->event));
    next->taken_ns = NowNs();
    next->host_ns = next->taken_ns;
    if (anchor_ != nullptr) {
      float ms = 0;
      SSDTRAIN_CUDA_TRY(cudaEventElapsedTime(&ms, anchor_->event, next->event));
      next->host_ns =
          detail::NextAnchorHostNs(anchor_->host_ns, anchor_->taken_ns, next->taken_ns, ms);
    }
    anchor_ = std::move(next);
    return Status::Ok();
  }

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
               int64_t elt, int64_t ws_offset, long long ws_stride) const {
    if (i < buffers.size() && buffers[i].bytes >= elems * batch * elt) {
      return {static_cast<uint8_t*>(buffers[i].ptr), static_cast<long long>(elems), false};
    }
    return {static_cast<uint8_t*>(workspace_.ptr) + ws_offset * elt, ws_stride, true};
  }

  Status Gemm(int64_t m, int64_t n, int64_t k, int64_t batch, const OpBuffers& buffers) {
    if (detail::WorkspaceBytes(m, n, k, batch) > workspace_.bytes) {
      return Status::FailedPrecondition("GEMM needs a larger workspace: call ReserveWorkspace");
    }
    const cudaDataType_t type = CudaType(buffers.dtype);
    const int64_t elt = traces::DTypeSize(buffers.dtype == traces::DType::kBf16 ||
                                                  buffers.dtype == traces::DType::kFp32
                                              ? buffers.dtype
                                              : traces::DType::kFp16);
    // A and B in the workspace are shared by the batch (stride 0, read only);
    // C there has a real stride over OutputChunk matrices and a larger batch
    // runs in several calls (exec/detail/gemm_workspace.h).
    const Operand a = Pick(buffers.inputs, 0, m * k, batch, elt, detail::WorkspaceAOffset(), 0);
    const Operand b = Pick(buffers.inputs, 1, k * n, batch, elt, detail::WorkspaceBOffset(m, k), 0);
    const Operand c = Pick(buffers.outputs, 0, m * n, batch, elt, detail::WorkspaceCOffset(m, n, k),
                           static_cast<long long>(m * n));
    const bool c_in_workspace = c.in_workspace;
    const int64_t chunk = c_in_workspace ? detail::OutputChunk(m, n, batch) : batch;
    const float alpha = 1.0f, beta = 0.0f;
    for (int64_t done = 0; done < batch; done += chunk) {
      const int64_t count = std::min(chunk, batch - done);
      // Past the first call, operands with a real stride move on by `done`
      // matrices; C in the workspace starts over (stream order keeps the
      // calls' writes apart).
      const int64_t c_done = c_in_workspace ? 0 : done;
      SSDTRAIN_CUDA_TRY(cublasGemmStridedBatchedEx(
          blas_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
          static_cast<int>(k), &alpha, a.ptr + done * a.stride * elt, type, static_cast<int>(m),
          a.stride, b.ptr + done * b.stride * elt, type, static_cast<int>(k), b.stride, &beta,
          c.ptr + c_done * c.stride * elt, type, static_cast<int>(m), c.stride,
          static_cast<int>(count), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    if (c_in_workspace && !buffers.outputs.empty()) {
      // C went to the workspace: the outputs are still written, as the op would.
      int64_t out_bytes = 0;
      for (const DeviceBuffer& o : buffers.outputs) out_bytes += o.bytes;
      return TouchWrite(buffers.outputs, out_bytes);
    }
    return Status::Ok();
  }

  Status TouchRead(std::span<const DeviceBuffer> buffers, int64_t bytes) {
    int64_t total = 0;
    for (const DeviceBuffer& b : buffers) total += b.bytes;
    while (total > 0 && bytes > 0) {
      for (const DeviceBuffer& b : buffers) {
        const int64_t n = std::min(bytes, b.bytes);
        SSDTRAIN_CUDA_TRY(
            detail::LaunchTouchRead(b.ptr, n, words_ + detail::kReadSinkWord, compute_));
        bytes -= n;
        if (bytes <= 0) break;
      }
    }
    return Status::Ok();
  }
  Status TouchWrite(std::span<const DeviceBuffer> buffers, int64_t bytes) {
    int64_t total = 0;
    for (const DeviceBuffer& b : buffers) total += b.bytes;
    while (total > 0 && bytes > 0) {
      for (const DeviceBuffer& b : buffers) {
        const int64_t n = std::min(bytes, b.bytes);
        SSDTRAIN_CUDA_TRY(cudaMemsetAsync(b.ptr, 0x5a, static_cast<size_t>(n), compute_));
        bytes -= n;
        if (bytes <= 0) break;
      }
    }
    return Status::Ok();
  }

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
  cudaStream_t compute_ = nullptr, d2h_ = nullptr, h2d_ = nullptr, clock_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::mutex anchor_mu_;
  std::shared_ptr<const Anchor> anchor_;  // guarded by anchor_mu_
};

}  // namespace

bool CudaAvailable(std::string* why_not) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it
    if (why_not != nullptr)
      *why_not = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    return false;
  }
  if (count == 0) {
    if (why_not != nullptr) *why_not = "no CUDA device";
    return false;
  }
  return true;
}

Result<std::unique_ptr<Device>> MakeCudaDevice(const DeviceOptions& options) {
  std::string why_not;
  if (!CudaAvailable(&why_not)) return Status::Unavailable("no usable GPU: " + why_not);
  auto device = std::make_unique<CudaDevice>(options);
  SSDTRAIN_RETURN_IF_ERROR(device->Init());
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace ssdtrain::exec

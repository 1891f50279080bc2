// The device interface: memory with a capacity limit, an in-order compute
// stream that runs a trace's ops at their real shapes, copy streams (the
// offload's device-to-host and host-to-device, the pipeline's send and
// receive), and events for every cross-stream dependency.
// Two implementations: CpuDevice (exec/cpu_device.h, runs anywhere) and
// CudaDevice (exec/cuda_device.h, built with CUDA, used when a GPU is present).
// One conformance suite (exec/tests/device_conformance_test.cc) runs against both.
//
// Model (CUDA's): work enqueued on one stream runs in order; work on different
// streams runs concurrently unless ordered with Record/Wait on an Event. Every
// *Async call returns once the work is enqueued. A failure inside enqueued work
// is reported by the next Synchronize or Event::Synchronize of that stream
// (CUDA's sticky error), never dropped.
//
// Thread-safety: each stream is driven by one host thread at a time;
// different streams may be driven from different threads (the replay issues
// compute, D2H, send and receive work from its issue thread and H2D copies
// from its read thread). Allocate/Free, used_bytes and peak_bytes may be called from any
// thread. Events may be recorded, waited on and queried from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::exec {

// kDeviceToHost and kHostToDevice carry the offload's copies (evictions and
// prefetches); kSend and kReceive the pipeline's messages between stages
// (exec/replay_pipeline.cc), so that a message's copy waits for its own
// dependencies (events), not behind the offload copies queued before it.
enum class Stream { kCompute, kDeviceToHost, kHostToDevice, kSend, kReceive };
std::string_view ToString(Stream s);  // compute, d2h, h2d, send, recv
// Every stream, in SynchronizeAll's order.
inline constexpr Stream kAllStreams[] = {Stream::kCompute, Stream::kDeviceToHost,
                                         Stream::kHostToDevice, Stream::kSend, Stream::kReceive};

// A device allocation. Owned by whoever allocated it; released with Device::Free.
struct DeviceBuffer {
  void* ptr = nullptr;  // a device address (CUDA) or an arena address (CPU)
  int64_t bytes = 0;
  bool valid() const { return ptr != nullptr; }
};

// A marker in a stream. Created by Device::CreateEvent, recorded with
// Device::Record; completes when all work enqueued on that stream before it has
// finished. Owned by the caller; must outlive any Wait that references it.
class Event {
 public:
  virtual ~Event() = default;
  // Blocks the calling host thread until the event completes; returns the
  // stream's error if work before it failed. An event never recorded is complete.
  virtual Status Synchronize() = 0;
  // True when complete (no blocking).
  virtual bool Query() = 0;
  // The completion time on the host's steady clock
  // (std::chrono::steady_clock, ns since its epoch), so that device times and
  // host-side I/O times share one axis. Valid after Synchronize returned OK.
  virtual Result<int64_t> TimeNs() = 0;
};

// The buffers an op runs on: one per trace input and output, in the op's order.
// A buffer may be smaller than the trace's tensor when it is a view of another;
// kernels never touch bytes past DeviceBuffer::bytes.
struct OpBuffers {
  std::span<const DeviceBuffer> inputs;
  std::span<const DeviceBuffer> outputs;
  // The element type GEMMs run in: the dtype of the op's first output.
  traces::DType dtype = traces::DType::kFp16;
};

class Device {
 public:
  virtual ~Device() = default;

  // "cpu (arena 2.0 GiB, 1 Eigen thread)" or "cuda:0 NVIDIA H200 (...)".
  virtual std::string Describe() const = 0;
  virtual std::string_view kind() const = 0;  // "cpu" or "cuda"
  // CPUs that host-side helper threads (I/O, staging) should run on so that
  // they stay off the device's own cores; empty: no preference (a GPU).
  virtual std::vector<int> helper_cpus() const { return {}; }

  // Memory. Allocate fails with ResourceExhausted (naming the request, what is
  // in use and the capacity) when the capacity would be exceeded, as a GPU's
  // allocator would. Free(invalid buffer) is a no-op. Free does not wait for
  // enqueued work: free a buffer only after an event recorded after its last
  // use has completed.
  virtual Result<DeviceBuffer> Allocate(int64_t bytes) = 0;
  virtual void Free(DeviceBuffer buffer) = 0;
  virtual int64_t capacity_bytes() const = 0;
  // Every allocation is rounded up to this (traces::DeviceBytes counts the same).
  virtual int64_t allocation_alignment() const = 0;
  // The GEMM workspace's output region (traces::ReplayWorkspaceBytes): the
  // CPU backend runs a batch one matrix at a time (0), CUDA in chunks.
  virtual int64_t workspace_output_region_bytes() const = 0;
  virtual int64_t used_bytes() const = 0;
  virtual int64_t peak_bytes() const = 0;
  virtual void ResetPeak() = 0;

  // Compute stream. Runs `op` at its real shape: a GEMM of Op::gemm's dims, or
  // a memory-bound pass over the op's bytes_read / bytes_written (see each
  // backend's header for what each kind runs). Reserves any workspace it needs
  // beforehand with ReserveWorkspace; fails InvalidArgument when the buffers do
  // not match the op's inputs/outputs.
  virtual Status RunOpAsync(const traces::Op& op, const OpBuffers& buffers) = 0;
  // Allocates the compute workspace (GEMM operands) for the largest op in
  // `trace` up front, inside the capacity, so that running out shows before the
  // step starts. Returns the bytes reserved.
  virtual Result<int64_t> ReserveWorkspace(const traces::Trace& trace) = 0;

  // Verification patterns: fills `buffer` with a deterministic pattern seeded
  // by `seed` (on `stream`), and compares it (blocking; the stream is
  // synchronized first). CheckPattern returns Corruption naming the first
  // mismatching byte offset.
  virtual Status FillPatternAsync(DeviceBuffer buffer, uint64_t seed, Stream stream) = 0;
  virtual Status CheckPattern(DeviceBuffer buffer, uint64_t seed, Stream stream) = 0;

  // Copies between device memory and host memory, enqueued on `stream` (any
  // stream; the offload uses kDeviceToHost and kHostToDevice, the pipeline
  // kSend and kReceive). The host memory must stay valid until the copy
  // completes (an event recorded after it). For full speed on CUDA, host
  // memory should be registered with RegisterHostMemory first.
  virtual Status CopyToHostAsync(void* host_dst, DeviceBuffer src, int64_t offset, int64_t bytes,
                                 Stream stream) = 0;
  virtual Status CopyToDeviceAsync(DeviceBuffer dst, int64_t offset, const void* host_src,
                                   int64_t bytes, Stream stream) = 0;
  // Pins host memory (cudaHostRegister) for fast copies; a no-op on CPU.
  // Unregister before freeing the memory.
  virtual Status RegisterHostMemory(void* ptr, int64_t bytes) = 0;
  virtual Status UnregisterHostMemory(void* ptr) = 0;

  // Events.
  virtual Result<std::unique_ptr<Event>> CreateEvent() = 0;
  // Marks the current end of `stream` with `event` (re-recording resets it).
  virtual Status Record(Event& event, Stream stream) = 0;
  // Work enqueued on `stream` after this call waits for `event`.
  virtual Status Wait(Stream stream, Event& event) = 0;
  // Blocks until everything enqueued on `stream` has finished; returns its error.
  virtual Status Synchronize(Stream stream) = 0;
  // Synchronizes every stream, also those after one that fails (callers free
  // buffers next, and the other streams' work may still be using them), and
  // returns the first error, in kAllStreams' order.
  Status SynchronizeAll() {
    Status first = Status::Ok();
    for (Stream s : kAllStreams) {
      Status st = Synchronize(s);
      if (first.ok()) first = std::move(st);
    }
    return first;
  }
};

// The backend `--backend` names.
enum class BackendChoice { kAuto, kCpu, kCuda };

struct DeviceOptions {
  // Device memory capacity in bytes: the CPU arena's limit; on CUDA a limit
  // below the GPU's free memory (0: the GPU's free memory at start less a
  // 1 GiB margin, rounded down to whole GiB).
  int64_t capacity_bytes = int64_t{4} << 30;
  // Eigen threads for CPU GEMMs. Default 1: the copy and I/O threads need the
  // other core of a small machine to overlap with compute.
  int cpu_compute_threads = 1;
  // Pin the CPU backend's compute stream to the first `cpu_compute_threads`
  // allowed CPUs and its copy streams to the rest (when there is a rest), as a
  // GPU's copy engines are not its SMs. See exec/detail/cpu_affinity.h.
  bool cpu_pin_threads = true;
  // The GPU the CUDA backend runs on, in CUDA's order (CUDA_VISIBLE_DEVICES
  // applies); every host thread that drives the device uses it. Default 0.
  int cuda_device_index = 0;
};

// True when this build has the CUDA backend and a usable GPU. `why_not`
// receives the reason when not (e.g. "CUDA driver version is insufficient").
bool CudaAvailable(std::string* why_not);

// Makes the device `choice` names. kAuto picks CUDA when a GPU is usable, else
// the CPU; `picked` receives a one-line reason ("cuda: NVIDIA H200" or "cpu: no
// GPU (CUDA driver version is insufficient ...)"). kCuda without a usable GPU
// fails with Unavailable.
Result<std::unique_ptr<Device>> MakeDevice(BackendChoice choice, const DeviceOptions& options,
                                           std::string* picked);

// Deterministic verification pattern: byte i of a tensor seeded by `seed`.
// Shared by both backends so a pattern written on one can be checked on the
// other (and on the host, after a read from disk).
// Word w of the pattern (bytes 8w..8w+7, little-endian), from SplitMix64.
inline uint64_t PatternWord(uint64_t seed, uint64_t w) {
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ULL + w * 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 29;
  return x;
}
inline uint8_t PatternByte(uint64_t seed, uint64_t i) {
  return static_cast<uint8_t>(PatternWord(seed, i >> 3) >> ((i & 7) * 8));
}

}  // namespace ssdtrain::exec

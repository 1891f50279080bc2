// The CPU backend: a faithful scaled-down analogue of a GPU, runnable anywhere.
//
// - Device memory is an arena: one reserved region of `capacity_bytes` of host
//   memory (committed as touched), sub-allocated first-fit in 64-byte units. An
//   allocation that does not fit fails with ResourceExhausted, as cudaMalloc
//   would. Current and peak bytes are tracked (workspace included).
// - Compute runs on its own thread (the compute stream). GEMM ops run their real
//   shape (m, n, k, batch) with Eigen in fp32 for every trace dtype (a CPU has no
//   fast fp16 GEMM; the FLOP count is the trace's, the element width is not),
//   on operands in a workspace reserved inside the arena; the result is then
//   written over the op's outputs. Attention ops without GEMM dims run an fp32
//   GEMM of the same FLOP count. Every other kind (elementwise, norm, softmax,
//   dropout, embedding, loss, optimizer, collective, send/recv) is a
//   memory-bound pass that reads bytes_read from the inputs and writes
//   bytes_written to the outputs (cycling over the buffers when the op's count
//   exceeds them). Collectives and send/recv have no peer here: only their
//   memory traffic is run. Across ranks (exec/step_sync.h) the replay runs
//   them for real instead, through host memory (exec/replay_pipeline.cc,
//   exec/replay_tensor_parallel.cc).
// - "PCIe" is memcpy between the arena and host (staging) memory, on one
//   thread per copy stream: device-to-host, host-to-device, send, receive.
// - Eigen runs on `cpu_compute_threads` threads (default 1, so that the copy and
//   I/O threads keep the other core of a 2-core machine); more threads split
//   each GEMM's columns.
// - With `cpu_pin_threads` and more CPUs than compute threads, the compute
//   stream runs on the first allowed CPUs and the copy streams on the rest;
//   helper_cpus() names the rest, for the replay's I/O threads.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "exec/detail/cpu_affinity.h"
#include "exec/detail/range_allocator.h"
#include "exec/detail/stream_worker.h"
#include "exec/device.h"

namespace ssdtrain::exec {

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const DeviceOptions& options);
  ~CpuDevice() override;
  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

  std::string Describe() const override;
  std::string_view kind() const override { return "cpu"; }
  std::vector<int> helper_cpus() const override { return cores_.helpers; }

  Result<DeviceBuffer> Allocate(int64_t bytes) override;
  void Free(DeviceBuffer buffer) override;
  int64_t capacity_bytes() const override { return capacity_; }
  int64_t allocation_alignment() const override;
  int64_t workspace_output_region_bytes() const override { return 0; }
  int64_t used_bytes() const override { return used_.load(); }
  int64_t peak_bytes() const override { return peak_.load(); }
  void ResetPeak() override { peak_.store(used_.load()); }

  Status RunOpAsync(const traces::Op& op, const OpBuffers& buffers) override;
  Result<int64_t> ReserveWorkspace(const traces::Trace& trace) override;

  Status FillPatternAsync(DeviceBuffer buffer, uint64_t seed, Stream stream) override;
  Status CheckPattern(DeviceBuffer buffer, uint64_t seed, Stream stream) override;

  Status CopyToHostAsync(void* host_dst, DeviceBuffer src, int64_t offset, int64_t bytes,
                         Stream stream) override;
  Status CopyToDeviceAsync(DeviceBuffer dst, int64_t offset, const void* host_src, int64_t bytes,
                           Stream stream) override;
  Status RegisterHostMemory(void*, int64_t) override { return Status::Ok(); }
  Status UnregisterHostMemory(void*) override { return Status::Ok(); }

  Result<std::unique_ptr<Event>> CreateEvent() override;
  Status Record(Event& event, Stream stream) override;
  Status Wait(Stream stream, Event& event) override;
  Status Synchronize(Stream stream) override;

 private:
  struct Workspace {
    DeviceBuffer buffer;
    int64_t floats = 0;  // fp32 elements available for A, B and C together
  };
  detail::StreamWorker& worker(Stream stream);
  Status RunGemm(int64_t m, int64_t n, int64_t k, int64_t batch, int64_t bytes_read,
                 const OpBuffers& buffers);

  const int64_t capacity_;
  const int compute_threads_;
  detail::CoreSplit cores_;  // empty when the threads are not pinned
  std::string pin_note_;     // for Describe()
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> peak_{0};
  std::mutex alloc_mu_;
  detail::RangeAllocator ranges_;  // guarded by alloc_mu_
  uint8_t* base_ = nullptr;        // the reserved arena
  std::string base_error_;         // why base_ is null
  Workspace workspace_;
  // Declared last: joined first on destruction, while the state above lives.
  std::unique_ptr<detail::StreamWorker> compute_, d2h_, h2d_, send_, receive_;
};

}  // namespace ssdtrain::exec

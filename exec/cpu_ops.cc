// The CPU backend's compute (exec/cpu_device.h): GEMMs on Eigen in a
// workspace sized by the trace's rule, and memory-bound ops that stream their
// bytes through the real buffers.
#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "exec/cpu_device.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec {
namespace {

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

}  // namespace

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

}  // namespace ssdtrain::exec

// Calibrate's copy bandwidth, each way, at the sizes a step copies.
#include "exec/detail/calibrate_copies.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <vector>

#include "exec/calibrate.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using Clock = detail::CalibrationClock;
using detail::ElapsedNs;
using detail::Median;

constexpr int64_t kCopyBytes = int64_t{64} << 20;    // the copy timed without traces
constexpr size_t kCopySizes = 8;                     // distinct copy sizes timed at most
constexpr int64_t kBatchBytes = int64_t{256} << 20;  // one timed batch of copies, at most

}  // namespace

std::vector<CopySize> CopySizes(const std::vector<traces::Trace>& traces) {
  std::map<int64_t, int64_t> count;  // storage bytes -> storages
  for (const traces::Trace& trace : traces) {
    for (traces::TensorId id : traces::OffloadCandidates(trace))
      ++count[trace.tensor(trace.StorageOf(id)).bytes];
    if (!count.empty()) break;
  }
  if (count.empty()) return {CopySize{kCopyBytes, 1}};
  std::vector<CopySize> sizes;
  for (const auto& [bytes, n] : count) sizes.push_back(CopySize{bytes, n});
  std::stable_sort(sizes.begin(), sizes.end(), [](const CopySize& a, const CopySize& b) {
    return a.bytes * a.count > b.bytes * b.count;
  });
  if (sizes.size() > kCopySizes) sizes.resize(kCopySizes);
  return sizes;
}

namespace detail {

Status MeasureCopies(Device& device, const CalibrationOptions& o, Calibration* out) {
  const std::vector<CopySize> sizes = CopySizes(o.traces);
  int64_t largest = 0;
  for (const CopySize& c : sizes) largest = std::max(largest, c.bytes);
  const int64_t capacity = (largest + 4095) / 4096 * 4096;
  Result<DeviceBuffer> buf = device.Allocate(capacity);
  if (!buf.ok()) return buf.status().WithPrefix("copy benchmark");
  void* host = std::aligned_alloc(4096, static_cast<size_t>(capacity));
  if (host == nullptr) {
    device.Free(*buf);
    return Status::ResourceExhausted("copy benchmark: cannot allocate " + std::to_string(capacity) +
                                     " bytes of host memory");
  }
  std::fill_n(static_cast<char*>(host), capacity, 1);
  Status status = device.RegisterHostMemory(host, capacity);
  const bool registered = status.ok();
  // One batch: every size as many times as a step copies it (fewer, in
  // proportion, past kBatchBytes), queued back to back as a replay's copy
  // stream runs them, then one synchronize.
  int64_t step_bytes = 0;
  for (const CopySize& c : sizes) step_bytes += c.bytes * c.count;
  const double scale =
      std::min(1.0, static_cast<double>(kBatchBytes) / static_cast<double>(step_bytes));
  std::vector<CopySize> batch;
  int64_t batch_bytes = 0;
  for (const CopySize& c : sizes) {
    const int64_t n = std::max<int64_t>(1, std::llround(static_cast<double>(c.count) * scale));
    batch.push_back(CopySize{c.bytes, n});
    batch_bytes += c.bytes * n;
  }
  auto run = [&](bool to_host) {
    const auto start = Clock::now();
    for (const CopySize& c : batch) {
      for (int64_t i = 0; i < c.count && status.ok(); ++i) {
        status = to_host ? device.CopyToHostAsync(host, *buf, 0, c.bytes, Stream::kDeviceToHost)
                         : device.CopyToDeviceAsync(*buf, 0, host, c.bytes, Stream::kHostToDevice);
      }
    }
    if (status.ok())
      status = device.Synchronize(to_host ? Stream::kDeviceToHost : Stream::kHostToDevice);
    return ElapsedNs(start);
  };
  std::vector<int64_t> d2h, h2d;
  for (int r = 0; r <= o.repeats && status.ok(); ++r) {
    const int64_t d = run(true);
    const int64_t h = status.ok() ? run(false) : 0;
    if (r > 0) {  // r == 0 warms up
      d2h.push_back(std::max<int64_t>(1, d));
      h2d.push_back(std::max<int64_t>(1, h));
    }
  }
  if (registered) {
    const Status unregistered = device.UnregisterHostMemory(host);
    if (status.ok()) status = unregistered;
  }
  std::free(host);
  device.Free(*buf);
  if (!status.ok()) return status.WithPrefix("copy benchmark");
  out->d2h_GBps = static_cast<double>(batch_bytes) / static_cast<double>(Median(d2h));
  out->h2d_GBps = static_cast<double>(batch_bytes) / static_cast<double>(Median(h2d));
  return Status::Ok();
}

}  // namespace detail
}  // namespace ssdtrain::exec

// Calibrate's SSD bandwidth and latency (exec/detail/calibrate_ssd.h).
#include "exec/detail/calibrate_ssd.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "exec/bench_io.h"
#include "exec/detail/calibrate_copies.h"
#include "exec/offload_engine.h"

namespace ssdtrain::exec::detail {
namespace {

using Clock = CalibrationClock;

constexpr int64_t kLatencyBytes = 4096;  // one O_DIRECT block
constexpr int kLatencyProbes = 7;

}  // namespace

Status MeasureSsd(const CalibrationOptions& o, Calibration* out) {
  auto bench = [&o](const std::vector<std::string>& dirs) {
    BenchIoOptions b;
    b.dirs = dirs;
    b.block_size = o.block_size;
    b.queue_depth = o.queue_depth;
    b.size = o.io_bytes;
    b.allow_buffered_io = o.allow_buffered_io;
    return RunBenchIo(b);
  };
  if (o.dirs.size() > 1) {
    for (const std::string& dir : o.dirs) {
      Result<BenchIoResult> alone = bench({dir});
      if (!alone.ok()) return alone.status().WithPrefix("SSD bandwidth of " + dir);
      out->ssd_dirs.push_back({dir, alone->write_GBps(), alone->read_GBps()});
    }
  }
  Result<BenchIoResult> r = bench(o.dirs);
  if (!r.ok()) return r.status().WithPrefix("SSD bandwidth");
  out->io_backend = r->backend;
  out->direct_io = r->direct_io;
  out->ssd_write_GBps = r->write_GBps();
  out->ssd_read_GBps = r->read_GBps();

  OffloadOptions eo;
  eo.dirs = {o.dirs.front()};
  eo.block_size = o.block_size;
  eo.queue_depth = o.queue_depth;
  eo.staging_bytes = kLatencyBytes;
  eo.allow_buffered_io = o.allow_buffered_io;
  eo.warn = [](std::string_view) {};  // bench-io above already warned about fallbacks
  Result<std::unique_ptr<OffloadEngine>> engine = OffloadEngine::Create(eo);
  if (!engine.ok()) return engine.status().WithPrefix("SSD latency");
  void* block = std::aligned_alloc(4096, kLatencyBytes);
  if (block == nullptr) {
    return Status::ResourceExhausted("SSD latency: cannot allocate " +
                                     std::to_string(kLatencyBytes) + " bytes of host memory");
  }
  std::fill_n(static_cast<char*>(block), kLatencyBytes, 7);
  std::vector<int64_t> writes, reads;
  Status status = Status::Ok();
  for (int i = 0; i < kLatencyProbes && status.ok(); ++i) {
    TensorKey key{i, "", 0, 0};
    auto start = Clock::now();
    status = (*engine)->Write(key, block, kLatencyBytes);
    writes.push_back(ElapsedNs(start));
    if (!status.ok()) break;
    start = Clock::now();
    status = (*engine)->Read(key, block, kLatencyBytes);
    reads.push_back(ElapsedNs(start));
    if (status.ok()) status = (*engine)->Remove(i);
  }
  std::free(block);
  if (!status.ok()) return status.WithPrefix("SSD latency");
  out->ssd_write_latency_us = static_cast<double>(Median(writes)) / 1e3;
  out->ssd_read_latency_us = static_cast<double>(Median(reads)) / 1e3;
  return Status::Ok();
}

}  // namespace ssdtrain::exec::detail

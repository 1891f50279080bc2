// Calibration: measures the machine the executor runs on — GEMM throughput over
// a range of shapes, memory-bound op bandwidth, copy bandwidth each way between
// device memory and staging buffers (at the sizes of the first trace's offload
// candidates, else one 64 MiB copy), the SSD path's bandwidth and latency
// through the offload engine — and, for given traces, every op's time at its
// real shape. `ssdtrain calibrate` turns the result into a hardware config the
// simulator reads (exec never includes sim: the app joins the two).
//
// Thread-safety: one call at a time; it owns the device it creates.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "exec/device.h"
#include "exec/io_backend.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::exec {

struct CalibrationOptions {
  // Offload directories for the SSD measurements, one per drive (each must
  // exist): with several, each is measured alone and then all together, each
  // request to the next directory (bench-io's several directories).
  std::vector<std::string> dirs;
  BackendChoice backend = BackendChoice::kAuto;
  // device.capacity_bytes 0 (the default here): on CUDA the GPU's free memory
  // (less the backend's margin), so that the config's memory_GiB is the GPU's;
  // on the CPU kDefaultCpuArenaBytes.
  DeviceOptions device = [] {
    DeviceOptions d;
    d.capacity_bytes = 0;
    return d;
  }();
  int64_t block_size = int64_t{4} << 20;  // engine request size, bytes (what replay uses)
  int queue_depth = 32;                   // engine requests in flight
  int64_t io_bytes = int64_t{512} << 20;  // bytes written then read for the bandwidth figure
  int repeats = 3;                        // timed runs per measurement; the median is kept
  // Where `dir` refuses O_DIRECT: false: an error naming it; true: the SSD
  // figures are the page cache's (Calibration::direct_io says false).
  bool allow_buffered_io = false;
  // Traces whose ops are timed one by one at their real shapes (keep-everything
  // replay, one warm-up step); empty: none.
  std::vector<traces::Trace> traces;
  std::function<void(const std::string&)> progress;  // one line per stage; nullptr: silent
  // Called before each measurement (the GEMMs, the memory passes, the copies,
  // the SSD path, each trace's ops), the same number of times on every rank
  // that calibrates with the same options: `mpirun -np N ssdtrain calibrate`
  // waits for every rank there, so that the ranks measure the same thing at
  // the same time and share this machine as their replay will. An error stops
  // the calibration with it. nullptr: none.
  std::function<Status()> before_measurement;
};

// The CPU arena calibration uses when CalibrationOptions::device.capacity_bytes is 0.
constexpr int64_t kDefaultCpuArenaBytes = int64_t{4} << 30;

struct GemmSample {
  traces::GemmDims dims;
  // "fp32", "fp16" or "bf16": the CPU backend times fp32 only (it runs every
  // dtype in fp32); CUDA times all three (fp32 without TF32: cuda_device.h).
  std::string dtype = "fp32";
  int64_t flops = 0;
  int64_t ns = 0;  // median
};

struct BandwidthSample {
  int64_t bytes = 0;  // moved (read + written)
  int64_t ns = 0;     // median
};

struct OpSample {
  traces::OpKind kind = traces::OpKind::kGemm;
  std::optional<traces::GemmDims> gemm;
  std::string dtype;  // of the op's first output
  int64_t bytes = 0;  // bytes_read + bytes_written
  int64_t ns = 0;     // median over the ops of the same kind and shape
};

struct Calibration {
  std::string backend;                        // "cpu" or "cuda"
  std::string device;                         // Device::Describe()
  int64_t device_capacity_bytes = 0;          // the arena the device was made with
  int64_t allocation_alignment_bytes = 1;     // the device allocator's granularity
  int64_t workspace_output_region_bytes = 0;  // Device::workspace_output_region_bytes
  std::vector<GemmSample> gemm;
  std::vector<BandwidthSample> memory;  // memory-bound passes
  double d2h_GBps = 0;
  double h2d_GBps = 0;
  std::string io_backend;
  bool direct_io = true;      // false: the SSD figures went through the page cache
  double ssd_write_GBps = 0;  // every directory together
  double ssd_read_GBps = 0;
  // With several directories: each one alone, in CalibrationOptions::dirs' order.
  struct DirBandwidth {
    std::string dir;
    double write_GBps = 0;
    double read_GBps = 0;
  };
  std::vector<DirBandwidth> ssd_dirs;
  double ssd_write_latency_us = 0;  // one 4 KiB request, median (the first directory)
  double ssd_read_latency_us = 0;
  std::vector<OpSample> ops;
  // Host-side cost per op that the op times do not contain (issuing, event
  // waits): (step time − Σ op times) / ops of the keep-everything replays.
  double op_overhead_us = 0;
  // Compute time each MiB of SSD traffic (written or read) takes from the
  // ops beside it: the step of an offload-everything replay (storages of 1 MiB
  // and more), less its exposed I/O, minus the keep-everything step, over the
  // MiB it moved; the median of 3 interleaved pairs, on the first trace that
  // has such storages (the figure is the host's; a large model's replays are
  // long). On the CPU
  // backend the engine's copies and submissions share the ops' cores (one core
  // per rank under mpirun). 0: no trace had such a storage.
  double io_overhead_us_per_MiB = 0;
};

Result<Calibration> Calibrate(const CalibrationOptions& options);

// The copies Calibrate times each way, with how many of each one step moves:
// the storages of the first trace with offload candidates
// (traces::OffloadCandidates), at most the 8 sizes that carry the most bytes,
// most first; one 64 MiB copy when no trace has any. A replay's copies of a
// few MiB run from the caches and faster than one large copy, so d2h_GBps and
// h2d_GBps are these copies' bytes over their time, queued back to back.
struct CopySize {
  int64_t bytes = 0;
  int64_t count = 0;
  bool operator==(const CopySize&) const = default;
};
std::vector<CopySize> CopySizes(const std::vector<traces::Trace>& traces);

// Every measured figure of `c` (times, bandwidths, latencies, the op
// overhead), in an order fixed by what was measured: calibrations with the
// same options list theirs alike. What `mpirun -np N ssdtrain calibrate`
// averages over its ranks.
std::vector<double> MeasuredFigures(const Calibration& c);
// Sets `c`'s figures from `figures` (MeasuredFigures' order); an error when
// the count differs from c's own.
Status SetMeasuredFigures(const std::vector<double>& figures, Calibration* c);

}  // namespace ssdtrain::exec

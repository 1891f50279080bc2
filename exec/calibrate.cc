#include "exec/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "exec/detail/calibrate_copies.h"
#include "exec/detail/calibrate_ssd.h"
#include "exec/offload_dir.h"
#include "exec/replay.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using Clock = detail::CalibrationClock;
using detail::ElapsedNs;
using detail::Median;

// GEMM shapes: squares, and transformer projections (tokens x out x in) at a few widths.
constexpr int64_t kSquareSides[] = {128, 256, 512, 1024, 2048};
constexpr int64_t kTokens = 1024;
constexpr int64_t kWidths[] = {256, 512, 1024};
// Memory-bound passes: bytes moved (half read, half written).
constexpr int64_t kMemoryBytes[] = {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20,
                                    int64_t{64} << 20, int64_t{256} << 20};
constexpr int kOpTimingSteps = 4;     // measured keep-everything steps per trace, after a warm-up
constexpr int kOpTimingAttempts = 3;  // replays at most, until the steps agree
constexpr double kOpTimingSteadySpread = 0.04;  // (slowest - fastest) / fastest step
constexpr int kIoOverheadPairs = 3;             // keep / offload-everything replay pairs
constexpr int kIoOverheadSteps = 1;             // measured steps of each, after a warm-up
constexpr int64_t kIoOverheadMinBytes = int64_t{1} << 20;  // storages the offload replay moves

// A one-op trace: inputs and outputs sized for `op`, so that the device can run it.
traces::Trace OneOpTrace(traces::Op op, std::vector<int64_t> input_bytes,
                         std::vector<int64_t> output_bytes,
                         traces::DType dtype = traces::DType::kFp32) {
  traces::Trace t;
  t.header.model = "calibration";
  t.header.hidden = t.header.heads = t.header.layers = t.header.seq_len = t.header.micro_batch = 1;
  op.id = 0;
  op.inputs.clear();
  op.outputs.clear();
  auto add = [&](int64_t bytes, bool input) {
    traces::Tensor x;
    x.id = static_cast<traces::TensorId>(t.tensors.size());
    x.bytes = bytes;
    x.dtype = dtype;
    if (input) {
      x.consumers = {0};
      op.inputs.push_back(x.id);
    } else {
      x.producer = 0;
      op.outputs.push_back(x.id);
    }
    t.tensors.push_back(x);
  };
  for (int64_t b : input_bytes) add(b, true);
  for (int64_t b : output_bytes) add(b, false);
  t.ops.push_back(std::move(op));
  return t;
}

// Runs the trace's single op `repeats` times after one warm-up; returns the median.
Result<int64_t> TimeOneOp(Device& device, const traces::Trace& t, int repeats,
                          traces::DType dtype = traces::DType::kFp32) {
  SSDTRAIN_RETURN_IF_ERROR(device.ReserveWorkspace(t).status());
  std::vector<DeviceBuffer> ins, outs;
  Status status = Status::Ok();
  auto release = [&] {
    for (DeviceBuffer& b : ins) device.Free(b);
    for (DeviceBuffer& b : outs) device.Free(b);
  };
  for (traces::TensorId id : t.ops[0].inputs) {
    Result<DeviceBuffer> b = device.Allocate(t.tensor(id).bytes);
    if (!b.ok()) return release(), b.status();
    ins.push_back(*b);
  }
  for (traces::TensorId id : t.ops[0].outputs) {
    Result<DeviceBuffer> b = device.Allocate(t.tensor(id).bytes);
    if (!b.ok()) return release(), b.status();
    outs.push_back(*b);
  }
  OpBuffers buffers{ins, outs, dtype};
  std::vector<int64_t> times;
  for (int r = 0; r <= repeats && status.ok(); ++r) {
    const auto start = Clock::now();
    status = device.RunOpAsync(t.ops[0], buffers);
    if (status.ok()) status = device.Synchronize(Stream::kCompute);
    if (r > 0) times.push_back(ElapsedNs(start));  // r == 0 warms up
  }
  release();
  if (!status.ok()) return status;
  return Median(times);
}

Status MeasureGemms(Device& device, const CalibrationOptions& o, Calibration* out) {
  std::vector<traces::GemmDims> shapes;
  for (int64_t s : kSquareSides) shapes.push_back({s, s, s, 1});
  for (int64_t h : kWidths) {
    shapes.push_back({kTokens, 3 * h, h, 1});
    shapes.push_back({kTokens, 4 * h, h, 1});
    shapes.push_back({kTokens, h, 4 * h, 1});
  }
  // The CPU backend runs every dtype in fp32; a GPU's fp16 and bf16 GEMMs run
  // on tensor cores at rates of their own.
  std::vector<traces::DType> dtypes{traces::DType::kFp32};
  if (device.kind() == "cuda") {
    dtypes.push_back(traces::DType::kFp16);
    dtypes.push_back(traces::DType::kBf16);
  }
  for (traces::DType dtype : dtypes) {
    const int64_t elt = traces::DTypeSize(dtype);
    for (const traces::GemmDims& d : shapes) {
      traces::Op op;
      op.kind = traces::OpKind::kGemm;
      op.gemm = d;
      op.flops = 2 * d.m * d.n * d.k * d.batch;
      op.bytes_read = (d.m * d.k + d.k * d.n) * elt;
      op.bytes_written = d.m * d.n * elt;
      traces::Trace t =
          OneOpTrace(op, {d.m * d.k * elt, d.k * d.n * elt}, {d.m * d.n * elt}, dtype);
      Result<int64_t> ns = TimeOneOp(device, t, o.repeats, dtype);
      if (!ns.ok())
        return ns.status().WithPrefix(std::string(traces::ToString(dtype)) + " GEMM " +
                                      std::to_string(d.m) + "x" + std::to_string(d.n) + "x" +
                                      std::to_string(d.k));
      out->gemm.push_back(GemmSample{d, std::string(traces::ToString(dtype)), op.flops, *ns});
    }
  }
  return Status::Ok();
}

Status MeasureMemory(Device& device, const CalibrationOptions& o, Calibration* out) {
  for (int64_t bytes : kMemoryBytes) {
    traces::Op op;
    op.kind = traces::OpKind::kElementwise;
    op.bytes_read = bytes / 2;
    op.bytes_written = bytes / 2;
    traces::Trace t = OneOpTrace(op, {bytes / 2}, {bytes / 2});
    Result<int64_t> ns = TimeOneOp(device, t, o.repeats);
    if (!ns.ok())
      return ns.status().WithPrefix("memory-bound pass of " + std::to_string(bytes) + " bytes");
    out->memory.push_back(BandwidthSample{bytes, *ns});
  }
  return Status::Ok();
}

// The replays calibration runs: on its device (warm already: a replay's first
// step is not spent touching it), through the offload engine it measured.
ReplayOptions CalibrationReplay(Device& device, const CalibrationOptions& o, int steps) {
  ReplayOptions ro;
  ro.dirs = o.dirs;
  ro.backend = o.backend;
  ro.steps = steps;
  ro.device_memory_bytes = device.capacity_bytes();
  ro.cpu_compute_threads = o.device.cpu_compute_threads;
  ro.cpu_pin_threads = o.device.cpu_pin_threads;
  ro.device = &device;
  ro.block_size = o.block_size;
  ro.queue_depth = o.queue_depth;
  ro.allow_buffered_io = o.allow_buffered_io;
  return ro;
}

// Times every op of each trace in a keep-everything replay and folds ops of the
// same kind and shape into one sample (the median over layers).
Status MeasureTraceOps(Device& device, const CalibrationOptions& o, Calibration* out) {
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, std::string, int64_t>;
  std::map<Key, std::vector<int64_t>> times;
  std::map<Key, OpSample> samples;
  std::vector<int64_t> overheads;
  for (const traces::Trace& trace : o.traces) {
    if (o.before_measurement) SSDTRAIN_RETURN_IF_ERROR(o.before_measurement());
    if (o.progress)
      o.progress("timing the ops of " + trace.header.model + " at micro-batch " +
                 std::to_string(trace.header.micro_batch) + " (keep-everything replay)");
    const ReplayOptions ro = CalibrationReplay(device, o, kOpTimingSteps);
    // A machine that is still settling (right after a build, say) gives steps
    // of unequal length; such a replay would set every op's time. Measure
    // again until the steps agree, a few times at most, and keep the steadiest.
    Result<ReplayResult> r = Status::Internal("not run");
    double best_spread = 0;
    for (int attempt = 0; attempt < kOpTimingAttempts; ++attempt) {
      Result<ReplayResult> run =
          Replay(trace, traces::KeepAllPlan(trace), ro, "calibration keep plan");
      if (!run.ok()) return run.status().WithPrefix("timing the ops of " + trace.header.model);
      const auto [lo, hi] =
          std::minmax_element(run->step_times_ns.begin() + 1, run->step_times_ns.end());
      const double spread = static_cast<double>(*hi - *lo) / static_cast<double>(*lo);
      if (!r.ok() || spread < best_spread) {
        r = std::move(run);
        best_spread = spread;
      }
      if (best_spread <= kOpTimingSteadySpread) break;
      if (o.progress && attempt + 1 < kOpTimingAttempts) {
        o.progress("  steps differed by " + std::to_string(static_cast<int>(spread * 100 + 0.5)) +
                   "%; timing again");
      }
    }
    // Every measured step's ops, pooled: an op's time is the median over its
    // layers and the steps, the overhead the median over the steps.
    for (size_t i = 0; i < r->measured_step_ops.size(); ++i) {
      const std::vector<OpTime>& ops = r->measured_step_ops[i];
      const int64_t step_ns = r->step_times_ns[i + 1];  // [0] is the warm-up
      int64_t busy = 0;
      for (const OpTime& t : ops) busy += t.end_ns - t.start_ns;
      if (!ops.empty() && step_ns > busy) {
        overheads.push_back((step_ns - busy) / static_cast<int64_t>(ops.size()));
      }
      for (const OpTime& t : ops) {
        const traces::Op& op = trace.op(t.op);
        const traces::GemmDims g = op.gemm.value_or(traces::GemmDims{0, 0, 0, 0});
        const std::string dtype =
            op.outputs.empty() ? trace.header.dtype
                               : std::string(traces::ToString(trace.tensor(op.outputs[0]).dtype));
        const int64_t bytes = op.bytes_read + op.bytes_written;
        const Key key{static_cast<int>(op.kind), g.m, g.n, g.k, g.batch, dtype,
                      op.gemm ? 0 : bytes};
        times[key].push_back(t.end_ns - t.start_ns);
        samples[key] = OpSample{op.kind, op.gemm, dtype, bytes, 0};
      }
    }
  }
  for (auto& [key, sample] : samples) {
    sample.ns = Median(times[key]);
    out->ops.push_back(sample);
  }
  if (!overheads.empty()) out->op_overhead_us = static_cast<double>(Median(overheads)) / 1e3;
  return Status::Ok();
}

// What the offload engine's SSD traffic costs the ops beside it
// (Calibration::io_overhead_us_per_MiB): keep-everything and offload-everything
// replays of the first trace with storages of 1 MiB or more (the figure is
// the host's, not the model's, and a large model's replays are long),
// interleaved in pairs so that a slow minute of a shared machine lands on both
// halves of a pair.
Status MeasureIoOverhead(Device& device, const CalibrationOptions& o, Calibration* out) {
  for (const traces::Trace& trace : o.traces) {
    traces::OffloadAllOptions offload;
    offload.min_bytes = kIoOverheadMinBytes;
    const traces::Plan offload_plan = traces::OffloadAllPlan(trace, offload);
    if (offload_plan.placements.empty()) continue;  // every rank skips it alike
    const traces::Plan keep_plan = traces::KeepAllPlan(trace);
    if (o.progress)
      o.progress("what SSD traffic costs the ops of " + trace.header.model +
                 " (keep and offload-everything replays, " + std::to_string(kIoOverheadPairs) +
                 " pairs)");
    const ReplayOptions ro = CalibrationReplay(device, o, kIoOverheadSteps);
    std::vector<double> pairs;
    for (int p = 0; p < kIoOverheadPairs; ++p) {
      if (o.before_measurement) SSDTRAIN_RETURN_IF_ERROR(o.before_measurement());
      Result<ReplayResult> keep = Replay(trace, keep_plan, ro, "calibration keep plan");
      if (!keep.ok()) return keep.status().WithPrefix("SSD traffic's cost, " + trace.header.model);
      if (o.before_measurement) SSDTRAIN_RETURN_IF_ERROR(o.before_measurement());
      Result<ReplayResult> moved = Replay(trace, offload_plan, ro, "calibration offload plan");
      if (!moved.ok())
        return moved.status().WithPrefix("SSD traffic's cost, " + trace.header.model);
      const traces::StepMetrics& m = moved->metrics;
      const int64_t bytes = m.ssd_bytes_written + m.ssd_bytes_read;
      if (bytes <= 0) continue;
      const int64_t extra = m.step_time_ns - m.exposed_io_ns - keep->metrics.step_time_ns;
      pairs.push_back(std::max<double>(
          0, static_cast<double>(extra) / 1e3 / (static_cast<double>(bytes) / 1048576.0)));
    }
    if (!pairs.empty()) {
      std::sort(pairs.begin(), pairs.end());
      out->io_overhead_us_per_MiB = pairs[pairs.size() / 2];
    }
    break;
  }
  return Status::Ok();
}

// Calls f on every measured figure of c, in MeasuredFigures' order.
template <class C, class F>
void ForEachFigure(C& c, F f) {
  for (auto& s : c.gemm) f(s.ns);
  for (auto& s : c.memory) f(s.ns);
  f(c.d2h_GBps);
  f(c.h2d_GBps);
  f(c.ssd_write_GBps);
  f(c.ssd_read_GBps);
  for (auto& d : c.ssd_dirs) {
    f(d.write_GBps);
    f(d.read_GBps);
  }
  f(c.ssd_write_latency_us);
  f(c.ssd_read_latency_us);
  for (auto& s : c.ops) f(s.ns);
  f(c.op_overhead_us);
  f(c.io_overhead_us_per_MiB);
}

}  // namespace

std::vector<double> MeasuredFigures(const Calibration& c) {
  std::vector<double> out;
  ForEachFigure(c, [&](const auto& x) { out.push_back(static_cast<double>(x)); });
  return out;
}

Status SetMeasuredFigures(const std::vector<double>& figures, Calibration* c) {
  const size_t count = MeasuredFigures(*c).size();
  if (figures.size() != count) {
    return Status::InvalidArgument("calibration figures: " + std::to_string(figures.size()) +
                                   " given, this calibration has " + std::to_string(count));
  }
  size_t i = 0;
  ForEachFigure(*c, [&](auto& x) {
    using T = std::remove_reference_t<decltype(x)>;
    const double v = figures[i++];
    x = std::is_integral_v<T> ? static_cast<T>(std::llround(v)) : static_cast<T>(v);
  });
  return Status::Ok();
}

Result<Calibration> Calibrate(const CalibrationOptions& o) {
  if (o.repeats < 1) return Status::InvalidArgument("calibrate: repeats must be at least 1");
  // The SSD is measured last, after seconds of GEMMs: its directory is checked first.
  if (o.dirs.empty()) return Status::InvalidArgument("calibrate: no offload directory given");
  for (const std::string& dir : o.dirs) {
    SSDTRAIN_RETURN_IF_ERROR(CheckOffloadDir(dir, o.allow_buffered_io));
  }
  Calibration out;
  std::string picked;
  DeviceOptions device_options = o.device;
  if (device_options.capacity_bytes == 0) {
    // 0 means the GPU's free memory on CUDA; the CPU arena needs a size.
    const bool cuda = o.backend != BackendChoice::kCpu && CudaAvailable(nullptr);
    if (!cuda) device_options.capacity_bytes = kDefaultCpuArenaBytes;
  }
  Result<std::unique_ptr<Device>> device = MakeDevice(o.backend, device_options, &picked);
  if (!device.ok()) return device.status();
  out.backend = std::string((*device)->kind());
  out.device = (*device)->Describe();
  out.device_capacity_bytes = (*device)->capacity_bytes();
  out.allocation_alignment_bytes = (*device)->allocation_alignment();
  out.workspace_output_region_bytes = (*device)->workspace_output_region_bytes();
  if (o.progress) o.progress("device: " + picked);
  if (o.progress)
    o.progress("GEMM throughput over " +
               std::to_string(std::size(kSquareSides) + 3 * std::size(kWidths)) + " shapes" +
               ((*device)->kind() == "cuda" ? " in fp32 (no TF32), fp16 and bf16" : ""));
  auto before = [&o] { return o.before_measurement ? o.before_measurement() : Status::Ok(); };
  SSDTRAIN_RETURN_IF_ERROR(before());
  SSDTRAIN_RETURN_IF_ERROR(MeasureGemms(**device, o, &out));
  if (o.progress) o.progress("memory-bound op bandwidth");
  SSDTRAIN_RETURN_IF_ERROR(before());
  SSDTRAIN_RETURN_IF_ERROR(MeasureMemory(**device, o, &out));
  if (o.progress) o.progress("copy bandwidth device <-> staging");
  SSDTRAIN_RETURN_IF_ERROR(before());
  SSDTRAIN_RETURN_IF_ERROR(detail::MeasureCopies(**device, o, &out));
  if (o.progress) {
    std::string where = o.dirs.front();
    for (size_t i = 1; i < o.dirs.size(); ++i) where += ", " + o.dirs[i];
    o.progress("SSD path through the offload engine in " + where +
               (o.dirs.size() > 1 ? " (each alone, then together)" : ""));
  }
  SSDTRAIN_RETURN_IF_ERROR(before());
  SSDTRAIN_RETURN_IF_ERROR(detail::MeasureSsd(o, &out));
  SSDTRAIN_RETURN_IF_ERROR(MeasureTraceOps(**device, o, &out));
  SSDTRAIN_RETURN_IF_ERROR(MeasureIoOverhead(**device, o, &out));
  return out;
}

}  // namespace ssdtrain::exec

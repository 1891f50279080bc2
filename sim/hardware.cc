#include "sim/hardware.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "sim/detail/efficiency_json.h"
#include "sim/detail/interconnect_json.h"
#include "traces/detail/json_fields.h"
#include "traces/fp8.h"
#include "traces/io.h"

namespace ssdtrain::sim {
namespace {

using traces::detail::JsonPath;
using traces::detail::ObjectReader;
using Sign = ObjectReader::Sign;

// Usable fraction of PCIe raw bandwidth after 128b/130b encoding and TLP
// overhead; measured Gen4 x16 reaches ~26.4 GiB/s of ~31.5 GB/s raw.
constexpr double kPcieEfficiency = 0.85;
constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
// The options structs hold counts as int.
constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// An optional int field >= min, keeping *out when absent.
Status ReadInt(const ObjectReader& r, const std::string& name, int64_t min, int* out) {
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t x, r.IntInOr(name, *out, min, kIntMax));
  *out = static_cast<int>(x);
  return Status::Ok();
}

Status ReadGpu(const ObjectReader& r, GpuOptions* g) {
  SSDTRAIN_ASSIGN_OR_RETURN(g->name, r.StringOr("name", g->name));
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader peak, r.Object("peak_tflops"));
  SSDTRAIN_ASSIGN_OR_RETURN(g->peak_tflops_fp16, peak.Number("fp16", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(g->peak_tflops_bf16,
                            peak.NumberOr("bf16", g->peak_tflops_bf16, Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(g->peak_tflops_fp32,
                            peak.NumberOr("fp32", g->peak_tflops_fp32, Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(g->peak_tflops_fp8,
                            peak.NumberOr("fp8", g->peak_tflops_fp8, Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(g->peak_tflops_mxfp8,
                            peak.NumberOr("mxfp8", g->peak_tflops_mxfp8, Sign::kPositive));
  if (g->peak_tflops_mxfp8 > 0 && g->peak_tflops_fp8 == 0) {
    return peak.At("mxfp8").Error("needs fp8 too (a GPU with MXFP8 has FP8 tensor cores)");
  }
  SSDTRAIN_RETURN_IF_ERROR(peak.CheckNoUnknown());
  SSDTRAIN_ASSIGN_OR_RETURN(g->clock_scale,
                            r.NumberOr("clock_scale", g->clock_scale, Sign::kPositive));
  if (g->clock_scale > 1) return r.At("clock_scale").Error("must be in (0, 1]");
  SSDTRAIN_ASSIGN_OR_RETURN(g->memory_GBps, r.Number("memory_GBps", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(g->memory_GiB, r.Number("memory_GiB", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(g->reserved_GiB,
                            r.NumberOr("reserved_GiB", g->reserved_GiB, Sign::kNonNegative));
  if (g->reserved_GiB >= g->memory_GiB) {
    return r.At("reserved_GiB").Error("must be below memory_GiB");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(g->op_overhead_us,
                            r.NumberOr("op_overhead_us", g->op_overhead_us, Sign::kNonNegative));
  SSDTRAIN_ASSIGN_OR_RETURN(
      g->io_overhead_us_per_MiB,
      r.NumberOr("io_overhead_us_per_MiB", g->io_overhead_us_per_MiB, Sign::kNonNegative));
  SSDTRAIN_RETURN_IF_ERROR(ReadInt(r, "issue_ahead_ops", 1, &g->issue_ahead_ops));
  SSDTRAIN_RETURN_IF_ERROR(ReadInt(r, "sm_count", 0, &g->sm_count));
  SSDTRAIN_ASSIGN_OR_RETURN(
      g->allocation_alignment_bytes,
      r.IntInOr("allocation_alignment_bytes", g->allocation_alignment_bytes, 1, kInt64Max));
  SSDTRAIN_ASSIGN_OR_RETURN(g->replay_workspace, r.BoolOr("replay_workspace", g->replay_workspace));
  SSDTRAIN_ASSIGN_OR_RETURN(
      g->replay_output_region_bytes,
      r.IntInOr("replay_output_region_bytes", g->replay_output_region_bytes, 0, kInt64Max));
  SSDTRAIN_RETURN_IF_ERROR(detail::ReadEfficiency(r, g));
  SSDTRAIN_RETURN_IF_ERROR(r.CheckNoUnknown());
  if (g->peak_tflops_bf16 == 0) g->peak_tflops_bf16 = g->peak_tflops_fp16;
  if (g->peak_tflops_fp32 == 0) g->peak_tflops_fp32 = g->peak_tflops_fp16 / 16;
  return Status::Ok();
}

Status ReadMeasured(const ObjectReader& root, std::vector<MeasuredOpTime>* out) {
  if (!root.Has("measured_op_times")) {
    root.Skip("measured_op_times");
    return Status::Ok();
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* arr, root.Value("measured_op_times"));
  if (!arr->is_array()) return root.At("measured_op_times").Error("expected an array");
  for (size_t i = 0; i < arr->size(); ++i) {
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader e,
                              ObjectReader::Make((*arr)[i], root.At("measured_op_times").Index(i)));
    MeasuredOpTime m;
    SSDTRAIN_ASSIGN_OR_RETURN(const std::string kind, e.String("kind"));
    const auto parsed = traces::ParseOpKind(kind);
    if (!parsed) return e.At("kind").Error("unknown op kind \"" + kind + "\"");
    m.kind = *parsed;
    if (e.Has("gemm")) {
      SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader g, e.Object("gemm"));
      traces::GemmDims d;
      SSDTRAIN_ASSIGN_OR_RETURN(d.m, g.IntIn("m", 1, kInt64Max));
      SSDTRAIN_ASSIGN_OR_RETURN(d.n, g.IntIn("n", 1, kInt64Max));
      SSDTRAIN_ASSIGN_OR_RETURN(d.k, g.IntIn("k", 1, kInt64Max));
      SSDTRAIN_ASSIGN_OR_RETURN(d.batch, g.IntInOr("batch", d.batch, 1, kInt64Max));
      SSDTRAIN_RETURN_IF_ERROR(g.CheckNoUnknown());
      m.gemm = d;
    } else if (m.kind == traces::OpKind::kGemm) {
      return e.At("gemm").Error("missing (a gemm entry needs its dims)");
    } else {
      e.Skip("gemm");
    }
    SSDTRAIN_ASSIGN_OR_RETURN(m.dtype, e.StringOr("dtype", m.dtype));
    SSDTRAIN_ASSIGN_OR_RETURN(m.bytes, e.IntInOr("bytes", m.bytes, 0, kInt64Max));
    SSDTRAIN_ASSIGN_OR_RETURN(m.ns, e.IntIn("ns", 1, kInt64Max));
    SSDTRAIN_RETURN_IF_ERROR(e.CheckNoUnknown());
    out->push_back(m);
  }
  return Status::Ok();
}

}  // namespace

double Fp8PeakTflops(const GpuOptions& gpu, traces::Fp8Recipe recipe) {
  switch (recipe) {
    case traces::Fp8Recipe::kOff:
      return 0;
    case traces::Fp8Recipe::kMxfp8:
      return gpu.peak_tflops_mxfp8;
    case traces::Fp8Recipe::kDelayed:
    case traces::Fp8Recipe::kCurrent:
    case traces::Fp8Recipe::kBlockwise:
      return gpu.peak_tflops_fp8;
  }
  return 0;
}

Status CheckPrecision(const HardwareOptions& hw, const std::string& fp8) {
  const std::optional<traces::Fp8Recipe> recipe = traces::ParseFp8Recipe(fp8);
  if (!recipe) {
    return Status::InvalidArgument("unknown fp8 recipe \"" + fp8 + "\"; expected " +
                                   std::string(traces::kFp8RecipeNames));
  }
  if (*recipe == traces::Fp8Recipe::kOff) return Status::Ok();
  const std::string gpu = hw.gpu.name.empty() ? std::string("its GPU") : hw.gpu.name;
  if (Fp8PeakTflops(hw.gpu, *recipe) > 0) return Status::Ok();
  if (*recipe != traces::Fp8Recipe::kMxfp8 || hw.gpu.peak_tflops_fp8 <= 0) {
    return Status::FailedPrecondition(
        hw.name + ": gpu.peak_tflops.fp8: " + gpu +
        " has no FP8 tensor cores (the preset gives no fp8 peak); FP8 training (fp8 " + fp8 +
        ") needs a Hopper or Blackwell GPU: train in bf16 here");
  }
  return Status::FailedPrecondition(
      hw.name + ": gpu.peak_tflops.mxfp8: " + gpu +
      " has no MXFP8 tensor cores (only Blackwell does); use --fp8 delayed, current or "
      "blockwise");
}

double PcieGBps(int gen, int lanes) {
  // Raw GT/s per lane by generation; Gen3+ use 128b/130b encoding.
  double gts = 8;
  switch (gen) {
    case 3:
      gts = 8;
      break;
    case 4:
      gts = 16;
      break;
    case 5:
      gts = 32;
      break;
    case 6:
      gts = 64;
      break;
    default:
      gts = 8;
      break;
  }
  return gts * lanes / 8.0 * (128.0 / 130.0) * kPcieEfficiency;
}

Result<HardwareOptions> HardwareFromJson(const nlohmann::json& j, const std::string& source) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader root, ObjectReader::Make(j, JsonPath(source, "")));
  HardwareOptions hw;
  SSDTRAIN_ASSIGN_OR_RETURN(hw.name, root.String("name"));
  SSDTRAIN_ASSIGN_OR_RETURN(hw.description, root.StringOr("description", hw.description));
  root.Skip("sources");
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t calibrated_ranks,
                            root.IntInOr("calibrated_ranks", 0, 0, kIntMax));
  hw.calibrated_ranks = static_cast<int>(calibrated_ranks);
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t gpus_per_node, root.IntIn("gpus_per_node", 1, kIntMax));
  hw.gpus_per_node = static_cast<int>(gpus_per_node);

  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader gpu, root.Object("gpu"));
  SSDTRAIN_RETURN_IF_ERROR(ReadGpu(gpu, &hw.gpu));

  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader link, root.Object("host_link"));
  SSDTRAIN_ASSIGN_OR_RETURN(const int64_t gen,
                            link.IntInOr("pcie_gen", hw.host_link.pcie_gen, 3, 6));
  hw.host_link.pcie_gen = static_cast<int>(gen);
  SSDTRAIN_RETURN_IF_ERROR(ReadInt(link, "lanes", 1, &hw.host_link.lanes));
  SSDTRAIN_ASSIGN_OR_RETURN(hw.host_link.d2h_GBps,
                            link.NumberOr("d2h_GBps", hw.host_link.d2h_GBps, Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(hw.host_link.h2d_GBps,
                            link.NumberOr("h2d_GBps", hw.host_link.h2d_GBps, Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(
      hw.host_link.latency_us,
      link.NumberOr("latency_us", hw.host_link.latency_us, Sign::kNonNegative));
  SSDTRAIN_RETURN_IF_ERROR(link.CheckNoUnknown());
  const double derived = PcieGBps(hw.host_link.pcie_gen, hw.host_link.lanes);
  if (hw.host_link.d2h_GBps == 0) hw.host_link.d2h_GBps = derived;
  if (hw.host_link.h2d_GBps == 0) hw.host_link.h2d_GBps = derived;

  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader host, root.Object("host_memory"));
  SSDTRAIN_ASSIGN_OR_RETURN(hw.host_memory.GiB, host.Number("GiB", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(hw.host_memory.pinned_GiB,
                            host.Number("pinned_GiB", Sign::kNonNegative));
  if (hw.host_memory.pinned_GiB > hw.host_memory.GiB) {
    return host.At("pinned_GiB").Error("must not exceed GiB");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(hw.host_memory.bandwidth_GBps,
                            host.Number("bandwidth_GBps", Sign::kPositive));
  SSDTRAIN_RETURN_IF_ERROR(host.CheckNoUnknown());

  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader st, root.Object("storage"));
  if (!st.Has("arrays")) {
    return st.At("arrays").Error("missing (expected a non-empty array of drive counts)");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const std::vector<int64_t> arrays, st.IntArray("arrays"));
  if (arrays.empty()) {
    return st.At("arrays").Error("expected a non-empty array of drive counts, one array per GPU");
  }
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i] < 1 || arrays[i] > kIntMax) {
      return st.At("arrays").Index(i).Error("a drive count must be >= 1, got " +
                                            std::to_string(arrays[i]));
    }
    hw.storage.arrays_drives.push_back(static_cast<int>(arrays[i]));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(hw.storage.gds, st.BoolOr("gds", hw.storage.gds));
  SSDTRAIN_RETURN_IF_ERROR(ReadInt(st, "gpus_per_array", 1, &hw.storage.gpus_per_array));
  SSDTRAIN_RETURN_IF_ERROR(
      ReadInt(st, "max_inflight_tensors", 1, &hw.storage.max_inflight_tensors));
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader dr, st.Object("drive"));
  SSDTRAIN_RETURN_IF_ERROR(st.CheckNoUnknown());
  DriveOptions& d = hw.storage.drive;
  SSDTRAIN_ASSIGN_OR_RETURN(d.model, dr.StringOr("model", d.model));
  SSDTRAIN_ASSIGN_OR_RETURN(d.read_GBps, dr.Number("read_GBps", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(d.write_GBps, dr.Number("write_GBps", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(d.read_latency_us,
                            dr.NumberOr("read_latency_us", d.read_latency_us, Sign::kNonNegative));
  SSDTRAIN_ASSIGN_OR_RETURN(
      d.write_latency_us, dr.NumberOr("write_latency_us", d.write_latency_us, Sign::kNonNegative));
  SSDTRAIN_RETURN_IF_ERROR(ReadInt(dr, "queue_depth", 1, &d.queue_depth));
  SSDTRAIN_ASSIGN_OR_RETURN(d.request_KiB,
                            dr.NumberOr("request_KiB", d.request_KiB, Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(d.capacity_TB, dr.Number("capacity_TB", Sign::kPositive));
  SSDTRAIN_ASSIGN_OR_RETURN(d.endurance_TBW,
                            dr.NumberOr("endurance_TBW", d.endurance_TBW, Sign::kNonNegative));
  SSDTRAIN_ASSIGN_OR_RETURN(d.dwpd, dr.NumberOr("dwpd", d.dwpd, Sign::kNonNegative));
  SSDTRAIN_ASSIGN_OR_RETURN(d.warranty_years,
                            dr.NumberOr("warranty_years", d.warranty_years, Sign::kPositive));
  SSDTRAIN_RETURN_IF_ERROR(dr.CheckNoUnknown());
  if (d.endurance_TBW == 0) d.endurance_TBW = d.dwpd * d.capacity_TB * 365 * d.warranty_years;
  if (d.endurance_TBW == 0) {
    return dr.At("endurance_TBW").Error("give endurance_TBW or dwpd (rated endurance is needed)");
  }

  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader ic, root.Object("interconnect"));
  SSDTRAIN_RETURN_IF_ERROR(detail::ReadInterconnect(ic, &hw));

  SSDTRAIN_RETURN_IF_ERROR(ReadMeasured(root, &hw.measured_op_times));
  SSDTRAIN_RETURN_IF_ERROR(root.CheckNoUnknown());
  return hw;
}

Result<HardwareOptions> LoadHardware(const std::string& path) {
  SSDTRAIN_ASSIGN_OR_RETURN(nlohmann::json j, traces::ReadJsonFile(path));
  return HardwareFromJson(j, path);
}

nlohmann::json ToJson(const HardwareOptions& hw) {
  nlohmann::json measured = nlohmann::json::array();
  for (const MeasuredOpTime& m : hw.measured_op_times) {
    nlohmann::json e = {{"kind", std::string(traces::ToString(m.kind))}, {"ns", m.ns}};
    if (m.gemm) {
      e["gemm"] = {{"m", m.gemm->m}, {"n", m.gemm->n}, {"k", m.gemm->k}, {"batch", m.gemm->batch}};
    }
    if (!m.dtype.empty()) e["dtype"] = m.dtype;
    if (m.bytes > 0) e["bytes"] = m.bytes;
    measured.push_back(e);
  }
  const DriveOptions& d = hw.storage.drive;
  nlohmann::json peak = {{"fp16", hw.gpu.peak_tflops_fp16},
                         {"bf16", hw.gpu.peak_tflops_bf16},
                         {"fp32", hw.gpu.peak_tflops_fp32}};
  if (hw.gpu.peak_tflops_fp8 > 0) peak["fp8"] = hw.gpu.peak_tflops_fp8;
  if (hw.gpu.peak_tflops_mxfp8 > 0) peak["mxfp8"] = hw.gpu.peak_tflops_mxfp8;
  nlohmann::json out = {
      {"name", hw.name},
      {"description", hw.description},
      {"gpus_per_node", hw.gpus_per_node},
      {"gpu",
       {{"name", hw.gpu.name},
        {"peak_tflops", peak},
        {"clock_scale", hw.gpu.clock_scale},
        {"memory_GBps", hw.gpu.memory_GBps},
        {"memory_GiB", hw.gpu.memory_GiB},
        {"reserved_GiB", hw.gpu.reserved_GiB},
        {"op_overhead_us", hw.gpu.op_overhead_us},
        {"sm_count", hw.gpu.sm_count},
        {"io_overhead_us_per_MiB", hw.gpu.io_overhead_us_per_MiB},
        {"issue_ahead_ops", hw.gpu.issue_ahead_ops},
        {"allocation_alignment_bytes", hw.gpu.allocation_alignment_bytes},
        {"replay_workspace", hw.gpu.replay_workspace},
        {"replay_output_region_bytes", hw.gpu.replay_output_region_bytes},
        {"efficiency", detail::EfficiencyJson(hw.gpu)}}},
      {"host_link",
       {{"pcie_gen", hw.host_link.pcie_gen},
        {"lanes", hw.host_link.lanes},
        {"d2h_GBps", hw.host_link.d2h_GBps},
        {"h2d_GBps", hw.host_link.h2d_GBps},
        {"latency_us", hw.host_link.latency_us}}},
      {"host_memory",
       {{"GiB", hw.host_memory.GiB},
        {"pinned_GiB", hw.host_memory.pinned_GiB},
        {"bandwidth_GBps", hw.host_memory.bandwidth_GBps}}},
      {"storage",
       {{"arrays", hw.storage.arrays_drives},
        {"gpus_per_array", hw.storage.gpus_per_array},
        {"gds", hw.storage.gds},
        {"max_inflight_tensors", hw.storage.max_inflight_tensors},
        {"drive",
         {{"model", d.model},
          {"read_GBps", d.read_GBps},
          {"write_GBps", d.write_GBps},
          {"read_latency_us", d.read_latency_us},
          {"write_latency_us", d.write_latency_us},
          {"queue_depth", d.queue_depth},
          {"request_KiB", d.request_KiB},
          {"capacity_TB", d.capacity_TB},
          {"endurance_TBW", d.endurance_TBW},
          {"dwpd", d.dwpd},
          {"warranty_years", d.warranty_years}}}}},
      {"interconnect", detail::InterconnectJson(hw)},
      {"measured_op_times", measured},
  };
  if (!hw.gpu.attention_kernels.empty()) {
    out["gpu"]["attention_kernels"] = detail::AttentionKernelsJson(hw.gpu);
  }
  if (hw.calibrated_ranks > 0) out["calibrated_ranks"] = hw.calibrated_ranks;
  return out;
}

int64_t GpuMemoryBytes(const HardwareOptions& hw) {
  return static_cast<int64_t>((hw.gpu.memory_GiB - hw.gpu.reserved_GiB) * kBytesPerGiB);
}

int64_t HostPinnedBytes(const HardwareOptions& hw) {
  return static_cast<int64_t>(hw.host_memory.pinned_GiB * kBytesPerGiB);
}

int64_t HostPinnedBytesPerMicroBatch(const HardwareOptions& hw, int64_t micro_batches) {
  return HostPinnedBytes(hw) / std::max<int64_t>(1, micro_batches);
}

}  // namespace ssdtrain::sim

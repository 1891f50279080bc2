#include "sim/hardware.h"

#include <algorithm>
#include <cmath>

#include "sim/detail/json_reader.h"
#include "traces/io.h"

namespace ssdtrain::sim {
namespace {

using detail::JsonReader;

// Usable fraction of PCIe raw bandwidth after 128b/130b encoding and TLP
// overhead; measured Gen4 x16 reaches ~26.4 GiB/s of ~31.5 GB/s raw.
constexpr double kPcieEfficiency = 0.85;
constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

Status ReadCurve(const JsonReader& eff, const std::string& key, std::vector<EfficiencyPoint>* out) {
  if (!eff.Has(key)) return Status::Ok();
  const nlohmann::json& arr = eff.json().at(key);
  if (!arr.is_array() || arr.empty()) {
    return eff.Error(key, "expected a non-empty array of {\"size\", \"efficiency\"}");
  }
  out->clear();
  for (size_t i = 0; i < arr.size(); ++i) {
    JsonReader p(arr[i], eff.source(), eff.FieldPath(key) + "[" + std::to_string(i) + "]");
    if (!arr[i].is_object())
      return eff.Error(key, "element " + std::to_string(i) + " is not an object");
    SSDTRAIN_RETURN_IF_ERROR(p.OnlyKeys({"size", "efficiency"}));
    EfficiencyPoint point;
    SSDTRAIN_RETURN_IF_ERROR(p.Number("size", &point.size, true, true));
    SSDTRAIN_RETURN_IF_ERROR(p.Number("efficiency", &point.efficiency, true, true));
    if (point.efficiency > 1) return p.Error("efficiency", "must be in (0, 1]");
    if (!out->empty() && point.size <= out->back().size) {
      return p.Error("size", "sizes must increase along the curve");
    }
    out->push_back(point);
  }
  return Status::Ok();
}

Status ReadGpu(const JsonReader& r, GpuOptions* g) {
  SSDTRAIN_RETURN_IF_ERROR(
      r.OnlyKeys({"name", "peak_tflops", "clock_scale", "memory_GBps", "memory_GiB", "reserved_GiB",
                  "op_overhead_us", "issue_ahead_ops", "allocation_alignment_bytes",
                  "replay_workspace", "replay_output_region_bytes", "efficiency"}));
  SSDTRAIN_RETURN_IF_ERROR(r.String("name", &g->name));
  SSDTRAIN_ASSIGN_OR_RETURN(JsonReader peak, r.Object("peak_tflops", true));
  SSDTRAIN_RETURN_IF_ERROR(peak.OnlyKeys({"fp16", "bf16", "fp32"}));
  SSDTRAIN_RETURN_IF_ERROR(peak.Number("fp16", &g->peak_tflops_fp16, true, true));
  SSDTRAIN_RETURN_IF_ERROR(peak.Number("bf16", &g->peak_tflops_bf16, true));
  SSDTRAIN_RETURN_IF_ERROR(peak.Number("fp32", &g->peak_tflops_fp32, true));
  SSDTRAIN_RETURN_IF_ERROR(r.Number("clock_scale", &g->clock_scale, true));
  if (g->clock_scale > 1) return r.Error("clock_scale", "must be in (0, 1]");
  SSDTRAIN_RETURN_IF_ERROR(r.Number("memory_GBps", &g->memory_GBps, true, true));
  SSDTRAIN_RETURN_IF_ERROR(r.Number("memory_GiB", &g->memory_GiB, true, true));
  SSDTRAIN_RETURN_IF_ERROR(r.Number("reserved_GiB", &g->reserved_GiB, false));
  if (g->reserved_GiB >= g->memory_GiB) {
    return r.Error("reserved_GiB", "must be below memory_GiB");
  }
  SSDTRAIN_RETURN_IF_ERROR(r.Number("op_overhead_us", &g->op_overhead_us, false));
  SSDTRAIN_RETURN_IF_ERROR(r.Int("issue_ahead_ops", &g->issue_ahead_ops, 1));
  SSDTRAIN_RETURN_IF_ERROR(r.Int("allocation_alignment_bytes", &g->allocation_alignment_bytes, 1));
  SSDTRAIN_RETURN_IF_ERROR(r.Bool("replay_workspace", &g->replay_workspace));
  SSDTRAIN_RETURN_IF_ERROR(
      r.Int("replay_output_region_bytes", &g->replay_output_region_bytes, 0));
  SSDTRAIN_ASSIGN_OR_RETURN(JsonReader eff, r.Object("efficiency", false));
  SSDTRAIN_RETURN_IF_ERROR(eff.OnlyKeys({"gemm", "attention", "memory"}));
  SSDTRAIN_RETURN_IF_ERROR(ReadCurve(eff, "gemm", &g->gemm_efficiency));
  SSDTRAIN_RETURN_IF_ERROR(ReadCurve(eff, "attention", &g->attention_efficiency));
  SSDTRAIN_RETURN_IF_ERROR(ReadCurve(eff, "memory", &g->memory_efficiency));
  if (g->peak_tflops_bf16 == 0) g->peak_tflops_bf16 = g->peak_tflops_fp16;
  if (g->peak_tflops_fp32 == 0) g->peak_tflops_fp32 = g->peak_tflops_fp16 / 16;
  return Status::Ok();
}

Status ReadMeasured(const JsonReader& root, std::vector<MeasuredOpTime>* out) {
  if (!root.Has("measured_op_times")) return Status::Ok();
  const nlohmann::json& arr = root.json().at("measured_op_times");
  if (!arr.is_array()) return root.Error("measured_op_times", "expected an array");
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string path = "measured_op_times[" + std::to_string(i) + "]";
    if (!arr[i].is_object()) return root.Error(path, "expected an object");
    JsonReader e(arr[i], root.source(), path);
    SSDTRAIN_RETURN_IF_ERROR(e.OnlyKeys({"kind", "gemm", "dtype", "bytes", "ns"}));
    MeasuredOpTime m;
    std::string kind;
    SSDTRAIN_RETURN_IF_ERROR(e.String("kind", &kind, true));
    const auto parsed = traces::ParseOpKind(kind);
    if (!parsed) return e.Error("kind", "unknown op kind \"" + kind + "\"");
    m.kind = *parsed;
    if (e.Has("gemm")) {
      SSDTRAIN_ASSIGN_OR_RETURN(JsonReader g, e.Object("gemm", true));
      SSDTRAIN_RETURN_IF_ERROR(g.OnlyKeys({"m", "n", "k", "batch"}));
      traces::GemmDims d;
      SSDTRAIN_RETURN_IF_ERROR(g.Int("m", &d.m, 1, true));
      SSDTRAIN_RETURN_IF_ERROR(g.Int("n", &d.n, 1, true));
      SSDTRAIN_RETURN_IF_ERROR(g.Int("k", &d.k, 1, true));
      SSDTRAIN_RETURN_IF_ERROR(g.Int("batch", &d.batch, 1));
      m.gemm = d;
    } else if (m.kind == traces::OpKind::kGemm) {
      return e.Error("gemm", "missing (a gemm entry needs its dims)");
    }
    SSDTRAIN_RETURN_IF_ERROR(e.String("dtype", &m.dtype));
    SSDTRAIN_RETURN_IF_ERROR(e.Int("bytes", &m.bytes, 0));
    SSDTRAIN_RETURN_IF_ERROR(e.Int("ns", &m.ns, 1, true));
    out->push_back(m);
  }
  return Status::Ok();
}

nlohmann::json CurveJson(const std::vector<EfficiencyPoint>& c) {
  nlohmann::json a = nlohmann::json::array();
  for (const EfficiencyPoint& p : c) a.push_back({{"size", p.size}, {"efficiency", p.efficiency}});
  return a;
}

nlohmann::json EfficiencyJson(const GpuOptions& g) {
  nlohmann::json e = nlohmann::json::object();
  if (!g.gemm_efficiency.empty()) e["gemm"] = CurveJson(g.gemm_efficiency);
  if (!g.attention_efficiency.empty()) e["attention"] = CurveJson(g.attention_efficiency);
  if (!g.memory_efficiency.empty()) e["memory"] = CurveJson(g.memory_efficiency);
  return e;
}

}  // namespace

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
  if (!j.is_object()) return Status::InvalidArgument(source + ": expected a JSON object");
  JsonReader root(j, source, "");
  SSDTRAIN_RETURN_IF_ERROR(
      root.OnlyKeys({"name", "description", "gpus_per_node", "gpu", "host_link", "host_memory",
                     "storage", "interconnect", "measured_op_times", "sources"}));
  HardwareOptions hw;
  SSDTRAIN_RETURN_IF_ERROR(root.String("name", &hw.name, true));
  SSDTRAIN_RETURN_IF_ERROR(root.String("description", &hw.description));
  SSDTRAIN_RETURN_IF_ERROR(root.Int("gpus_per_node", &hw.gpus_per_node, 1, true));

  SSDTRAIN_ASSIGN_OR_RETURN(JsonReader gpu, root.Object("gpu", true));
  SSDTRAIN_RETURN_IF_ERROR(ReadGpu(gpu, &hw.gpu));

  SSDTRAIN_ASSIGN_OR_RETURN(JsonReader link, root.Object("host_link", true));
  SSDTRAIN_RETURN_IF_ERROR(
      link.OnlyKeys({"pcie_gen", "lanes", "d2h_GBps", "h2d_GBps", "latency_us"}));
  SSDTRAIN_RETURN_IF_ERROR(link.Int("pcie_gen", &hw.host_link.pcie_gen, 3));
  if (hw.host_link.pcie_gen > 6) return link.Error("pcie_gen", "must be 3, 4, 5 or 6");
  SSDTRAIN_RETURN_IF_ERROR(link.Int("lanes", &hw.host_link.lanes, 1));
  SSDTRAIN_RETURN_IF_ERROR(link.Number("d2h_GBps", &hw.host_link.d2h_GBps, true));
  SSDTRAIN_RETURN_IF_ERROR(link.Number("h2d_GBps", &hw.host_link.h2d_GBps, true));
  SSDTRAIN_RETURN_IF_ERROR(link.Number("latency_us", &hw.host_link.latency_us, false));
  const double derived = PcieGBps(hw.host_link.pcie_gen, hw.host_link.lanes);
  if (hw.host_link.d2h_GBps == 0) hw.host_link.d2h_GBps = derived;
  if (hw.host_link.h2d_GBps == 0) hw.host_link.h2d_GBps = derived;

  SSDTRAIN_ASSIGN_OR_RETURN(JsonReader host, root.Object("host_memory", true));
  SSDTRAIN_RETURN_IF_ERROR(host.OnlyKeys({"GiB", "pinned_GiB", "bandwidth_GBps"}));
  SSDTRAIN_RETURN_IF_ERROR(host.Number("GiB", &hw.host_memory.GiB, true, true));
  SSDTRAIN_RETURN_IF_ERROR(host.Number("pinned_GiB", &hw.host_memory.pinned_GiB, false, true));
  if (hw.host_memory.pinned_GiB > hw.host_memory.GiB) {
    return host.Error("pinned_GiB", "must not exceed GiB");
  }
  SSDTRAIN_RETURN_IF_ERROR(
      host.Number("bandwidth_GBps", &hw.host_memory.bandwidth_GBps, true, true));

  SSDTRAIN_ASSIGN_OR_RETURN(JsonReader st, root.Object("storage", true));
  SSDTRAIN_RETURN_IF_ERROR(
      st.OnlyKeys({"arrays", "gpus_per_array", "drive", "gds", "max_inflight_tensors"}));
  if (!st.Has("arrays") || !st.json().at("arrays").is_array() || st.json().at("arrays").empty()) {
    return st.Error("arrays", "expected a non-empty array of drive counts, one array per GPU");
  }
  for (const nlohmann::json& a : st.json().at("arrays")) {
    if (!a.is_number_integer() || a.get<int64_t>() < 1) {
      return st.Error("arrays", "each entry is a drive count >= 1, got " + a.dump());
    }
    hw.storage.arrays_drives.push_back(a.get<int>());
  }
  SSDTRAIN_RETURN_IF_ERROR(st.Bool("gds", &hw.storage.gds));
  SSDTRAIN_RETURN_IF_ERROR(st.Int("gpus_per_array", &hw.storage.gpus_per_array, 1));
  SSDTRAIN_RETURN_IF_ERROR(st.Int("max_inflight_tensors", &hw.storage.max_inflight_tensors, 1));
  SSDTRAIN_ASSIGN_OR_RETURN(JsonReader dr, st.Object("drive", true));
  DriveOptions& d = hw.storage.drive;
  SSDTRAIN_RETURN_IF_ERROR(dr.OnlyKeys({"model", "read_GBps", "write_GBps", "read_latency_us",
                                        "write_latency_us", "queue_depth", "request_KiB",
                                        "capacity_TB", "endurance_TBW", "dwpd", "warranty_years"}));
  SSDTRAIN_RETURN_IF_ERROR(dr.String("model", &d.model));
  SSDTRAIN_RETURN_IF_ERROR(dr.Number("read_GBps", &d.read_GBps, true, true));
  SSDTRAIN_RETURN_IF_ERROR(dr.Number("write_GBps", &d.write_GBps, true, true));
  SSDTRAIN_RETURN_IF_ERROR(dr.Number("read_latency_us", &d.read_latency_us, false));
  SSDTRAIN_RETURN_IF_ERROR(dr.Number("write_latency_us", &d.write_latency_us, false));
  SSDTRAIN_RETURN_IF_ERROR(dr.Int("queue_depth", &d.queue_depth, 1));
  SSDTRAIN_RETURN_IF_ERROR(dr.Number("request_KiB", &d.request_KiB, true));
  SSDTRAIN_RETURN_IF_ERROR(dr.Number("capacity_TB", &d.capacity_TB, true, true));
  SSDTRAIN_RETURN_IF_ERROR(dr.Number("endurance_TBW", &d.endurance_TBW, false));
  SSDTRAIN_RETURN_IF_ERROR(dr.Number("dwpd", &d.dwpd, false));
  SSDTRAIN_RETURN_IF_ERROR(dr.Number("warranty_years", &d.warranty_years, true));
  if (d.endurance_TBW == 0) d.endurance_TBW = d.dwpd * d.capacity_TB * 365 * d.warranty_years;
  if (d.endurance_TBW == 0) {
    return dr.Error("endurance_TBW", "give endurance_TBW or dwpd (rated endurance is needed)");
  }

  SSDTRAIN_ASSIGN_OR_RETURN(JsonReader ic, root.Object("interconnect", true));
  SSDTRAIN_RETURN_IF_ERROR(ic.OnlyKeys({"tp_GBps", "pp_GBps", "dp_GBps", "latency_us"}));
  SSDTRAIN_RETURN_IF_ERROR(ic.Number("tp_GBps", &hw.interconnect.tp_GBps, true, true));
  SSDTRAIN_RETURN_IF_ERROR(ic.Number("pp_GBps", &hw.interconnect.pp_GBps, true, true));
  SSDTRAIN_RETURN_IF_ERROR(ic.Number("dp_GBps", &hw.interconnect.dp_GBps, true));
  SSDTRAIN_RETURN_IF_ERROR(ic.Number("latency_us", &hw.interconnect.latency_us, false));
  if (hw.interconnect.dp_GBps == 0) hw.interconnect.dp_GBps = hw.interconnect.pp_GBps;

  SSDTRAIN_RETURN_IF_ERROR(ReadMeasured(root, &hw.measured_op_times));
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
  return {
      {"name", hw.name},
      {"description", hw.description},
      {"gpus_per_node", hw.gpus_per_node},
      {"gpu",
       {{"name", hw.gpu.name},
        {"peak_tflops",
         {{"fp16", hw.gpu.peak_tflops_fp16},
          {"bf16", hw.gpu.peak_tflops_bf16},
          {"fp32", hw.gpu.peak_tflops_fp32}}},
        {"clock_scale", hw.gpu.clock_scale},
        {"memory_GBps", hw.gpu.memory_GBps},
        {"memory_GiB", hw.gpu.memory_GiB},
        {"reserved_GiB", hw.gpu.reserved_GiB},
        {"op_overhead_us", hw.gpu.op_overhead_us},
        {"issue_ahead_ops", hw.gpu.issue_ahead_ops},
        {"allocation_alignment_bytes", hw.gpu.allocation_alignment_bytes},
        {"replay_workspace", hw.gpu.replay_workspace},
        {"replay_output_region_bytes", hw.gpu.replay_output_region_bytes},
        {"efficiency", EfficiencyJson(hw.gpu)}}},
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
      {"interconnect",
       {{"tp_GBps", hw.interconnect.tp_GBps},
        {"pp_GBps", hw.interconnect.pp_GBps},
        {"dp_GBps", hw.interconnect.dp_GBps},
        {"latency_us", hw.interconnect.latency_us}}},
      {"measured_op_times", measured},
  };
}

int64_t GpuMemoryBytes(const HardwareOptions& hw) {
  return static_cast<int64_t>((hw.gpu.memory_GiB - hw.gpu.reserved_GiB) * kBytesPerGiB);
}

int64_t HostPinnedBytes(const HardwareOptions& hw) {
  return static_cast<int64_t>(hw.host_memory.pinned_GiB * kBytesPerGiB);
}

ArrayFigures ArrayFor(const HardwareOptions& hw, int gpu) {
  const auto& arrays = hw.storage.arrays_drives;
  const int drives = arrays[static_cast<size_t>(gpu) % arrays.size()];
  const DriveOptions& d = hw.storage.drive;
  const double share = static_cast<double>(drives) / hw.storage.gpus_per_array;
  return ArrayFigures{drives, d.read_GBps * share, d.write_GBps * share, d.endurance_TBW * share};
}

int SlowestArray(const HardwareOptions& hw) {
  const auto& arrays = hw.storage.arrays_drives;
  return static_cast<int>(std::min_element(arrays.begin(), arrays.end()) - arrays.begin());
}

}  // namespace ssdtrain::sim

#include "sim/detail/efficiency_json.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace ssdtrain::sim {
namespace detail {
namespace {

using traces::detail::ObjectReader;
using Sign = ObjectReader::Sign;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// The curve at `name` of `r`: a non-empty array of {<key>, "efficiency"},
// the keys increasing; absent: *out unchanged (an error where `required`).
// `key` "size" (by FLOPs or bytes, a positive number) or "seq_len" (a
// kernel's sequence length, a positive integer).
Status ReadCurve(const ObjectReader& r, const std::string& name, std::vector<EfficiencyPoint>* out,
                 const std::string& key = "size", bool required = false) {
  const std::string expected = "an array of {\"" + key + "\", \"efficiency\"}";
  if (!r.Has(name)) {
    if (required) return r.At(name).Error("missing (expected " + expected + ")");
    r.Skip(name);
    return Status::Ok();
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* arr, r.Value(name));
  if (!arr->is_array() || arr->empty()) return r.At(name).Error("expected a non-empty " + expected);
  out->clear();
  for (size_t i = 0; i < arr->size(); ++i) {
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader p, ObjectReader::Make((*arr)[i], r.At(name).Index(i)));
    EfficiencyPoint point;
    if (key == "seq_len") {
      SSDTRAIN_ASSIGN_OR_RETURN(const int64_t seq, p.IntIn(key, 1, kInt64Max));
      point.size = static_cast<double>(seq);
    } else {
      SSDTRAIN_ASSIGN_OR_RETURN(point.size, p.Number(key, Sign::kPositive));
    }
    SSDTRAIN_ASSIGN_OR_RETURN(point.efficiency, p.Number("efficiency", Sign::kPositive));
    if (point.efficiency > 1) return p.At("efficiency").Error("must be in (0, 1]");
    if (!out->empty() && point.size <= out->back().size) {
      return p.At(key).Error(key + " must increase along the curve");
    }
    SSDTRAIN_RETURN_IF_ERROR(p.CheckNoUnknown());
    out->push_back(point);
  }
  return Status::Ok();
}

// gpu.attention_kernels: {"<name>": {"forward": [{"seq_len", "efficiency"}, ...],
// "forward_causal", "backward", "backward_causal"}}.
Status ReadAttentionKernels(const ObjectReader& r, GpuOptions* g) {
  if (!r.Has("attention_kernels")) {
    r.Skip("attention_kernels");
    return Status::Ok();
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* kernels, r.Value("attention_kernels"));
  if (!kernels->is_object()) return r.At("attention_kernels").Error("expected an object");
  g->attention_kernels.clear();
  for (const auto& [name, value] : kernels->items()) {
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader k,
                              ObjectReader::Make(value, r.At("attention_kernels").Field(name)));
    AttentionKernelCurves c;
    SSDTRAIN_RETURN_IF_ERROR(ReadCurve(k, "forward", &c.forward, "seq_len", /*required=*/true));
    SSDTRAIN_RETURN_IF_ERROR(ReadCurve(k, "forward_causal", &c.forward_causal, "seq_len"));
    SSDTRAIN_RETURN_IF_ERROR(ReadCurve(k, "backward", &c.backward, "seq_len"));
    SSDTRAIN_RETURN_IF_ERROR(ReadCurve(k, "backward_causal", &c.backward_causal, "seq_len"));
    SSDTRAIN_RETURN_IF_ERROR(k.CheckNoUnknown());
    g->attention_kernels[name] = std::move(c);
  }
  return Status::Ok();
}

}  // namespace

Status ReadEfficiency(const ObjectReader& gpu, GpuOptions* g) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader eff, gpu.ObjectOrEmpty("efficiency"));
  SSDTRAIN_RETURN_IF_ERROR(ReadCurve(eff, "gemm", &g->gemm_efficiency));
  SSDTRAIN_RETURN_IF_ERROR(ReadCurve(eff, "gemm_fp8", &g->gemm_fp8_efficiency));
  SSDTRAIN_RETURN_IF_ERROR(ReadCurve(eff, "attention", &g->attention_efficiency));
  SSDTRAIN_RETURN_IF_ERROR(ReadCurve(eff, "memory", &g->memory_efficiency));
  SSDTRAIN_RETURN_IF_ERROR(eff.CheckNoUnknown());
  return ReadAttentionKernels(gpu, g);
}

namespace {

nlohmann::json CurveJson(const std::vector<EfficiencyPoint>& c) {
  nlohmann::json a = nlohmann::json::array();
  for (const EfficiencyPoint& p : c) a.push_back({{"size", p.size}, {"efficiency", p.efficiency}});
  return a;
}

nlohmann::json SeqCurveJson(const std::vector<EfficiencyPoint>& c) {
  nlohmann::json a = nlohmann::json::array();
  for (const EfficiencyPoint& p : c) {
    a.push_back({{"seq_len", static_cast<int64_t>(p.size)}, {"efficiency", p.efficiency}});
  }
  return a;
}

}  // namespace

nlohmann::json AttentionKernelsJson(const GpuOptions& g) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, c] : g.attention_kernels) {
    nlohmann::json k{{"forward", SeqCurveJson(c.forward)}};
    if (!c.forward_causal.empty()) k["forward_causal"] = SeqCurveJson(c.forward_causal);
    if (!c.backward.empty()) k["backward"] = SeqCurveJson(c.backward);
    if (!c.backward_causal.empty()) k["backward_causal"] = SeqCurveJson(c.backward_causal);
    out[name] = k;
  }
  return out;
}

nlohmann::json EfficiencyJson(const GpuOptions& g) {
  nlohmann::json e = nlohmann::json::object();
  if (!g.gemm_efficiency.empty()) e["gemm"] = CurveJson(g.gemm_efficiency);
  if (!g.gemm_fp8_efficiency.empty()) e["gemm_fp8"] = CurveJson(g.gemm_fp8_efficiency);
  if (!g.attention_efficiency.empty()) e["attention"] = CurveJson(g.attention_efficiency);
  if (!g.memory_efficiency.empty()) e["memory"] = CurveJson(g.memory_efficiency);
  return e;
}

}  // namespace detail

Status CheckAttentionKernel(const HardwareOptions& hw, const std::string& kernel) {
  if (kernel.empty() || hw.gpu.attention_kernels.count(kernel) != 0) return Status::Ok();
  std::string known;
  for (const auto& [name, curves] : hw.gpu.attention_kernels) {
    known += (known.empty() ? "" : ", ") + name;
  }
  return Status::FailedPrecondition(
      hw.name + ": gpu.attention_kernels: no curves for the attention kernel \"" + kernel +
      "\" the model names (attention_kernel); " +
      (known.empty() ? std::string("this hardware has none: leave attention_kernel unset")
                     : "it has " + known));
}

}  // namespace ssdtrain::sim

// The hardware config's GPU efficiency: the `efficiency` curves (gemm,
// gemm_fp8, attention by FLOPs; memory by bytes) and the fused attention
// kernels' curves (`attention_kernels`, by sequence length) of sim/hardware.h,
// read with their checks and written back. Internal to sim: HardwareFromJson
// and ToJson call these.
#pragma once

#include <nlohmann/json.hpp>

#include "sim/hardware.h"
#include "traces/detail/json_fields.h"
#include "traces/status.h"

namespace ssdtrain::sim::detail {

// `gpu` is the config's "gpu" object: its "efficiency" and "attention_kernels".
Status ReadEfficiency(const traces::detail::ObjectReader& gpu, GpuOptions* g);
nlohmann::json EfficiencyJson(const GpuOptions& g);
nlohmann::json AttentionKernelsJson(const GpuOptions& g);

}  // namespace ssdtrain::sim::detail

// Traces built from model configs and the shipped hardware presets, for the
// sim tests that price a model's ops (tp overlap, attention kernels).
#pragma once

#include <string>

#include "models/model_config.h"
#include "sim/hardware.h"
#include "traces/trace.h"

namespace ssdtrain::sim::testing {

// configs/hardware/<name>.json of the source tree (a failed test and empty
// options where it does not load).
HardwareOptions LoadPreset(const std::string& name);

// The config's trace (a failed test and an empty trace where it is refused).
traces::Trace BuildModel(const models::ModelConfig& c);

// The op named `name` (a failed test and the first op where there is none).
const traces::Op& OpNamed(const traces::Trace& t, const std::string& name);

}  // namespace ssdtrain::sim::testing

// The hardware config's interconnect object (sim/hardware.h,
// InterconnectOptions): read in its topology form or the older per-dimension
// form (converted, with a note in HardwareOptions::notes), and written in the
// topology form. Internal to sim: HardwareFromJson and ToJson call these.
#pragma once

#include <nlohmann/json.hpp>

#include "sim/hardware.h"
#include "traces/detail/json_fields.h"
#include "traces/status.h"

namespace ssdtrain::sim::detail {

// `ic` is the config's "interconnect" object; hw->gpus_per_node is read already.
Status ReadInterconnect(const traces::detail::ObjectReader& ic, HardwareOptions* hw);
nlohmann::json InterconnectJson(const HardwareOptions& hw);

}  // namespace ssdtrain::sim::detail

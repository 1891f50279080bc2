// What `ssdtrain plan` says about the memory budget and the model config: the
// budget checked against the GPU's usable memory, the text that states the
// budget with every plan, and the config values the search did not use.
#pragma once

#include <cstdint>
#include <string>

#include "sim/hardware.h"
#include "sim/planner.h"
#include "traces/plan.h"
#include "traces/status.h"

namespace ssdtrain::app {

// --memory-budget (GiB; 0: not given) against the GPU's usable memory,
// memory_GiB less reserved_GiB (sim::GpuMemoryBytes): a budget above it is
// refused, naming both and the hardware config `hw_path`.
Status CheckMemoryBudget(double budget_GiB, const sim::HardwareOptions& hw,
                         const std::string& hw_path);

// "budget 76.00 GiB per GPU (the usable memory: memory_GiB 80 less reserved_GiB
// 4)", or with `given` "budget 60.00 GiB per GPU (--memory-budget; usable 76.00 GiB)".
std::string BudgetText(int64_t budget_bytes, bool given, const sim::HardwareOptions& hw);

// The layout a model config states (configs/models/*.json: micro_batch, tp,
// pp, dp, zero_stage); the search chooses these itself unless a flag pins them.
struct ConfigLayout {
  std::string path;
  int64_t micro_batch = 1, tp = 1, pp = 1, dp = 1, zero_stage = 0;
  int64_t ep = 1;
};

// One line naming each config value that the search overrode (micro_batch,
// tp, pp; dp and zero_stage where the config's zero_stage is 1; ep where the
// config or the plan spreads experts), with the
// flags that would pin them; a value a flag pinned is the user's, not named.
// "" when the plan uses every one.
std::string OverriddenConfigNote(const ConfigLayout& config, const traces::Plan& plan,
                                 const sim::PlannerOptions& pins);

}  // namespace ssdtrain::app

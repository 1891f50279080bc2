#include "app/plan_budget.h"

#include <fmt/format.h>

#include <vector>

namespace ssdtrain::app {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

Status CheckMemoryBudget(double budget_GiB, const sim::HardwareOptions& hw,
                         const std::string& hw_path) {
  const int64_t usable = sim::GpuMemoryBytes(hw);
  if (static_cast<int64_t>(budget_GiB * kGiB) <= usable) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "--memory-budget {:g} GiB: above the usable memory of {}'s GPU, {:.2f} GiB (gpu.memory_GiB "
      "{:g} less gpu.reserved_GiB {:g} in {}); leave --memory-budget out to plan for all of it",
      budget_GiB, hw.name, static_cast<double>(usable) / kGiB, hw.gpu.memory_GiB,
      hw.gpu.reserved_GiB, hw_path));
}

std::string BudgetText(int64_t budget_bytes, bool given, const sim::HardwareOptions& hw) {
  const double budget = static_cast<double>(budget_bytes) / kGiB;
  if (given) {
    return fmt::format("budget {:.2f} GiB per GPU (--memory-budget; usable {:.2f} GiB)", budget,
                       static_cast<double>(sim::GpuMemoryBytes(hw)) / kGiB);
  }
  return fmt::format(
      "budget {:.2f} GiB per GPU (the usable memory: gpu.memory_GiB {:g} less "
      "gpu.reserved_GiB {:g})",
      budget, hw.gpu.memory_GiB, hw.gpu.reserved_GiB);
}

std::string OverriddenConfigNote(const ConfigLayout& config, const traces::Plan& plan,
                                 const sim::PlannerOptions& pins) {
  struct Field {
    const char* name;
    int64_t config, plan;
    const char* flag;
    bool pinned;
  };
  std::vector<Field> fields{{"micro_batch", config.micro_batch, plan.micro_batch, "--micro-batch",
                             pins.micro_batch.has_value()},
                            {"tp", config.tp, plan.tp, "--tp", pins.tp.has_value()},
                            {"pp", config.pp, plan.pp, "--pp", pins.pp.has_value()}};
  // dp sizes the sharded state only where the config shards it (zero_stage 1 to 3).
  if (config.zero_stage >= 1) {
    fields.push_back({"dp", config.dp, plan.dp, "--dp", pins.dp.has_value()});
    fields.push_back({"zero_stage", config.zero_stage, plan.zero_stage, "--zero-stage",
                      pins.zero_stage.has_value()});
  }
  if (config.ep != 1 || plan.ep != 1) {
    fields.push_back({"ep", config.ep, plan.ep, "--ep", pins.ep.has_value()});
  }
  std::string stated, chosen, flags;
  for (const Field& f : fields) {
    if (f.pinned || f.config == f.plan) continue;
    const std::string sep = stated.empty() ? "" : ", ";
    stated += fmt::format("{}{} {}", sep, f.name, f.config);
    chosen += fmt::format("{}{} {}", sep, f.name, f.plan);
    flags += sep + f.flag;
  }
  if (stated.empty()) return "";
  const bool one = flags.find(',') == std::string::npos;
  return fmt::format("note: the search chose {} over {}'s {} ({} {})\n", chosen, config.path,
                     stated, flags, one ? "pins it" : "pin them");
}

}  // namespace ssdtrain::app

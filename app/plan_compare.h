// `ssdtrain plan --compare`: every policy at its best layout and one global
// batch, side by side, and a verdict in words on SSD offload.
//
// Each policy is one sim::SearchPlan (the planner's own search, pinned to the
// policy and to the global batch), so each row is the plan `plan --policy P
// --global-batch G` returns. A row's saved activations are against keep at
// the row's own layout (the same search, pinned to that layout and keep).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "sim/hardware.h"
#include "sim/planner.h"
#include "traces/status.h"

namespace ssdtrain::app {

// --compare's global batch when --global-batch is not given: sequences per GPU
// (64 on 8 GPUs, 512 on 64), one value for every policy so their tokens/s
// compare; it divides by every micro-batch up to 8 at every dp.
inline constexpr int64_t kCompareSequencesPerGpu = 8;
// The default's sequences per GPU: kCompareSequencesPerGpu, or its least common
// multiple with a pinned micro-batch (a trace's own: 16 gives 16 per GPU).
int64_t CompareSequencesPerGpu(const sim::PlannerOptions& options);

// The policies --compare runs, in its table's order (offload-host left out
// without host offload; recompute-sac only on blocks with separate projections).
std::vector<std::string> ComparedPolicies(bool allow_host_offload, bool separate_projections);

struct ComparedPolicy {
  std::string policy;
  sim::PlannerResult result;  // SearchPlan's: fits, plan, prediction
  // Keep's activation peak at this row's layout (worst stage); -1 where
  // nothing was simulated (the weights alone are over the budget).
  int64_t keep_activation_bytes = -1;
  double search_seconds = 0;
};

struct PolicyComparison {
  std::string model, hardware;
  int64_t gpus = 0;
  int64_t global_batch = 0;
  bool global_batch_default = false;  // CompareSequencesPerGpu · gpus
  int64_t budget_bytes = 0;
  bool budget_given = false;
  std::vector<ComparedPolicy> rows;  // ComparedPolicies order
  // The row `plan` returns: the fastest that fits, else the lowest peak.
  size_t chosen = 0;
};

// --policy (other than auto) and --json against --compare: a policy is
// refused with it, and --json without it.
Status CheckCompareFlags(bool compare, const std::string& policy, const std::string& json_path);

// The global batch --compare uses (above): --global-batch, else micro-batch ·
// m · dp when all three are pinned, else CompareSequencesPerGpu · gpus; m
// pinned alone is refused (each policy's dp and micro-batch would change it).
Result<int64_t> CompareGlobalBatch(const sim::PlannerOptions& options);

// Runs every policy's search under `options` (pins, budget; its policy and
// global batch are set here), `progress` getting one line per policy.
Result<PolicyComparison> ComparePolicies(const sim::TraceProvider& provider,
                                         const sim::HardwareOptions& hw,
                                         sim::PlannerOptions options,
                                         const std::function<void(const std::string&)>& progress);

// `plan --compare`: ComparePolicies with progress on stderr, the table and the
// verdict on `out`, the JSON in `*json` (unless null; `plan` writes it with its
// other outputs, all or none); returns the chosen
// row's result (with its timeline when options.record_timeline), which `plan`
// then writes and prints as it does any plan.
Result<sim::PlannerResult> CompareAndChoose(const std::string& model,
                                            const sim::TraceProvider& provider,
                                            const sim::HardwareOptions& hw,
                                            const sim::PlannerOptions& options,
                                            nlohmann::json* json, std::ostream& out);

std::string ComparisonTable(const PolicyComparison& c, const sim::HardwareOptions& hw);
// "Verdict: ..." in words, one paragraph (no newline).
std::string Verdict(const PolicyComparison& c);
// The table and the verdict as JSON (--json): "format"
// "ssdtrain-policy-comparison", the global batch, budget and usable memory
// (bytes), one object per policy (its layout, step metrics, worst stage, keep's
// activation peak at its layout, SSD rates), "chosen" and "verdict".
// analysis/plots.py rok draws its points.
nlohmann::json ComparisonJson(const PolicyComparison& c, const sim::HardwareOptions& hw);

}  // namespace ssdtrain::app

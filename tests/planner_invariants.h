// The planner's invariants at the scale it is for (issue: the planner keeps
// its promise at cluster scale), checked on one model config, one hardware
// config and one GPU count under the given policies:
// - every plan returned fits the budget on every stage, and each returned
//   stage plan's peak is the one a replay of its unrolled step holds
//   (traces::WholeStepStaticPeaks of that stage's plan; never above the
//   prediction, equal without recompute, whose scratch buffers only the
//   simulation counts);
// - each op a stage's plan recomputes runs once in a micro-batch
//   (sim::Prediction::StagePeak::max_op_reruns);
// - a search that returns no fitting plan says so (fits = false: `plan`
//   exits 1 with the smallest need);
// - auto is at least as fast as every fixed policy whose plan fits;
// - no search errs (but for "no layout": nothing divides the GPUs, layers and
//   batch) or takes more than `max_seconds` of CPU time (all its threads: a
//   figure other load on the machine barely moves, unlike the wall time, which
//   each line prints too; idle, a search's wall time is at most its CPU time).
// Used by tests/planner_invariants_test.cc (a subset in the suite) and
// tests/planner_sweep_main.cc (scripts/planner-sweep.sh: the whole sweep).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/model_provider.h"
#include "models/model_config.h"
#include "sim/planner.h"

namespace ssdtrain::testing {

// The planner's traces from a model config, as `ssdtrain plan --model` builds
// them (app/model_provider.h).
using app::ModelTraceProvider;

struct SweepCase {
  std::string model;     // a model config path
  std::string hardware;  // a hardware config path
  int64_t gpus = 8;
  std::vector<std::string> policies;  // "auto" among them checks auto against the others
  double max_seconds = 10;
  // The model's zero_defer_grad_sync (plan --defer-grad-sync): at ZeRO 2 and
  // 3 the gradients reduce-scattered once a step.
  bool defer_grad_sync = false;
  // FP8 training under this recipe (plan --fp8; "" none): an fp32 model is
  // trained in bf16 for it, and a GPU without FP8 skips the case.
  std::string fp8;
};

struct SweepOutcome {
  std::vector<std::string> violations;  // one line each, naming the case
  std::vector<std::string> lines;       // one summary line per policy
};

SweepOutcome CheckPlannerInvariants(const SweepCase& c);

// Every policy the planner takes: the fixed ones, optimal, auto.
std::vector<std::string> AllPlannerPolicies();

}  // namespace ssdtrain::testing

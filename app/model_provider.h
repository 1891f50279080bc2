// The planner's traces of a model config: sim::TraceShape (the layout the
// search asks for) onto the config's overrides, in one place for `plan`, the
// benchmarks, the planner's invariant tests and a replay of a plan.
#pragma once

#include <string>

#include "models/model_config.h"
#include "sim/planner.h"

namespace ssdtrain::app {

// The config overrides that build a trace of `s`: micro-batch, tp, pp, dp,
// ZeRO stage, and ep where not 1 (a dense config refuses any ep).
models::ConfigOverrides OverridesOf(const sim::TraceShape& s);

// The overrides that build the trace a plan was made for from `config` (the
// model config the plan is applied to): its layout as OverridesOf maps it
// (sim::TraceShape::Of), and what else the plan records of the run: the
// sequence, the attention kernel, sequence parallelism, deferred gradient
// sync, and its FP8 recipe (none where the config names one the plan did not
// use).
models::ConfigOverrides PlanOverrides(const traces::Plan& plan, const models::ModelConfig& config);

// Stage s.stage's trace of `base` at `s`; `path` names the config in messages.
sim::TraceProvider ModelTraceProvider(models::ModelConfig base, std::string path);

// What the search needs to know of the model to enumerate its layouts: its
// layers and heads (pp and tp divide them), its routed experts (ep), its
// sequence, sequence parallelism and whether it can run context-parallel (cp).
void SetModelOptions(const models::ModelConfig& c, sim::PlannerOptions* po);

}  // namespace ssdtrain::app

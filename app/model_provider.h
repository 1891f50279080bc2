// The planner's traces of a model config: sim::TraceShape (the layout the
// search asks for) onto the config's overrides, in one place for `plan`, the
// benchmarks and the planner's invariant tests.
#pragma once

#include <string>

#include "models/model_config.h"
#include "sim/planner.h"

namespace ssdtrain::app {

// The config overrides that build a trace of `s`: micro-batch, tp, pp, dp,
// ZeRO stage, and ep where not 1 (a dense config refuses any ep).
models::ConfigOverrides OverridesOf(const sim::TraceShape& s);

// Stage s.stage's trace of `base` at `s`; `path` names the config in messages.
sim::TraceProvider ModelTraceProvider(models::ModelConfig base, std::string path);

// What the search needs to know of the model to enumerate its layouts: its
// layers and heads (pp and tp divide them), its routed experts (ep), its
// sequence, sequence parallelism and whether it can run context-parallel (cp).
void SetModelOptions(const models::ModelConfig& c, sim::PlannerOptions* po);

}  // namespace ssdtrain::app

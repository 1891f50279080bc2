// A whole step's timeline with every op and transfer: each stage's one
// micro-batch, as SimulateStage recorded it, placed at every one of its
// pipeline tasks. The pipeline's forward/backward spans stay, and nest these.
#pragma once

#include <cstdint>

#include "sim/pipeline.h"
#include "sim/stage_sim.h"
#include "traces/timeline.h"

namespace ssdtrain::sim {

// Adds to `timeline` the spans of `run` (stage `stage`'s micro-batch, simulated
// alone with its timeline recorded from time 0) once per micro-batch of the
// stage in `pipe`: a span that starts in the forward pass (before
// run.forward_end_ns) moves with the micro-batch's forward task, any other
// with its backward task, so that compute spans nest in the task's span and
// each I/O span keeps its distance from the ops that issued it. Spans of the
// optimizer phase (the last run.optimizer_ns of run.step_ns) are left out: the
// step runs the optimizer once, after the pipeline, as its "optimizer" span.
// Each added span is marked with `stage` and its micro-batch.
void AddStageSpans(traces::Timeline& timeline, const PipelineResult& pipe, int64_t stage,
                   const StageResult& run);

}  // namespace ssdtrain::sim

#include "sim/step_timeline.h"

namespace ssdtrain::sim {

void AddStageSpans(traces::Timeline& timeline, const PipelineResult& pipe, int64_t stage,
                   const StageResult& run) {
  const int64_t optimizer_start =
      run.optimizer_ns > 0 ? run.step_ns - run.optimizer_ns : run.step_ns + 1;
  for (const PipelineTask& task : pipe.tasks) {
    if (task.stage != stage) continue;
    const bool forward = task.kind == PipelineTask::Kind::kForward;
    if (!forward && task.kind != PipelineTask::Kind::kBackward) continue;
    // The run's time at which this task's part of the micro-batch begins.
    const int64_t part_start = forward ? 0 : run.forward_end_ns;
    for (const traces::Span& s : run.timeline.spans) {
      if (s.start_ns >= optimizer_start) continue;
      if ((s.start_ns < run.forward_end_ns) != forward) continue;
      traces::Span placed = s;
      placed.start_ns = s.start_ns - part_start + task.start_ns;
      placed.end_ns = s.end_ns - part_start + task.start_ns;
      placed.stage = static_cast<int>(stage);
      placed.micro_batch = static_cast<int>(task.micro_batch);
      timeline.spans.push_back(std::move(placed));
    }
  }
}

}  // namespace ssdtrain::sim

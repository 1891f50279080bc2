#include "sim/detail/interleaved_peaks.h"

#include <algorithm>
#include <optional>

#include "traces/chunks.h"
#include "traces/step_peaks.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim::detail {

Status InterleavedPeaks(const StageInput& in, int64_t stage, const StageResult& r,
                        const traces::Plan& layout, const HardwareOptions& hw,
                        Prediction::StagePeak* peak) {
  const int64_t v = layout.virtual_stages;
  if (traces::ChunkOfOps(*in.trace, v).empty()) return Status::Ok();
  const int64_t alignment = std::max<int64_t>(1, hw.gpu.allocation_alignment_bytes);
  SSDTRAIN_ASSIGN_OR_RETURN(const traces::StoragePlan one,
                            traces::ResolvePlan(*in.trace, *in.plan, "plan"));
  const traces::StaticPeaks alone = traces::ComputeStaticPeaks(*in.trace, one, alignment);
  traces::Plan step = *in.plan;
  step.pp = layout.pp;
  step.num_micro_batches = layout.num_micro_batches;
  step.schedule = layout.schedule;
  step.virtual_stages = v;
  std::optional<traces::Trace> standing_in;
  if (in.trace->header.stage != stage) {
    standing_in = *in.trace;
    standing_in->header.stage = stage;
  }
  SSDTRAIN_ASSIGN_OR_RETURN(
      const traces::StaticPeaks whole,
      traces::UnrolledStaticPeaks(standing_in ? *standing_in : *in.trace, step, alignment));
  peak->peak_gpu_bytes = r.peak_gpu_bytes - alone.device_bytes + whole.device_bytes;
  peak->peak_activation_bytes =
      r.peak_activation_bytes - alone.activation_bytes + whole.activation_bytes;
  return Status::Ok();
}

}  // namespace ssdtrain::sim::detail

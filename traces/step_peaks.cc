#include "traces/step_peaks.h"

#include "traces/whole_step.h"

namespace ssdtrain::traces {

Result<StaticPeaks> UnrolledStaticPeaks(const Trace& trace, const Plan& plan, int64_t alignment) {
  SSDTRAIN_ASSIGN_OR_RETURN(const WholeStep whole, UnrollStep(trace, plan, "plan"));
  SSDTRAIN_ASSIGN_OR_RETURN(const StoragePlan resolved,
                            ResolvePlan(whole.trace, whole.plan, "plan"));
  return ComputeStaticPeaks(whole.trace, resolved, alignment);
}

}  // namespace ssdtrain::traces

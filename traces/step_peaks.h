// The static peaks (traces::ComputeStaticPeaks) of a stage's whole step, as
// the replay holds them: the stage's one-micro-batch trace and plan unrolled
// (traces::UnrollStep) and the plan resolved on the result. The simulator uses
// it for an interleaved stage, whose chunks hold unequal parts of a
// micro-batch (each chunk boundary a copy of its own: traces/chunks.h), where
// the 1F1B closed form (traces::WholeStepStaticPeaks) does not hold.
#pragma once

#include <cstdint>

#include "traces/plan.h"
#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

// `plan` applies to `trace` and names the step (num_micro_batches, schedule,
// virtual_stages); storages rounded to `alignment`. Errors are UnrollStep's
// and ResolvePlan's, naming "plan".
Result<StaticPeaks> UnrolledStaticPeaks(const Trace& trace, const Plan& plan, int64_t alignment);

}  // namespace ssdtrain::traces

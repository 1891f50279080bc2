// The report `ssdtrain replay` writes for a run on several ranks: rank 0's,
// folded with every rank's (app/replay_report.cc).
#pragma once

#include "app/mpi_sync.h"
#include "traces/plan.h"
#include "traces/report.h"
#include "traces/status.h"

namespace ssdtrain::app {

// Rank 0's whole-step report: rank 0's own, with the slowest rank's step time,
// the largest peaks, the tokens of every data-parallel replica, and each
// rank's figures (its place in the layout, peaks, pipeline and collective
// traffic).
// Collective over the ranks: every rank calls it; ranks other than 0 get their
// own report back.
Result<traces::StepReport> WholeStepReport(traces::StepReport mine, const traces::Plan& plan,
                                           RankSync& ranks);

}  // namespace ssdtrain::app

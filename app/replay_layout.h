// Whether `ssdtrain replay` can run a plan's layout where it was started: on
// mpirun's ranks (CheckRanks: one rank per GPU of the layout) or in one
// process (CheckOneProcess: a layout of one rank), naming the plan and the
// command that runs it.
#pragma once

#include <string>

#include "app/mpi_sync.h"
#include "traces/plan.h"
#include "traces/status.h"

namespace ssdtrain::app {

// N ranks run a plan of tp × cp × pp × dp = N.
Status CheckRanks(const traces::Plan& plan, const std::string& source, const RankSync& ranks);
// One process (no mpirun) runs a plan of one rank.
Status CheckOneProcess(const traces::Plan& plan, const std::string& source);

}  // namespace ssdtrain::app

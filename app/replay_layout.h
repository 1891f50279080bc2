// Whether `ssdtrain replay` can run a plan's layout where it was started:
// on mpirun's ranks (CheckRanks) or in one process (CheckOneProcess). Both
// refuse what the replay does not run yet (a context-parallel plan, ZeRO-2/3
// over a shard group on ranks), naming the plan and what to plan instead.
#pragma once

#include <string>

#include "app/mpi_sync.h"
#include "traces/plan.h"
#include "traces/status.h"

namespace ssdtrain::app {

// A context-parallel plan (cp > 1) does not replay yet, on ranks or alone.
Status CheckNoContextParallel(const traces::Plan& plan, const std::string& source);
// N ranks run a plan of tp × cp × pp × dp = N.
Status CheckRanks(const traces::Plan& plan, const std::string& source, const RankSync& ranks);
// One process (no mpirun) runs a plan of one rank.
Status CheckOneProcess(const traces::Plan& plan, const std::string& source);

}  // namespace ssdtrain::app

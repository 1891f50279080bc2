// The data-parallel ranks of `mpirun -np N ssdtrain replay`: exec::StepSync on
// MPI (Open MPI from Debian). Built when CMake finds MPI (SSDTRAIN_MPI); a
// build without it refuses to run under mpirun, saying so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "exec/step_sync.h"
#include "traces/status.h"

namespace ssdtrain::app {

class RankSync : public exec::StepSync {
 public:
  // Everything on this rank's strings gathered at rank 0 (empty elsewhere),
  // in rank order.
  virtual Result<std::vector<std::string>> GatherAtRankZero(const std::string& mine) = 0;
};

// True when this process was started by mpirun with more than one rank.
bool LaunchedAsRanks();
// MPI_Init (funneled: only the thread that calls this talks to MPI); MPI_Finalize
// when the object goes.
Result<std::unique_ptr<RankSync>> StartRanks();

}  // namespace ssdtrain::app

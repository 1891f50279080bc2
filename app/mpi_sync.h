// The ranks of `mpirun -np N ssdtrain replay` (N = tp × pp × dp): exec::StepSync on
// MPI (Open MPI from Debian). Built when CMake finds MPI (SSDTRAIN_MPI); a
// build without it refuses to run under mpirun, saying so.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "exec/step_sync.h"
#include "traces/layout.h"
#include "traces/status.h"

namespace ssdtrain::app {

class RankSync : public exec::StepSync {
 public:
  // Everything on this rank's strings gathered at rank 0 (empty elsewhere),
  // in rank order.
  virtual Result<std::vector<std::string>> GatherAtRankZero(const std::string& mine) = 0;
  // The layout (traces/layout.h): this rank's gradient group (the layout's
  // DenseGradientGroup), over which AllReduceSum and AllReduceSumAsync (on a
  // duplicate of the group's communicator) sum from now on, and at ep > 1 its
  // routed experts' gradient group (Layout::ExpertGradientGroup), over which
  // AllReduceSumAsync sums with SumGroup::kExpertDataParallel. Collective:
  // every rank calls it, with the same layout.
  virtual Status SplitStages(const traces::Layout& layout) = 0;
};

// True when this process was started by mpirun with more than one rank.
bool LaunchedAsRanks();
// MPI_Init (funneled: only the thread that calls this talks to MPI); when the
// object goes, every rank receives the messages a failure left unreceived and
// completes its sends (collective), then MPI_Finalize.
Result<std::unique_ptr<RankSync>> StartRanks();
// StartRanks when LaunchedAsRanks, else nullptr (one process).
Result<std::unique_ptr<RankSync>> StartRanksIfLaunched();
// This rank's own folder under --dir, `dir/rank-<rank>`, where a verb under
// mpirun (replay, calibrate) keeps its files; created if missing. `*made`:
// whether this call created it (then the caller removes it when done).
Result<std::string> MakeRankDir(const std::string& dir, int rank, bool* made);

}  // namespace ssdtrain::app

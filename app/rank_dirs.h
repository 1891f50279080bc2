// A verb's offload directories on this rank: its drive set of the --dir list
// (traces/drives.h: GPU slot g uses array g % arrays), and under mpirun each
// one's folder of its own, `dir/rank-<r>` (MakeRankDir). `replay` and
// `calibrate` both take them from here.
#pragma once

#include <string>
#include <vector>

#include "app/mpi_sync.h"
#include "traces/drives.h"
#include "traces/status.h"

namespace ssdtrain::app {

// The GPU slot of this process on its node: Open MPI's local rank under
// mpirun, else the rank; 0 without ranks.
int LocalGpuSlot(const RankSync* ranks);

struct RankDirs {
  std::vector<std::string> dirs;  // this rank's directories, in drive order
  std::vector<std::string> made;  // the rank folders made here (RemoveMade removes them)
  // Removes the made folders (empty by then: their files went with the work).
  void RemoveMade() const;
};

// This rank's directories of `given` under `layout` (no arrays: all of them);
// with `ranks`, a folder of its own in each. An error names --dir and what the
// layout expected; folders made before a failure are removed.
Result<RankDirs> MakeRankDirs(const traces::DriveLayout& layout,
                              const std::vector<std::string>& given, const RankSync* ranks);

}  // namespace ssdtrain::app

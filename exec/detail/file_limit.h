// The open-file limit a replay needs (issue 31 item 3): every micro-batch of a
// step writes its own offload files (traces::UnrollStep), and the engine keeps
// each open until the step ends, so a step of m micro-batches holds m times one
// micro-batch's files. A replay checks the limit before any file exists and
// raises the soft limit up to the hard one where that suffices (as a process
// that opens many files does); otherwise it is refused with both figures.
// Internal to exec.
#pragma once

#include <cstdint>
#include <string>

#include "traces/plan.h"
#include "traces/status.h"

namespace ssdtrain::exec::detail {

// Distinct offload files a plan's placements name (a placement without a file
// gets its storage's own: traces::OffloadFileName), per SSD directory.
int64_t OffloadFilesOf(const traces::Plan& plan);

// Descriptors kept free beside the offload files and those already open:
// directories, io_uring, staging and the MPI transport.
inline constexpr int64_t kReservedDescriptors = 64;

// Makes room for `files` more open files: the soft RLIMIT_NOFILE is raised
// (up to the hard limit) to the descriptors open now plus `files` plus
// kReservedDescriptors. ResourceExhausted naming `source`, both limits and the
// count when the hard limit is too low.
Status EnsureOpenFileLimit(int64_t files, const std::string& source);

}  // namespace ssdtrain::exec::detail

#include "exec/detail/file_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <utility>

#include "traces/storage_plan.h"

namespace ssdtrain::exec::detail {
namespace {

// Entries of /proc/self/fd (less the one the listing itself opens); the
// reserve alone where /proc is not mounted.
int64_t OpenDescriptors() {
  std::error_code ec;
  int64_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return ec ? 0 : std::max<int64_t>(0, n - 1);
}

}  // namespace

int64_t OffloadFilesOf(const traces::Plan& plan) {
  std::set<std::pair<int, std::string>> files;
  for (const traces::Placement& p : plan.placements) {
    if (p.action != traces::TensorAction::kOffloadSsd) continue;
    files.emplace(p.device, p.file.empty() ? traces::OffloadFileName(p.tensor) : p.file);
  }
  return static_cast<int64_t>(files.size());
}

Status EnsureOpenFileLimit(int64_t files, const std::string& source) {
  if (files == 0) return Status::Ok();
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return Status::Ok();  // nothing to go by
  const auto want = static_cast<rlim_t>(OpenDescriptors() + files + kReservedDescriptors);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur >= want) return Status::Ok();
  if (limit.rlim_cur == RLIM_INFINITY) return Status::Ok();
  if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= want) {
    rlimit raised = limit;
    raised.rlim_cur = want;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return Status::Ok();
  }
  return Status::ResourceExhausted(
      source + ": the step keeps " + std::to_string(files) +
      " offload files open until it ends (every micro-batch writes its own), but the open-file "
      "limit is " +
      std::to_string(limit.rlim_cur) + " (hard " +
      (limit.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                       : std::to_string(limit.rlim_max)) +
      ") and " + std::to_string(want) +
      " are needed; raise it (ulimit -n) or plan fewer micro-batches");
}

}  // namespace ssdtrain::exec::detail

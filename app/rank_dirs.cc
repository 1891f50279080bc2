#include "app/rank_dirs.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace ssdtrain::app {

int LocalGpuSlot(const RankSync* ranks) {
  if (ranks == nullptr) return 0;
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK"); local != nullptr) {
    return std::atoi(local);
  }
  return ranks->rank();
}

void RankDirs::RemoveMade() const {
  for (const std::string& d : made) {
    std::error_code ec;  // empty unless the work failed to clean up, which it reported
    std::filesystem::remove(d, ec);
  }
}

Result<RankDirs> MakeRankDirs(const traces::DriveLayout& layout,
                              const std::vector<std::string>& given, const RankSync* ranks) {
  const Result<traces::DriveSet> set =
      traces::DriveSetOf(layout, LocalGpuSlot(ranks), static_cast<int>(given.size()));
  if (!set.ok()) return set.status().WithPrefix("--dir");
  RankDirs out;
  out.dirs.assign(given.begin() + set->first, given.begin() + set->first + set->count);
  if (ranks == nullptr) return out;
  for (std::string& dir : out.dirs) {
    bool made = false;
    Result<std::string> mine = MakeRankDir(dir, ranks->rank(), &made);
    if (!mine.ok()) {
      out.RemoveMade();
      return mine.status();
    }
    dir = *mine;
    if (made) out.made.push_back(dir);
  }
  return out;
}

}  // namespace ssdtrain::app

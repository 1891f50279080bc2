#include "traces/drives.h"

#include <map>
#include <numeric>

#include "traces/plan.h"

namespace ssdtrain::traces {

int64_t StripeBytes(const DriveLayout& layout) {
  return layout.stripe_bytes > 0 ? layout.stripe_bytes : kDefaultStripeBytes;
}

Status ValidateDriveLayout(const DriveLayout& layout, const std::string& where) {
  if (layout.stripe_bytes < 0 || layout.stripe_bytes % kStripeAlign != 0) {
    return Status::InvalidArgument(where + ".stripe_bytes: expected a positive multiple of " +
                                   std::to_string(kStripeAlign) +
                                   " (or 0: " + std::to_string(kDefaultStripeBytes) + "), got " +
                                   std::to_string(layout.stripe_bytes));
  }
  for (size_t a = 0; a < layout.arrays.size(); ++a) {
    if (layout.arrays[a] < 1 || layout.arrays[a] > kMaxArrayDrives) {
      return Status::InvalidArgument(where + ".arrays[" + std::to_string(a) + "]: expected 1 to " +
                                     std::to_string(kMaxArrayDrives) + " drives, got " +
                                     std::to_string(layout.arrays[a]));
    }
  }
  return Status::Ok();
}

Result<DriveSet> DriveSetOf(const DriveLayout& layout, int gpu, int drives) {
  if (drives < 1) return Status::InvalidArgument("no offload drive given");
  if (layout.arrays.empty()) return DriveSet{0, drives};
  const int total = std::accumulate(layout.arrays.begin(), layout.arrays.end(), 0);
  if (total != drives) {
    return Status::InvalidArgument(
        "the plan's storage has " + std::to_string(total) + " drive" + (total == 1 ? "" : "s") +
        " in " + std::to_string(layout.arrays.size()) + " array" +
        (layout.arrays.size() == 1 ? "" : "s") + ", but " + std::to_string(drives) +
        " offload director" + (drives == 1 ? "y was" : "ies were") +
        " given; give one directory per drive, in order (directories on one disk can stand in "
        "for drives this machine lacks)");
  }
  const size_t array = static_cast<size_t>(gpu < 0 ? 0 : gpu) % layout.arrays.size();
  DriveSet set;
  set.first = std::accumulate(layout.arrays.begin(),
                              layout.arrays.begin() + static_cast<std::ptrdiff_t>(array), 0);
  set.count = layout.arrays[array];
  return set;
}

int64_t StripedBytes(int64_t bytes, int64_t stripe_bytes, int drives, int device, int drive) {
  if (bytes <= 0 || drives < 1 || stripe_bytes <= 0) return 0;
  const int64_t n = drives;
  const int64_t first = (device < 0 ? 0 : device) % n;
  // The drive's position in the round starting at `first`.
  const int64_t k = ((drive - first) % n + n) % n;
  const int64_t stripes = (bytes + stripe_bytes - 1) / stripe_bytes;
  if (k >= stripes) return 0;
  // Stripes k, k + n, k + 2n, ... below `stripes`; only the last stripe of
  // the tensor is short.
  const int64_t mine = (stripes - 1 - k) / n + 1;
  const int64_t last = stripes - 1;
  const int64_t tail = bytes - last * stripe_bytes;
  const bool has_last = (last - k) % n == 0;
  return has_last ? (mine - 1) * stripe_bytes + tail : mine * stripe_bytes;
}

std::vector<int64_t> StripedBytesPerDrive(int64_t bytes, int64_t stripe_bytes, int drives,
                                          int device) {
  std::vector<int64_t> out(static_cast<size_t>(drives < 1 ? 0 : drives));
  for (int d = 0; d < drives; ++d) {
    out[static_cast<size_t>(d)] = StripedBytes(bytes, stripe_bytes, drives, device, d);
  }
  return out;
}

void SpreadOverDrives(const Trace& trace, Plan* plan, int drives) {
  if (drives < 1) return;
  std::map<TensorId, int> first;  // storage -> its device
  int next = 0;
  for (Placement& p : plan->placements) {
    if (p.action != TensorAction::kOffloadSsd) continue;
    auto [it, added] = first.emplace(trace.StorageOf(p.tensor), next);
    if (added) next = (next + 1) % drives;
    p.device = it->second;
  }
}

}  // namespace ssdtrain::traces

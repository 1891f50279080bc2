// A node's drives as the simulator and a plan see them (sim/hardware.h): each
// GPU's array and its figures, the slowest array, and the drive layout a plan
// records (arrays, stripe, the storage path: traces/drives.h).
#include <algorithm>
#include <cmath>

#include "sim/hardware.h"

namespace ssdtrain::sim {

ArrayFigures ArrayFor(const HardwareOptions& hw, int gpu) {
  const auto& arrays = hw.storage.arrays_drives;
  const int drives = arrays[static_cast<size_t>(gpu) % arrays.size()];
  const DriveOptions& d = hw.storage.drive;
  const double share = static_cast<double>(drives) / hw.storage.gpus_per_array;
  // Little's law caps the array at drives · queue_depth · request / latency:
  // the engine keeps queue_depth requests of request_KiB in flight per drive.
  auto capped = [&](double GBps, double latency_us) {
    if (latency_us <= 0) return GBps;
    const double little_GBps =
        drives * d.queue_depth * d.request_KiB * 1024.0 / (latency_us * 1e-6) / 1e9;
    return std::min(GBps, little_GBps);
  };
  return ArrayFigures{drives, capped(d.read_GBps * share, d.read_latency_us),
                      capped(d.write_GBps * share, d.write_latency_us), d.endurance_TBW * share,
                      d.capacity_TB * share};
}

int SlowestArray(const HardwareOptions& hw) {
  const auto& arrays = hw.storage.arrays_drives;
  return static_cast<int>(std::min_element(arrays.begin(), arrays.end()) - arrays.begin());
}

traces::DriveLayout DriveLayoutOf(const HardwareOptions& hw) {
  traces::DriveLayout layout;
  layout.arrays = hw.storage.arrays_drives;
  layout.gds = hw.storage.gds;
  const auto request = static_cast<int64_t>(std::ceil(hw.storage.drive.request_KiB * 1024.0));
  layout.stripe_bytes =
      std::max<int64_t>(traces::kStripeAlign, (request + traces::kStripeAlign - 1) /
                                                  traces::kStripeAlign * traces::kStripeAlign);
  return layout;
}

int64_t StripeBytesFor(const traces::Plan& plan, const HardwareOptions& hw) {
  return plan.storage.stripe_bytes > 0 ? plan.storage.stripe_bytes : DriveLayoutOf(hw).stripe_bytes;
}

}  // namespace ssdtrain::sim

// Where an offloaded tensor's bytes go on a node's drives: decided here once,
// for the simulator (which predicts each drive's bytes) and the executor
// (whose engine writes them), so that `device` in a plan means one thing.
//
// The drives. A node's offload drives are listed in order: the executor's
// --dir list, the hardware preset's storage.arrays array by array. They form
// arrays of consecutive drives (`arrays[a]` drives in array a); GPU slot g of
// the node uses array g % arrays.size(), its drive set. No arrays: one array
// of every listed drive.
//
// The stripes. A tensor offloaded to SSD is cut into stripes of
// `stripe_bytes` (the last one shorter), one I/O request each; stripe i goes
// to drive (device + i) % n of its GPU's drive set of n drives, where
// `device` is its placement's device field (the drive of the first stripe).
// Each drive holds the tensor's stripes in one file of the plan's name, at the
// placement's offset, back to back (each padded to the direct-I/O alignment).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

struct Plan;

// The engine's request size when a plan names none: 4 MiB, fio's usual bs.
inline constexpr int64_t kDefaultStripeBytes = int64_t{4} << 20;
// Stripes and offsets are multiples of this (O_DIRECT's alignment).
inline constexpr int64_t kStripeAlign = 4096;

// A node's drives as a plan records them (JSON "storage": {"arrays": [...],
// "stripe_bytes": N, "gds": true}; optional, written when set).
struct DriveLayout {
  std::vector<int> arrays;   // drives per array; empty: one array of every drive given
  int64_t stripe_bytes = 0;  // 0: kDefaultStripeBytes
  // The path the prediction priced (the hardware's storage.gds): GPUDirect
  // Storage, device memory to the drives; false: bounce buffers through pinned
  // host memory. A CUDA replay takes the same path by default (replay --gds).
  bool gds = false;
  bool operator==(const DriveLayout&) const = default;
};

// The stripe size in effect: stripe_bytes, or kDefaultStripeBytes when 0.
int64_t StripeBytes(const DriveLayout& layout);

// Stripe sizes are positive multiples of kStripeAlign (or 0); arrays hold 1
// to kMaxArrayDrives drives each. The message is "<where>.<field>: ...".
inline constexpr int kMaxArrayDrives = 4096;
Status ValidateDriveLayout(const DriveLayout& layout, const std::string& where);

// GPU slot `gpu`'s drives: [first, first + count) of the node's list of
// `drives` drives. With arrays, their drive total must equal `drives` (the
// message says how many the layout has and how many were given).
struct DriveSet {
  int first = 0;
  int count = 1;
};
Result<DriveSet> DriveSetOf(const DriveLayout& layout, int gpu, int drives);

// The tensor bytes that drive `drive` (0 to drives - 1, in the GPU's drive
// set) receives of a `bytes`-byte tensor whose first stripe goes to drive
// `device` % drives.
int64_t StripedBytes(int64_t bytes, int64_t stripe_bytes, int drives, int device, int drive);
// The same for every drive of the set, in one vector of `drives` entries.
std::vector<int64_t> StripedBytesPerDrive(int64_t bytes, int64_t stripe_bytes, int drives,
                                          int device);

// Sets each offload-ssd storage's first drive (its placements' `device`) to
// the next of `drives` in turn, in the order the plan lists them, so that
// storages smaller than a stripe spread over the drives instead of all
// landing on drive 0. Placements of one storage get the same device.
void SpreadOverDrives(const Trace& trace, Plan* plan, int drives);

}  // namespace ssdtrain::traces

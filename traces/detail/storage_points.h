// Where a resolved plan's storages move, checked against their lifetimes and
// listed per op (traces/storage_plan.h, "Memory" and "Recompute"): the
// offloaded storages' prefetch and eviction points (sp.prefetch_at,
// sp.evict_at) and the recomputed storages' rebuild points (sp.rebuild_at).
// A point that breaks its rule names the placement that set it
// ("<source>: placements[i].<field>: ..."; `placed_at`: each tensor's
// placement index, -1 for none). ResolvePlan calls them after the holds
// (storage_links.h) have set the lifetimes; nothing else needs to. What a
// single placement's field must be whatever the lifetimes (an op that exists;
// a rebuild point in backward, an eviction point not in the optimizer) is
// checked where ResolvePlan reads each placement, so that a placement
// sharing a storage is checked too, not only the one whose point the storage
// takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::traces::detail {

// StorageInfo::rebuild_before (a recompute placement's prefetch_before): after
// the storage's last forward use and at or before its first backward use, or
// the placement that set it is named ("<source>: placements[i].prefetch_before:
// ..."; `placed_at`: each tensor's placement index, -1 for none); then
// sp.rebuild_at, each op's storages in their producers' order; then the
// re-runs (ResolveReruns).
Status ResolveRebuildPoints(const Trace& trace, const std::vector<int64_t>& placed_at,
                            const std::string& source, StoragePlan& sp);

// The re-runs the plan makes, walked in issue order without timing
// (storage_plan.h, "Recompute"): at each op, what is gone of its inputs and of
// the storages it rebuilds, and, first, of their producers' inputs. A walk
// runs each op at most once: an output a re-run op rebuilds stays available
// to every later re-run. Sets sp.rerun_keep (each rebuilt storage once per
// re-run op reading it, at the op whose re-run rebuilt it) and
// StorageInfo::rerun_until. Needs sp.rebuild_at.
void ResolveReruns(const Trace& trace, StoragePlan& sp);

// StorageInfo::prefetch_before and evict_before of the offloaded storages:
// an eviction point in the storage's own micro-batch's backward becomes that
// forward pass's end; else it must come after the last forward use and before
// the prefetch point or first backward use; then sp.prefetch_at and
// sp.evict_at.
Status ResolveMovePoints(const Trace& trace, const std::vector<int64_t>& placed_at,
                         const std::string& source, StoragePlan& sp);

}  // namespace ssdtrain::traces::detail

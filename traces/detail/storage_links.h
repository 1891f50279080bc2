// The links between a resolved plan's storages that the recompute rule and
// the holds add to their lifetimes (traces/storage_plan.h, "Recompute" and
// "Hold"): ZeRO-3's forward gathers paired with their backward regathers,
// held storages joined to their hold op's inputs, and recomputed storages
// listed at their rebuild points. ResolveStorages and ResolvePlan call them;
// nothing else needs to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::traces::detail {

// StorageInfo::regathered: each forward ZeRO gather's (shard, gathered) pair
// against its micro-batch's backward gather of the same shard.
void PairRegathers(const Trace& trace, StoragePlan& sp);

// Placement::hold_until: the held storages join their hold op's inputs (the
// simulator and the static peaks free a storage after its last reader) and
// live until it.
void ApplyHolds(const Trace& trace, StoragePlan& sp);

// StorageInfo::rebuild_before (a recompute placement's prefetch_before): after
// the storage's last forward use and at or before its first backward use, or
// the placement that set it is named ("<source>: placements[i].prefetch_before:
// ..."; `placed_at`: each tensor's placement index, -1 for none); then
// sp.rebuild_at, each op's storages in their producers' order.
Status ResolveRebuildPoints(const Trace& trace, const std::vector<int64_t>& placed_at,
                            const std::string& source, StoragePlan& sp);

}  // namespace ssdtrain::traces::detail

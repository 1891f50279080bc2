// The links between a resolved plan's storages that the recompute rule and
// the holds add to their lifetimes (traces/storage_plan.h, "Recompute" and
// "Hold"): ZeRO-3's forward gathers paired with their backward regathers, and
// held storages joined to their hold op's inputs. ResolveStorages and
// ResolvePlan call them; nothing else needs to. Where storages move (prefetch,
// eviction and rebuild points): storage_points.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::traces::detail {

// StorageInfo::regathered: each forward ZeRO gather's (shard, gathered) pair
// against its micro-batch's backward gather of the same shard, and each
// forward copy-out's copy (traces/collective_kind.h, kZeroCopyOutSuffix)
// against the backward copy-out's copy of the same shard.
void PairRegathers(const Trace& trace, StoragePlan& sp);

// Placement::hold_until: the held storages join their hold op's inputs (the
// simulator and the static peaks free a storage after its last reader) and
// live until it.
void ApplyHolds(const Trace& trace, StoragePlan& sp);

}  // namespace ssdtrain::traces::detail

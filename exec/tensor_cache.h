// The tensor cache: which saved tensors go to the SSD (or to pinned host
// memory, for offload-host), when their device copy may go, and how backward
// gets them back. Both offload actions share one state machine; for
// offload-host the "write" is the device-to-host copy and the "read" the copy
// back. Bookkeeping only: it owns no memory
// and does no I/O; the replay (exec/replay.h) asks it what to do and tells it
// what happened. Techniques from SSDTrain (arXiv 2408.10013, section 3):
//
// - Deduplication: state is kept per storage (traces::Trace::StorageOf), so a
//   tensor saved by several ops, or a view of it (alias_of), is written once.
// - Forwarding: when backward asks for a storage still on the device, it is
//   served from there: a write not yet started is dropped; a write in flight
//   completes but the copy is no longer evicted. Nothing is read back.
// - Eviction after the write lands, once every forward consumer has been issued;
//   or, for a storage with a planned eviction point (Placement::evict_before),
//   exactly when that op is issued (the replay waits there for the write).
// - Prefetch: the read is issued when op Placement::prefetch_before is issued,
//   or on demand before the first backward consumer when it is kNoOp.
//
// Thread-safety: every method may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "exec/cache_stats.h"
#include "exec/detail/annotated_mutex.h"
#include "traces/plan.h"
#include "traces/status.h"
#include "traces/storage_plan.h"
#include "traces/trace.h"

namespace ssdtrain::exec {

// What backward must do to have a storage on the device.
enum class BackwardSource {
  kResident,   // never left (kept, or not saved, or not offloaded)
  kForwarded,  // offloaded but still resident: served from memory (forwarding)
  kRead,       // evicted: read it back from the SSD (or copy it back from the host)
  kRecompute,  // recompute: re-run its producer
};

class TensorCache {
 public:
  // The plan resolved against its trace (traces::ResolvePlan); it must
  // outlive the cache.
  explicit TensorCache(const traces::StoragePlan& plan);
  // The cache keeps a reference to the plan: a temporary would dangle.
  explicit TensorCache(traces::StoragePlan&& plan) = delete;

  // The storage a tensor id lives in (its root tensor id), and what the plan
  // does with that storage.
  traces::TensorId StorageOf(traces::TensorId t) const { return plan_.of(t).root; }
  const traces::StorageInfo& Info(traces::TensorId storage) const { return plan_.of(storage); }
  traces::TensorAction ActionOf(traces::TensorId storage) const { return plan_.of(storage).action; }
  // Offloaded storages whose read the plan issues at op `op` (prefetch_before == op).
  const std::vector<traces::TensorId>& PrefetchesAt(traces::OpId op) const;

  // Forward: the producer of `storage` was issued. True exactly once per
  // storage per step for an offloaded storage: queue its write (or host copy).
  bool OnProduced(traces::TensorId storage);
  // The writer is about to start the write. False: dropped (backward already
  // claimed it); the writer releases its staging and skips the write.
  bool BeginWrite(traces::TensorId storage);
  // The write landed (called by a thread other than the one that claims).
  // True: evict it (no forward use pending, not claimed); the storage is then
  // already in the eviction list (TakeEvictions), entered under the same lock
  // as the decision, so a ClaimForBackward that finds it evicted (kRead) can
  // count on the list holding it: the claimer drains the list before it
  // allocates the read's buffer, and no late eviction frees that buffer.
  bool OnWriteLanded(traces::TensorId storage);
  // Hands out (and forgets) the storages OnWriteLanded decided to evict, in
  // decision order. HasEvictions: whether there are any.
  std::vector<traces::TensorId> TakeEvictions();
  bool HasEvictions() const;
  // The last forward consumer of `storage` was issued. True: evict now. A
  // storage with a planned eviction point waits for that point instead.
  bool OnForwardUsesIssued(traces::TensorId storage);
  // Storages whose planned eviction point is op `op` (evict_before == op).
  const std::vector<traces::TensorId>& EvictionsAt(traces::OpId op) const;
  // Op `evict_before` of `storage` is being issued. True: evict now; false
  // while its write has not landed (WritePending: the landing evicts it, into
  // the eviction list) or when backward has claimed it.
  bool OnEvictionPoint(traces::TensorId storage);
  // Backward needs `storage` (a prefetch point or its first backward consumer).
  // Idempotent within a step: later calls return kResident once it is back.
  BackwardSource ClaimForBackward(traces::TensorId storage);
  // The read of `storage` was copied back to the device.
  void OnReadLanded(traces::TensorId storage);
  // True when the write is in flight or queued but not landed/dropped (the
  // replay waits for these before a step ends).
  bool WritePending(traces::TensorId storage) const;

  // Starts a new step: every storage back to "not produced".
  void ResetStep();
  CacheStats stats() const;

 private:
  enum class State {
    kNone,
    kResident,
    kWriteQueued,
    kWriting,
    kWritten,
    kEvicted,
    kReading,
    kBack
  };
  struct Entry {
    int64_t bytes = 0;
    State state = State::kNone;
    bool forward_done = false;
    bool claimed = false;
    bool host = false;  // offload-host
  };
  BackwardSource DecideClaim(traces::TensorId storage) SSDTRAIN_EXCLUDES(mu_);  // takes mu_
  // No forward use pending: evict now if written and not claimed.
  bool MarkForwardDone(Entry* e) SSDTRAIN_REQUIRES(mu_);
  Entry* Find(traces::TensorId storage) SSDTRAIN_REQUIRES(mu_);
  const Entry* Find(traces::TensorId storage) const SSDTRAIN_REQUIRES(mu_);

  const traces::StoragePlan& plan_;
  mutable detail::Mutex mu_;
  // Offloaded storages only.
  std::unordered_map<traces::TensorId, Entry> entries_ SSDTRAIN_GUARDED_BY(mu_);
  std::vector<std::vector<traces::TensorId>> prefetch_at_;  // by op id: storage roots; read-only
  std::vector<std::vector<traces::TensorId>> evict_at_;     // likewise
  CacheStats stats_ SSDTRAIN_GUARDED_BY(mu_);
  // Decided by OnWriteLanded, not yet taken.
  std::vector<traces::TensorId> evictions_ SSDTRAIN_GUARDED_BY(mu_);
};

}  // namespace ssdtrain::exec

#include "exec/tensor_cache.h"

#include <cstddef>
#include <utility>

#include "exec/detail/test_points.h"

namespace ssdtrain::exec {

TensorCache::TensorCache(const traces::StoragePlan& plan) : plan_(plan) {
  for (const traces::StorageInfo& s : plan.storages) {
    if (!s.offloaded()) continue;
    Entry& e = entries_[s.root];
    e.bytes = s.bytes;
    e.host = s.action == traces::TensorAction::kOffloadHost;
  }
  auto roots = [&plan](const traces::OpLists& by_op,
                       std::vector<std::vector<traces::TensorId>>* out) {
    out->resize(by_op.size());
    for (size_t op = 0; op < by_op.size(); ++op) {
      for (int i : by_op[op]) (*out)[op].push_back(plan.storages[static_cast<size_t>(i)].root);
    }
  };
  roots(plan.prefetch_at, &prefetch_at_);
  roots(plan.evict_at, &evict_at_);
}

const std::vector<traces::TensorId>& TensorCache::EvictionsAt(traces::OpId op) const {
  return evict_at_[static_cast<size_t>(op)];
}

const std::vector<traces::TensorId>& TensorCache::PrefetchesAt(traces::OpId op) const {
  return prefetch_at_[static_cast<size_t>(op)];
}

TensorCache::Entry* TensorCache::Find(traces::TensorId storage) {
  auto it = entries_.find(storage);
  return it == entries_.end() ? nullptr : &it->second;
}
const TensorCache::Entry* TensorCache::Find(traces::TensorId storage) const {
  auto it = entries_.find(storage);
  return it == entries_.end() ? nullptr : &it->second;
}

bool TensorCache::OnProduced(traces::TensorId storage) {
  detail::MutexLock lock(&mu_);
  Entry* e = Find(storage);
  if (e == nullptr || e->state != State::kNone) return false;
  e->state = State::kWriteQueued;
  return true;
}

bool TensorCache::BeginWrite(traces::TensorId storage) {
  detail::MutexLock lock(&mu_);
  Entry* e = Find(storage);
  if (e == nullptr || e->state != State::kWriteQueued) return false;
  if (e->claimed) {
    // Forwarding: backward already has it from memory; the write is dropped.
    e->state = State::kBack;
    ++stats_.writes_dropped;
    stats_.bytes_write_dropped += e->bytes;
    return false;
  }
  e->state = State::kWriting;
  ++(e->host ? stats_.host_copies : stats_.writes);
  (e->host ? stats_.bytes_to_host : stats_.bytes_written) += e->bytes;
  return true;
}

bool TensorCache::OnWriteLanded(traces::TensorId storage) {
  detail::MutexLock lock(&mu_);
  Entry* e = Find(storage);
  if (e == nullptr || e->state != State::kWriting) return false;
  e->state = e->claimed ? State::kBack : State::kWritten;
  if (e->state == State::kWritten && e->forward_done) {
    e->state = State::kEvicted;
    ++stats_.evictions;
    stats_.bytes_evicted += e->bytes;
    evictions_.push_back(storage);
    return true;
  }
  return false;
}

std::vector<traces::TensorId> TensorCache::TakeEvictions() {
  detail::MutexLock lock(&mu_);
  return std::exchange(evictions_, {});
}

bool TensorCache::HasEvictions() const {
  detail::MutexLock lock(&mu_);
  return !evictions_.empty();
}

bool TensorCache::OnForwardUsesIssued(traces::TensorId storage) {
  if (plan_.of(storage).evict_before != traces::kNoOp) return false;  // its point decides
  detail::MutexLock lock(&mu_);
  return MarkForwardDone(Find(storage));
}

bool TensorCache::OnEvictionPoint(traces::TensorId storage) {
  detail::MutexLock lock(&mu_);
  return MarkForwardDone(Find(storage));
}

bool TensorCache::MarkForwardDone(Entry* e) {
  if (e == nullptr) return false;
  e->forward_done = true;
  if (e->state == State::kWritten && !e->claimed) {
    e->state = State::kEvicted;
    ++stats_.evictions;
    stats_.bytes_evicted += e->bytes;
    return true;
  }
  return false;
}

BackwardSource TensorCache::ClaimForBackward(traces::TensorId storage) {
  const BackwardSource source = DecideClaim(storage);
  detail::HitTestPoint(detail::TestPoint::kBackwardClaimed, storage);
  return source;
}

BackwardSource TensorCache::DecideClaim(traces::TensorId storage) {
  detail::MutexLock lock(&mu_);
  Entry* e = Find(storage);
  if (e == nullptr) {
    return ActionOf(storage) == traces::TensorAction::kRecompute ? BackwardSource::kRecompute
                                                                 : BackwardSource::kResident;
  }
  if (e->claimed) return BackwardSource::kResident;
  e->claimed = true;
  switch (e->state) {
    case State::kEvicted:
      e->state = State::kReading;
      ++(e->host ? stats_.host_restores : stats_.reads);
      (e->host ? stats_.bytes_from_host : stats_.bytes_read) += e->bytes;
      return BackwardSource::kRead;
    case State::kResident:
    case State::kWriteQueued:  // BeginWrite will drop it
    case State::kWriting:      // lands, but is not evicted
    case State::kWritten:
      ++stats_.forwarded;
      stats_.bytes_forwarded += e->bytes;
      if (e->state == State::kWritten) e->state = State::kBack;
      return BackwardSource::kForwarded;
    default:
      return BackwardSource::kResident;
  }
}

void TensorCache::OnReadLanded(traces::TensorId storage) {
  detail::MutexLock lock(&mu_);
  if (Entry* e = Find(storage); e != nullptr && e->state == State::kReading)
    e->state = State::kBack;
}

bool TensorCache::WritePending(traces::TensorId storage) const {
  detail::MutexLock lock(&mu_);
  const Entry* e = Find(storage);
  return e != nullptr && (e->state == State::kWriteQueued || e->state == State::kWriting);
}

void TensorCache::ResetStep() {
  detail::MutexLock lock(&mu_);
  evictions_.clear();
  for (auto& [storage, e] : entries_) {
    e = Entry{.bytes = e.bytes, .host = e.host};
  }
}

CacheStats TensorCache::stats() const {
  detail::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace ssdtrain::exec

// The tensor cache's bookkeeping: dedup, forwarding, eviction, prefetch points.
#include "exec/tensor_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace ssdtrain::exec {
namespace {

using traces::TensorAction;

// op0 (fwd) makes t1 (1000 B) and its view t2; op1 (fwd) makes t3 (500 B);
// op2 (bwd) and op3 (bwd) read them back.
traces::Trace SmallTrace() {
  traces::Trace trace;
  auto tensor = [&](int64_t bytes, traces::OpId producer) {
    traces::Tensor t;
    t.id = static_cast<traces::TensorId>(trace.tensors.size());
    t.bytes = bytes;
    t.producer = producer;
    t.saved_for_backward = true;
    t.offloadable = true;
    trace.tensors.push_back(t);
    return t.id;
  };
  tensor(100, traces::kNoOp);  // t0: the step input
  tensor(1000, 0);             // t1
  tensor(1000, 0);             // t2: a view of t1
  trace.tensors[2].alias_of = 1;
  tensor(500, 1);  // t3
  for (int i = 0; i < 4; ++i) {
    traces::Op op;
    op.id = i;
    op.phase = i < 2 ? traces::Phase::kForward : traces::Phase::kBackward;
    trace.ops.push_back(op);
  }
  return trace;
}

// The plan resolved against SmallTrace(); owns both, so the cache's
// references stay valid as long as this lives. Offload-ssd files are named
// after the storage, so that a tensor and its view agree on the place.
struct Resolved {
  traces::Trace trace;
  traces::Plan plan;
  traces::StoragePlan storage;
};

std::unique_ptr<Resolved> PlanFor(std::vector<std::pair<traces::TensorId, TensorAction>> actions,
                                  traces::OpId prefetch_before = traces::kNoOp) {
  auto r = std::make_unique<Resolved>();
  r->trace = SmallTrace();
  for (auto [t, a] : actions) {
    traces::Placement p;
    p.tensor = t;
    p.action = a;
    p.prefetch_before = prefetch_before;
    if (a == TensorAction::kOffloadSsd) p.file = traces::OffloadFileName(r->trace.StorageOf(t));
    r->plan.placements.push_back(p);
  }
  auto sp = traces::ResolvePlan(r->trace, r->plan, "test plan");
  EXPECT_TRUE(sp.ok()) << sp.status().message();
  if (sp.ok()) r->storage = std::move(*sp);
  return r;
}

TEST(TensorCache, ATensorAndItsViewAreWrittenOnce) {
  // t1 and its view t2 both offloaded: one storage, one write of 1000 bytes.
  const auto plan = PlanFor({{1, TensorAction::kOffloadSsd}, {2, TensorAction::kOffloadSsd}});
  TensorCache cache(plan->storage);
  EXPECT_EQ(cache.StorageOf(2), 1);
  EXPECT_TRUE(cache.OnProduced(cache.StorageOf(1)));
  EXPECT_FALSE(cache.OnProduced(cache.StorageOf(2)));
  EXPECT_TRUE(cache.BeginWrite(1));
  EXPECT_EQ(cache.stats().writes, 1);
  EXPECT_EQ(cache.stats().bytes_written, 1000);
}

TEST(TensorCache, ForwardingDropsAWriteNotYetStarted) {
  // Backward asks for t3 before its write started: served from memory, the
  // write is dropped, nothing is read.
  const auto plan = PlanFor({{3, TensorAction::kOffloadSsd}});
  TensorCache cache(plan->storage);
  ASSERT_TRUE(cache.OnProduced(3));
  EXPECT_EQ(cache.ClaimForBackward(3), BackwardSource::kForwarded);
  EXPECT_TRUE(cache.WritePending(3));
  EXPECT_FALSE(cache.BeginWrite(3));
  EXPECT_FALSE(cache.WritePending(3));
  const CacheStats s = cache.stats();
  EXPECT_EQ(s.writes, 0);
  EXPECT_EQ(s.writes_dropped, 1);
  EXPECT_EQ(s.bytes_write_dropped, 500);
  EXPECT_EQ(s.bytes_forwarded, 500);
  EXPECT_EQ(s.bytes_read, 0);
}

TEST(TensorCache, AWriteInFlightWhenBackwardAsksIsNotEvicted) {
  const auto plan = PlanFor({{3, TensorAction::kOffloadSsd}});
  TensorCache cache(plan->storage);
  ASSERT_TRUE(cache.OnProduced(3));
  ASSERT_TRUE(cache.BeginWrite(3));
  EXPECT_FALSE(cache.OnForwardUsesIssued(3));  // not landed yet
  EXPECT_EQ(cache.ClaimForBackward(3), BackwardSource::kForwarded);
  EXPECT_FALSE(cache.OnWriteLanded(3));  // claimed: stays resident
  EXPECT_EQ(cache.stats().evictions, 0);
  EXPECT_EQ(cache.stats().bytes_written, 500);  // the write itself completed
}

TEST(TensorCache, EvictionWaitsForTheWriteAndTheLastForwardUse) {
  const auto plan = PlanFor({{1, TensorAction::kOffloadSsd}});
  TensorCache cache(plan->storage);
  // Write lands first: eviction waits for the forward uses.
  ASSERT_TRUE(cache.OnProduced(1));
  ASSERT_TRUE(cache.BeginWrite(1));
  EXPECT_FALSE(cache.OnWriteLanded(1));
  EXPECT_TRUE(cache.OnForwardUsesIssued(1));
  // Evicted: backward reads it, once.
  EXPECT_EQ(cache.ClaimForBackward(1), BackwardSource::kRead);
  EXPECT_EQ(cache.ClaimForBackward(1), BackwardSource::kResident);
  cache.OnReadLanded(1);
  EXPECT_EQ(cache.stats().bytes_read, 1000);
  // Next step, the other order: forward uses first, then the write lands.
  cache.ResetStep();
  ASSERT_TRUE(cache.OnProduced(1));
  ASSERT_TRUE(cache.BeginWrite(1));
  EXPECT_FALSE(cache.OnForwardUsesIssued(1));
  EXPECT_TRUE(cache.OnWriteLanded(1));
  EXPECT_EQ(cache.stats().evictions, 2);
}

TEST(TensorCache, AnEvictionDecidedOnLandingIsListedBeforeAClaimCanReadIt) {
  // The write of t1 lands after its forward uses, on another thread than the
  // claims: the eviction is listed under the same lock as the decision, so a
  // claim that finds t1 evicted (kRead) finds it in TakeEvictions too, and the
  // claimer frees the resident copy before it allocates the read's buffer.
  const auto plan = PlanFor({{1, TensorAction::kOffloadSsd}});
  TensorCache cache(plan->storage);
  ASSERT_TRUE(cache.OnProduced(1));
  ASSERT_TRUE(cache.BeginWrite(1));
  EXPECT_FALSE(cache.OnForwardUsesIssued(1));
  EXPECT_FALSE(cache.HasEvictions());
  EXPECT_TRUE(cache.OnWriteLanded(1));
  EXPECT_EQ(cache.ClaimForBackward(1), BackwardSource::kRead);
  EXPECT_TRUE(cache.HasEvictions());
  EXPECT_EQ(cache.TakeEvictions(), std::vector<traces::TensorId>{1});
  EXPECT_FALSE(cache.HasEvictions());
  // A new step forgets evictions nobody took.
  cache.ResetStep();
  ASSERT_TRUE(cache.OnProduced(1));
  ASSERT_TRUE(cache.BeginWrite(1));
  EXPECT_FALSE(cache.OnForwardUsesIssued(1));
  EXPECT_TRUE(cache.OnWriteLanded(1));
  cache.ResetStep();
  EXPECT_FALSE(cache.HasEvictions());
}

TEST(TensorCache, PrefetchPointsComeFromThePlan) {
  const auto plan = PlanFor({{3, TensorAction::kOffloadSsd}}, /*prefetch_before=*/2);
  TensorCache cache(plan->storage);
  ASSERT_EQ(cache.PrefetchesAt(2).size(), 1u);
  EXPECT_EQ(cache.PrefetchesAt(2)[0], 3);
  EXPECT_TRUE(cache.PrefetchesAt(3).empty());
}

TEST(TensorCache, KeptAndRecomputedStoragesAreNeverWritten) {
  const auto plan = PlanFor({{1, TensorAction::kKeep}, {3, TensorAction::kRecompute}});
  TensorCache cache(plan->storage);
  EXPECT_FALSE(cache.OnProduced(1));
  EXPECT_FALSE(cache.OnProduced(3));
  EXPECT_EQ(cache.ClaimForBackward(1), BackwardSource::kResident);
  EXPECT_EQ(cache.ClaimForBackward(3), BackwardSource::kRecompute);
  EXPECT_EQ(cache.ActionOf(0), TensorAction::kKeep);  // not listed: kept
}

}  // namespace
}  // namespace ssdtrain::exec

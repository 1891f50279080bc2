// End-to-end replays of the tiny GPT on the CPU backend with real offload
// files: what each placement does (offload to the SSD and to host memory,
// forwarding, recompute), whole steps, exact peaks, staging waits. Races,
// shared devices, refusals and failures are in replay_faults_test.cc.
#include "exec/replay.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "exec/tests/io_test_util.h"
#include "exec/tests/replay_test_util.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using testing::CpuOptions;
using testing::HostPlan;
using testing::ListTree;
using testing::OffloadedStorageBytes;
using testing::TempDir;
using testing::TinyGptTrace;

TEST(Replay, OffloadReplayVerifiesAndWritesEachOffloadedByteOnce) {
  const traces::Trace trace = TinyGptTrace();
  const traces::Plan plan = traces::OffloadAllPlan(trace);
  const int64_t offloaded = OffloadedStorageBytes(trace, plan);
  ASSERT_GT(offloaded, 0);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.verify = true;
  auto r = Replay(trace, plan, o, "offload-all");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->verified);
  EXPECT_GT(r->tensors_checked, 0);
  EXPECT_EQ(r->plan_offloaded_bytes, offloaded);
  // Dedup: every offloaded storage is written once, unless forwarding dropped
  // its write: written + dropped = the plan's unique offloaded bytes.
  EXPECT_EQ(r->metrics.ssd_bytes_written + r->cache.bytes_write_dropped, offloaded);
  // Only what was not forwarded is read back: read = offloaded - forwarded.
  EXPECT_EQ(r->metrics.ssd_bytes_read, offloaded - r->cache.bytes_forwarded);
  EXPECT_GT(r->metrics.ssd_bytes_read, 0);
  // The engine removed its files.
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

TEST(Replay, AWholeStepRunsEachMicroBatchAndHoldsWhatItsScheduleHolds) {
  // traces/whole_step.h: m micro-batches in the schedule's order, each with its
  // own offloaded tensors and files. With every write waited for, measured
  // peaks equal the planned ones exactly.
  const traces::Trace trace = TinyGptTrace(/*micro_batch=*/1, /*seq_len=*/128);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.wait_for_writes = true;
  o.verify = true;
  traces::Plan plan = traces::OffloadAllPlan(trace);
  const int64_t offloaded = OffloadedStorageBytes(trace, plan);
  auto one = Replay(trace, plan, o, "offload-all");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  plan.num_micro_batches = 2;
  plan.schedule = "1f1b";
  auto onefoneb = Replay(trace, plan, o, "offload-all, 2 micro-batches, 1f1b");
  ASSERT_TRUE(onefoneb.ok()) << onefoneb.status().ToString();
  plan.schedule = "gpipe";
  auto gpipe = Replay(trace, plan, o, "offload-all, 2 micro-batches, gpipe");
  ASSERT_TRUE(gpipe.ok()) << gpipe.status().ToString();
  for (const ReplayResult* r : {&*onefoneb, &*gpipe}) {
    EXPECT_TRUE(r->verified);
    // Every micro-batch's storages checked, written and read once.
    EXPECT_EQ(r->tensors_checked, 2 * one->tensors_checked);
    EXPECT_EQ(r->plan_offloaded_bytes, 2 * offloaded);
    EXPECT_EQ(r->metrics.ssd_bytes_written, 2 * offloaded);
    EXPECT_EQ(r->metrics.ssd_bytes_read, 2 * offloaded);
    EXPECT_EQ(r->metrics.peak_activation_bytes, r->planned_peak_activation_bytes);
  }
  // One stage under 1F1B holds one micro-batch at a time: the single
  // micro-batch's peak. GPipe runs every forward before the first backward:
  // more is held at once (here, what the forwards keep until their writes land).
  EXPECT_EQ(onefoneb->metrics.peak_activation_bytes, one->metrics.peak_activation_bytes);
  EXPECT_GT(gpipe->metrics.peak_activation_bytes, one->metrics.peak_activation_bytes);
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

TEST(Replay, OffloadLowersPeakActivationsByWhatThePlanSays) {
  // With every write waited for, evictions land where the plan's accounting
  // puts them, so the measured peaks equal the planned ones exactly and the
  // reduction against keep-everything is the planned one.
  const traces::Trace trace = TinyGptTrace(/*micro_batch=*/1, /*seq_len=*/128);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.wait_for_writes = true;
  auto keep = Replay(trace, traces::KeepAllPlan(trace), o, "keep");
  ASSERT_TRUE(keep.ok()) << keep.status().ToString();
  auto offload = Replay(trace, traces::OffloadAllPlan(trace), o, "offload-all");
  ASSERT_TRUE(offload.ok()) << offload.status().ToString();
  EXPECT_EQ(keep->metrics.peak_activation_bytes, keep->planned_peak_activation_bytes);
  EXPECT_EQ(offload->metrics.peak_activation_bytes, offload->planned_peak_activation_bytes);
  const int64_t planned_saving =
      keep->planned_peak_activation_bytes - offload->planned_peak_activation_bytes;
  EXPECT_GT(planned_saving, keep->planned_peak_activation_bytes / 2);
  EXPECT_EQ(keep->metrics.peak_activation_bytes - offload->metrics.peak_activation_bytes,
            planned_saving);
  EXPECT_EQ(offload->cache.bytes_forwarded, 0);  // everything was evicted in time
  EXPECT_EQ(offload->metrics.ssd_bytes_read, offload->plan_offloaded_bytes);
}

TEST(Replay, HostOffloadVerifiesTouchesNoFileAndLowersPeakAsPlanned) {
  // offload-host: copied out after the producer, evicted, copied back at the
  // prefetch point. Same peaks as the SSD plan (same points), no SSD bytes.
  const traces::Trace trace = TinyGptTrace(1, 128);
  const traces::Plan plan = HostPlan(trace, /*every_other=*/false);
  const int64_t offloaded = OffloadedStorageBytes(trace, plan);
  ASSERT_GT(offloaded, 0);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.verify = true;
  o.wait_for_writes = true;
  auto host = Replay(trace, plan, o, "offload-host");
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  EXPECT_TRUE(host->verified);
  EXPECT_GT(host->tensors_checked, 0);
  EXPECT_EQ(host->metrics.ssd_bytes_written, 0);
  EXPECT_EQ(host->metrics.ssd_bytes_read, 0);
  EXPECT_EQ(host->cache.bytes_to_host + host->cache.bytes_write_dropped, offloaded);
  EXPECT_EQ(host->cache.bytes_from_host, offloaded - host->cache.bytes_forwarded);
  EXPECT_GT(host->cache.bytes_from_host, 0);
  EXPECT_EQ(host->metrics.peak_activation_bytes, host->planned_peak_activation_bytes);
  auto ssd = Replay(trace, traces::OffloadAllPlan(trace), o, "offload-all");
  ASSERT_TRUE(ssd.ok()) << ssd.status().ToString();
  EXPECT_EQ(host->metrics.peak_activation_bytes, ssd->metrics.peak_activation_bytes);
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

TEST(Replay, MixedHostAndSsdOffloadVerifies) {
  const traces::Trace trace = TinyGptTrace();
  const traces::Plan plan = HostPlan(trace, /*every_other=*/true);
  traces::Plan ssd_only = plan;
  std::erase_if(ssd_only.placements, [](const traces::Placement& p) {
    return p.action != traces::TensorAction::kOffloadSsd;
  });
  traces::Plan host_only = plan;
  std::erase_if(host_only.placements, [](const traces::Placement& p) {
    return p.action != traces::TensorAction::kOffloadHost;
  });
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.verify = true;
  auto r = Replay(trace, plan, o, "offload-mixed");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->verified);
  EXPECT_EQ(r->metrics.ssd_bytes_written + r->cache.bytes_write_dropped + r->cache.bytes_to_host,
            OffloadedStorageBytes(trace, plan));
  EXPECT_GT(r->metrics.ssd_bytes_written, 0);
  EXPECT_GT(r->cache.bytes_to_host, 0);
  EXPECT_LE(r->metrics.ssd_bytes_written, OffloadedStorageBytes(trace, ssd_only));
  EXPECT_LE(r->cache.bytes_to_host, OffloadedStorageBytes(trace, host_only));
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

TEST(Replay, TensorsClaimedBeforeEvictionAreForwardedNotRead) {
  // Every placement's prefetch point is the op right after its producer, so
  // backward claims each tensor while it is still resident: all of it is
  // forwarded (served from memory), nothing is read back, and every write is
  // either dropped before it started or completed without an eviction.
  // Resident is structural, not a race: a copy is evicted only once its last
  // forward use has been issued, and the replay issues op j only when op
  // j - max_ops_ahead has ended; so only storages whose last forward use comes
  // past producer + 1 + max_ops_ahead are offloaded, whose claim (when op
  // producer + 1 starts) precedes that issue however the write races it. (With
  // every storage offloaded, a loaded machine let a 64 KiB write land and evict
  // before the next op started: one read back.)
  const traces::Trace trace = TinyGptTrace(1, 128);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.verify = true;
  auto root = [&](traces::TensorId t) {
    while (trace.tensor(t).alias_of) t = *trace.tensor(t).alias_of;
    return t;
  };
  std::map<traces::TensorId, traces::OpId> last_forward_use;  // by storage (its root)
  std::map<traces::TensorId, traces::OpId> latest_producer;
  for (const traces::Tensor& t : trace.tensors) {
    traces::OpId& use = last_forward_use[root(t.id)];
    for (traces::OpId c : t.consumers) {
      if (trace.op(c).phase == traces::Phase::kForward) use = std::max(use, c);
    }
    traces::OpId& made = latest_producer[root(t.id)];
    made = std::max(made, t.producer);
  }
  traces::Plan plan = traces::OffloadAllPlan(trace);
  std::erase_if(plan.placements, [&](const traces::Placement& p) {
    const traces::TensorId r = root(p.tensor);
    return last_forward_use[r] < latest_producer[r] + 2 + o.max_ops_ahead;
  });
  ASSERT_FALSE(plan.placements.empty());
  for (traces::Placement& p : plan.placements) {
    p.prefetch_before = trace.tensor(p.tensor).producer + 1;
  }
  const int64_t offloaded = OffloadedStorageBytes(trace, plan);
  auto r = Replay(trace, plan, o, "forward-everything");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->verified);
  EXPECT_EQ(r->cache.bytes_forwarded, offloaded);
  EXPECT_EQ(r->metrics.ssd_bytes_read, 0);
  EXPECT_EQ(r->cache.evictions, 0);
  EXPECT_EQ(r->metrics.ssd_bytes_written + r->cache.bytes_write_dropped, offloaded);
}

TEST(Replay, RecomputedTensorsAreReproducedAndVerify) {
  // Recompute every saved activation of layer 1: its producers run again in
  // backward (one "recompute" span each) and the re-produced bytes match.
  const traces::Trace trace = TinyGptTrace(1, 128);
  traces::Plan plan = traces::KeepAllPlan(trace);
  plan.policy = "recompute-layer-1";
  int recomputed = 0;
  for (const traces::Tensor& t : trace.tensors) {
    if (t.layer == 1 && t.saved_for_backward && t.offloadable && !t.alias_of) {
      traces::Placement p;
      p.tensor = t.id;
      p.action = traces::TensorAction::kRecompute;
      plan.placements.push_back(p);
      ++recomputed;
    }
  }
  ASSERT_GT(recomputed, 0);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.verify = true;
  auto r = Replay(trace, plan, o, "recompute plan");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->verified);
  int spans = 0;
  for (const traces::Span& s : r->timeline.spans) spans += s.name.rfind("recompute ", 0) == 0;
  EXPECT_GE(spans, 1);
  EXPECT_EQ(r->metrics.ssd_bytes_written, 0);
}

TEST(Replay, WaitsForStagingAreCountedAsExposedIo) {
  // A staging region that holds one tensor and an SSD path held to 20 MB/s:
  // every offload in forward waits for the write before it to land, and every
  // read in backward for the one before it. The compute stream's idle time is
  // then the SSD's, and the exposed-I/O figure must say so — forward's waits
  // included (they hold back the next op's issue, not the op that offloads).
  const traces::Trace trace = TinyGptTrace(/*micro_batch=*/1, /*seq_len=*/128);
  const traces::Plan plan = traces::OffloadAllPlan(trace);
  int64_t largest = 0;
  for (const traces::Tensor& t : trace.tensors) largest = std::max(largest, t.bytes);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.staging_bytes = (largest + 4095) / 4096 * 4096;
  o.ssd_bandwidth_GBps = 0.02;
  auto r = Replay(trace, plan, o, "offload-all");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(r->metrics.ssd_bytes_written, 0);
  // Forward ops whose issue waited (for staging: no read happens in forward)
  // are marked, and the compute stream's gaps before them are in the figure.
  // Each offload of a tensor of 128 KiB or more waits for the write before it
  // (6.5 ms or more at 20 MB/s, against well under a millisecond of compute
  // per op here): whatever the machine's load, some forward op waits.
  int64_t forward_waits = 0, forward_gaps_ns = 0, prev_end = -1;
  for (const OpTime& t : r->ops) {
    if (t.io_wait && prev_end >= 0 && trace.op(t.op).phase == traces::Phase::kForward) {
      ++forward_waits;
      forward_gaps_ns += std::max<int64_t>(0, t.start_ns - prev_end);
    }
    prev_end = std::max(prev_end, t.end_ns);
  }
  EXPECT_GT(forward_waits, 0);
  EXPECT_GT(forward_gaps_ns, 0);
  // Every gap before a marked op is counted (and nothing else).
  int64_t marked_gaps_ns = 0;
  prev_end = -1;
  for (const OpTime& t : r->ops) {
    if (t.io_wait && prev_end >= 0) marked_gaps_ns += std::max<int64_t>(0, t.start_ns - prev_end);
    prev_end = std::max(prev_end, t.end_ns);
  }
  EXPECT_EQ(r->metrics.exposed_io_ns, marked_gaps_ns);
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

}  // namespace
}  // namespace ssdtrain::exec

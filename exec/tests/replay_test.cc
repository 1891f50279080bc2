// End-to-end replays of the tiny GPT on the CPU backend with real offload files.
#include "exec/replay.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "exec/detail/test_points.h"
#include "exec/fault_backend.h"
#include "exec/tests/io_test_util.h"
#include "exec/tests/replay_test_util.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using testing::CpuOptions;
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

// OffloadAllPlan with every placement (or every other one) sent to host memory.
traces::Plan HostPlan(const traces::Trace& trace, bool every_other) {
  traces::Plan plan = traces::OffloadAllPlan(trace);
  plan.policy = every_other ? "offload-mixed" : "offload-host";
  for (size_t i = 0; i < plan.placements.size(); ++i) {
    if (every_other && i % 2 == 1) continue;
    plan.placements[i].action = traces::TensorAction::kOffloadHost;
    plan.placements[i].file.clear();
  }
  return plan;
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
  const traces::Trace trace = TinyGptTrace(1, 128);
  traces::Plan plan = traces::OffloadAllPlan(trace);
  for (traces::Placement& p : plan.placements) {
    p.prefetch_before = trace.tensor(p.tensor).producer + 1;
  }
  const int64_t offloaded = OffloadedStorageBytes(trace, plan);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.verify = true;
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

// The hook of AClaimRightAfterTheEvictionDecisionReadsIntoALiveBuffer: the
// write-completion thread, right after the first eviction decision, waits
// until backward has claimed that storage (at most 10 s), then 50 ms more.
std::mutex g_claim_mu;
std::condition_variable g_claim_cv;
std::set<int64_t> g_claimed;
std::atomic<bool> g_first_decision{false};

int HoldFirstEvictionUntilClaimed(detail::TestPoint point, int64_t id) {
  std::unique_lock lock(g_claim_mu);
  if (point == detail::TestPoint::kBackwardClaimed) {
    g_claimed.insert(id);
    g_claim_cv.notify_all();
  } else if (point == detail::TestPoint::kEvictionDecided && !g_first_decision.exchange(true)) {
    g_claim_cv.wait_for(lock, std::chrono::seconds(10), [&] { return g_claimed.count(id) > 0; });
    // Let the claimer go on (allocate, start the read) before this thread does.
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

TEST(Replay, AClaimRightAfterTheEvictionDecisionReadsIntoALiveBuffer) {
  // The write-completion thread stops right after deciding to evict the first
  // storage, until backward has claimed it and gone on for 50 ms. Before the
  // fix that storage joined the eviction list only after the stop: the claim
  // got "read", allocated a second buffer over the resident one (leaking it),
  // and the late eviction freed the read's target (with less luck in timing:
  // "host-to-device copy: range ... is outside the device buffer of 0
  // bytes"). Every other placement goes to host memory, so whichever comes
  // first (SSD write or host copy) takes that path. On a shared device, a
  // replay leaves exactly its workspace behind: any leaked buffer shows.
  const traces::Trace trace = TinyGptTrace(/*micro_batch=*/1, /*seq_len=*/128);
  const traces::Plan plan = HostPlan(trace, /*every_other=*/true);
  DeviceOptions d;
  d.capacity_bytes = int64_t{1} << 30;
  std::string picked;
  auto device = MakeDevice(BackendChoice::kCpu, d, &picked);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.device = device->get();
  o.verify = true;
  auto plain = Replay(trace, plan, o, "offload-mixed");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  const int64_t workspace = (*device)->used_bytes();
  g_first_decision = false;
  g_claimed.clear();
  detail::SetTestHook(HoldFirstEvictionUntilClaimed);
  auto r = Replay(trace, plan, o, "offload-mixed");
  detail::SetTestHook(nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(g_first_decision);
  EXPECT_TRUE(r->verified);
  EXPECT_GT(r->cache.evictions, 0);
  // Every evicted storage comes back exactly once: read + restored = evicted.
  EXPECT_EQ(r->cache.bytes_read + r->cache.bytes_from_host, r->cache.bytes_evicted);
  EXPECT_EQ((*device)->used_bytes(), workspace);
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

TEST(Replay, TheNextRunSweepsTheFilesOfAKilledReplay) {
  // A replay in a child process is killed with SIGKILL (no handler runs) once
  // its offload files exist; they stay. The next replay in the same directory
  // removes them: afterwards nothing is left.
  const traces::Trace trace = TinyGptTrace(/*micro_batch=*/1, /*seq_len=*/128);
  const traces::Plan plan = traces::OffloadAllPlan(trace);
  TempDir dir;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ReplayOptions o = CpuOptions(dir.path());
    o.steps = 1000000;  // runs until killed
    auto r = Replay(trace, plan, o, "offload-all");
    ::_exit(r.ok() ? 0 : 3);
  }
  // Wait (at most 60 s) for a file inside the child's run directory.
  bool has_file = false;
  for (int i = 0; i < 6000 && !has_file; ++i) {
    for (const std::string& entry : ListTree(dir.path())) {
      has_file = has_file || entry.find('/') != std::string::npos;
    }
    if (!has_file) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(has_file);
  ASSERT_FALSE(ListTree(dir.path()).empty());
  auto r = Replay(trace, plan, CpuOptions(dir.path()), "offload-all");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

TEST(Replay, ReplaysShareOneDeviceAndLeaveItAsTheyFoundIt) {
  const traces::Trace trace = TinyGptTrace(/*micro_batch=*/1, /*seq_len=*/128);
  DeviceOptions d;
  d.capacity_bytes = int64_t{1} << 30;
  std::string picked;
  auto device = MakeDevice(BackendChoice::kCpu, d, &picked);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.device = device->get();
  o.verify = true;
  o.wait_for_writes = true;  // evictions where planned: the peaks are exact
  // A peak left from earlier use of the device must not count.
  auto big = (*device)->Allocate(int64_t{512} << 20);
  ASSERT_TRUE(big.ok());
  (*device)->Free(*big);
  auto first = Replay(trace, traces::OffloadAllPlan(trace), o, "offload-all");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const int64_t workspace = (*device)->used_bytes();
  auto second = Replay(trace, traces::KeepAllPlan(trace), o, "keep");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  auto third = Replay(trace, traces::OffloadAllPlan(trace), o, "offload-all");
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_TRUE(first->verified);
  EXPECT_TRUE(third->verified);
  // Each replay's figures are its own: the same as on a device of its own.
  ReplayOptions fresh = o;
  fresh.device = nullptr;
  fresh.device_memory_bytes = d.capacity_bytes;
  auto alone = Replay(trace, traces::OffloadAllPlan(trace), fresh, "offload-all");
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  for (const auto* r : {&*first, &*third}) {
    EXPECT_EQ(r->metrics.peak_gpu_bytes, alone->metrics.peak_gpu_bytes);
    EXPECT_EQ(r->metrics.peak_activation_bytes, alone->metrics.peak_activation_bytes);
  }
  EXPECT_GT(second->metrics.peak_activation_bytes, third->metrics.peak_activation_bytes);
  // The device holds only its workspace afterwards.
  EXPECT_EQ((*device)->used_bytes(), workspace);
  EXPECT_TRUE(ListTree(dir.path()).empty());
  // A device that still holds something is refused.
  auto held = (*device)->Allocate(int64_t{1} << 20);
  ASSERT_TRUE(held.ok());
  auto refused = Replay(trace, traces::KeepAllPlan(trace), o, "keep");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("still holds"), std::string::npos)
      << refused.status().ToString();
  (*device)->Free(*held);
}

TEST(Replay, ArenaTooSmallStopsBeforeAnyFileAndSaysWhatIsNeeded) {
  const traces::Trace trace = TinyGptTrace(1, 128);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.device_memory_bytes = int64_t{8} << 20;  // the weights alone are 15 MB
  auto r = Replay(trace, traces::OffloadAllPlan(trace), o, "offload-all");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kResourceExhausted);
  EXPECT_NE(r.status().message().find("needs at least"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("--device-memory"), std::string::npos);
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

TEST(Replay, PlanForAnotherTraceIsRefusedBeforeAnythingRuns) {
  const traces::Trace trace = TinyGptTrace(1, 128);
  traces::Plan plan = traces::OffloadAllPlan(trace);
  plan.trace_fingerprint ^= 1;
  TempDir dir;
  auto r = Replay(trace, plan, CpuOptions(dir.path()), "other.plan.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("other.plan.json"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

TEST(Replay, PlanFileNameEscapingTheDirectoryIsRefused) {
  const traces::Trace trace = TinyGptTrace(1, 128);
  traces::Plan plan = traces::OffloadAllPlan(trace);
  ASSERT_FALSE(plan.placements.empty());
  plan.placements[0].file = "../escape.bin";
  TempDir dir;
  const std::string inner = dir.Sub("offload");
  auto r = Replay(trace, plan, CpuOptions(inner), "evil.plan.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("escape.bin"), std::string::npos) << r.status().message();
  EXPECT_TRUE(ListTree(dir.path()) == std::vector<std::string>{"offload"});
}

TEST(Replay, WriteErrorStopsTheRunAndLeavesNoFiles) {
  // The third write request fails with EIO: the run stops with an I/O error
  // naming what failed, and the engine removes every file.
  const traces::Trace trace = TinyGptTrace(1, 128);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  auto fault = std::make_shared<FaultBackend*>(nullptr);
  o.make_io_backend = [fault]() -> std::unique_ptr<IoBackend> {
    auto inner = MakeIoBackend(BackendKind::kPosix, 32, nullptr);
    FaultOptions f;
    f.rules.push_back({IoOp::kWrite, 2, FaultKind::kEio, 1});
    auto backend = std::make_unique<FaultBackend>(std::move(*inner), f);
    *fault = backend.get();
    return backend;
  };
  auto r = Replay(trace, traces::OffloadAllPlan(trace), o, "offload-all");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kIoError) << r.status().ToString();
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

}  // namespace
}  // namespace ssdtrain::exec

// End-to-end replays of the tiny GPT on the CPU backend with real offload
// files: a backward claim racing the eviction decision, the next run sweeping
// a killed replay's files, replays sharing one device, what is refused before
// anything runs, and a write error mid-run. The placements themselves are in
// replay_test.cc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "exec/detail/test_points.h"
#include "exec/fault_backend.h"
#include "exec/replay.h"
#include "exec/tests/io_test_util.h"
#include "exec/tests/replay_test_util.h"
#include "traces/drives.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using testing::CpuOptions;
using testing::HostPlan;
using testing::ListTree;
using testing::TempDir;
using testing::TinyGptTrace;

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
  // The engine's message names the tensor and its file; the replay does not
  // say "writing tensor T" a second time in front of it.
  const std::string& text = r.status().message();
  const size_t first = text.find("writing tensor ");
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find("writing tensor ", first + 1), std::string::npos) << text;
  EXPECT_NE(text.find(" to " + dir.path()), std::string::npos) << text;
  EXPECT_TRUE(ListTree(dir.path()).empty());
}

// A replay striped over two directories (4 KiB stripes, each storage's first
// stripe on the next drive): the first storage's second stripe, on the second
// directory, fails with EIO. The step ends with an error naming that
// directory's file, and neither directory keeps anything.
TEST(Replay, AWriteErrorOnOneOfTwoDirectoriesNamesItAndLeavesNothingInEither) {
  const traces::Trace trace = TinyGptTrace(1, 128);
  TempDir dir;
  ReplayOptions o = CpuOptions(dir.path());
  o.dirs = {dir.Sub("ssd0"), dir.Sub("ssd1")};
  o.make_io_backend = []() -> std::unique_ptr<IoBackend> {
    auto inner = MakeIoBackend(BackendKind::kPosix, 64, nullptr);
    FaultOptions f;
    f.rules.push_back({IoOp::kWrite, 1, FaultKind::kEio, 1});
    return std::make_unique<FaultBackend>(std::move(*inner), f);
  };
  traces::Plan plan = traces::OffloadAllPlan(trace);
  plan.storage.stripe_bytes = 4096;
  traces::SpreadOverDrives(trace, &plan, 2);
  auto r = Replay(trace, plan, o, "offload-all over two directories");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kIoError) << r.status().ToString();
  EXPECT_NE(r.status().message().find(o.dirs[1] + "/ssdtrain-"), std::string::npos)
      << r.status().ToString();
  for (const std::string& d : o.dirs) EXPECT_TRUE(ListTree(d).empty()) << d;
}

}  // namespace
}  // namespace ssdtrain::exec

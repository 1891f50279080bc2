// Which streams a pipeline stage's messages wait for (issue 31 item 10): a
// send's copy out waits for its producer, not for the offload copies queued
// on the device-to-host stream, and a recv's copy in does not wait behind the
// host-to-device stream's prefetches (exec/replay_pipeline.cc). Two thread
// ranks (exec/tests/thread_ranks.h) replay a stage each on CPU devices whose
// offload streams cannot be drained until the peer has a message.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "exec/replay.h"
#include "exec/tests/forwarding_device.h"
#include "exec/tests/io_test_util.h"
#include "exec/tests/replay_test_util.h"
#include "exec/tests/thread_ranks.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::exec {
namespace {

using testing::CpuOptions;
using testing::ListTree;
using testing::TempDir;
using testing::ThreadRanks;
using testing::TinyGptTrace;

// How long a held Synchronize waits before it gives up and lets the run go
// on: only reached when the replay drains an offload stream before its peer
// has a message, which is the failure this test exists to catch (the run
// would otherwise deadlock). Never reached when the replay is right.
constexpr auto kWatchdog = std::chrono::seconds(15);

// A CPU device whose offload copy streams (device-to-host, host-to-device)
// cannot be drained: once a copy was queued on one of them, Synchronize of
// that stream blocks until Release(), as it would behind a long offload copy
// still queued there. Events recorded on them complete as usual.
class HeldOffloadStreams final : public testing::ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;

  Status CopyToHostAsync(void* dst, DeviceBuffer src, int64_t offset, int64_t bytes,
                         Stream stream) override {
    Queued(stream);
    return ForwardingDevice::CopyToHostAsync(dst, src, offset, bytes, stream);
  }
  Status CopyToDeviceAsync(DeviceBuffer dst, int64_t offset, const void* src, int64_t bytes,
                           Stream stream) override {
    Queued(stream);
    return ForwardingDevice::CopyToDeviceAsync(dst, offset, src, bytes, stream);
  }
  Status Synchronize(Stream stream) override {
    if (Offload(stream)) {
      std::unique_lock lock(mu_);
      if (queued_ > 0 && !released_ && !cv_.wait_for(lock, kWatchdog, [&] { return released_; })) {
        watchdog_fired_ = true;
        released_ = true;
      }
    }
    return ForwardingDevice::Synchronize(stream);
  }
  // The streams drain from now on.
  void Release() {
    {
      std::lock_guard lock(mu_);
      if (!released_) queued_at_release_ = queued_;
      released_ = true;
    }
    cv_.notify_all();
  }
  bool watchdog_fired() {
    std::lock_guard lock(mu_);
    return watchdog_fired_;
  }
  // Offload copies queued before Release() (0 if it came by the watchdog).
  int queued_at_release() {
    std::lock_guard lock(mu_);
    return queued_at_release_;
  }

 private:
  static bool Offload(Stream s) { return s == Stream::kDeviceToHost || s == Stream::kHostToDevice; }
  void Queued(Stream stream) {
    if (!Offload(stream)) return;
    std::lock_guard lock(mu_);
    ++queued_;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  int queued_ = 0, queued_at_release_ = 0;
  bool released_ = false, watchdog_fired_ = false;
};

TEST(ReplayStreams, MessagesGoOutWhileTheOffloadStreamsCannotDrain) {
  // Tiny GPT, 2 stages of 2 layers, 4 micro-batches of sequence 64 under
  // 1F1B, every activation offloaded, --verify. Each rank's offload streams
  // stay undrainable until its peer has received a message from it. Stage 0
  // queues micro-batch 0's evictions on its device-to-host stream before its
  // first send; stage 1 its first recv before any prefetch, and its
  // prefetches before its first gradient send. A send that drained the
  // device-to-host stream, or a recv that queued its copy on (and drained)
  // the host-to-device stream, would wait for the peer, which waits for it:
  // only the watchdog would end that. Both stages then send and receive 4
  // messages of 1 × 64 × 256 × 4 = 64 KiB a step.
  constexpr int64_t kMicroBatches = 4;
  constexpr int64_t kSeq = 64;
  constexpr int64_t kMessageBytes = 1 * kSeq * 256 * 4;
  const traces::Trace stages[2] = {TinyGptTrace(1, kSeq, 2, 0), TinyGptTrace(1, kSeq, 2, 1)};
  ThreadRanks all(2, /*dp=*/1);
  ThreadRanks::Rank r0(all, 0), r1(all, 1);
  ThreadRanks::Rank* ranks[2] = {&r0, &r1};
  std::unique_ptr<HeldOffloadStreams> devices[2];
  for (int r = 0; r < 2; ++r) {
    DeviceOptions d;
    d.capacity_bytes = CpuOptions("").device_memory_bytes;
    d.cpu_pin_threads = false;  // two ranks on one machine
    auto inner = MakeDevice(BackendChoice::kCpu, d, nullptr);
    ASSERT_TRUE(inner.ok()) << inner.status().ToString();
    devices[r] = std::make_unique<HeldOffloadStreams>(std::move(*inner));
  }
  // A rank's receive releases the sender's streams.
  r1.on_receive = [&] { devices[0]->Release(); };
  r0.on_receive = [&] { devices[1]->Release(); };
  TempDir dirs[2];
  Result<ReplayResult> results[2] = {Status::Internal("not run"), Status::Internal("not run")};
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      ReplayOptions o = CpuOptions(dirs[r].path());
      o.sync = ranks[r];
      o.verify = true;
      o.device = devices[r].get();
      traces::Plan plan = traces::OffloadAllPlan(stages[r]);
      plan.pp = 2;
      plan.dp = 1;
      plan.num_micro_batches = kMicroBatches;
      plan.schedule = "1f1b";
      results[r] = Replay(stages[r], plan, o, "stage plan");
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].status().ToString();
    EXPECT_FALSE(devices[r]->watchdog_fired())
        << "rank " << r << " waited for an offload stream to drain before its peer had a message";
    // The offload streams did hold copies when the peer's message arrived.
    EXPECT_GT(devices[r]->queued_at_release(), 0) << "rank " << r;
    EXPECT_TRUE(results[r]->verified);
    EXPECT_EQ(results[r]->pipeline.messages_sent, kMicroBatches);
    EXPECT_EQ(results[r]->pipeline.messages_received, kMicroBatches);
    EXPECT_EQ(results[r]->pipeline.bytes_sent, kMicroBatches * kMessageBytes);
    EXPECT_EQ(results[r]->pipeline.bytes_received, kMicroBatches * kMessageBytes);
    EXPECT_TRUE(ListTree(dirs[r].path()).empty());
    // Two steps (warm-up + 1) of 4 sends and 4 receives.
    EXPECT_EQ(ranks[r]->sends, 2 * kMicroBatches);
    EXPECT_EQ(ranks[r]->receives, 2 * kMicroBatches);
  }
}

}  // namespace
}  // namespace ssdtrain::exec

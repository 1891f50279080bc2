// A multi-threaded stress test of the offload engine: writers, readers and
// removers at once, with the bandwidth cap on and -EAGAIN, short and (in the
// second case) EIO faults injected. Every byte read back is checked; no file
// is left. Bounded: 4 threads x 100 rounds of tensors up to 200 KB (a second or
// two in a normal build); meant to run under ThreadSanitizer and
// AddressSanitizer too (see exec/README.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "exec/fault_backend.h"
#include "exec/offload_engine.h"
#include "exec/tests/io_fault_util.h"
#include "exec/tests/io_test_util.h"

namespace ssdtrain::exec {
namespace {

using testing::ListTree;
using testing::RandomBytes;
using testing::Rule;
using testing::TempDir;

constexpr int kThreads = 4;
constexpr int kRounds = 100;
constexpr int64_t kBlock = 64 * 1024;
constexpr int kDepth = 8;
constexpr int64_t kMaxTensor = 200 * 1000;
// Per thread, tensor ids [thread * kIdStride, ...): no two threads share one.
constexpr traces::TensorId kIdStride = 100000;

// Tallies of one stress run.
struct Tally {
  std::atomic<int64_t> verified{0};    // reads whose bytes matched
  std::atomic<int64_t> mismatched{0};  // reads that returned OK with wrong bytes: never allowed
  std::atomic<int64_t> gone{0};        // reads refused because RemoveAll came first
  std::atomic<int64_t> failed{0};      // calls that failed (only with EIO injected)
  std::atomic<int64_t> unexpected{0};  // any other outcome
};

class EngineStress : public ::testing::Test {
 protected:
  std::unique_ptr<OffloadEngine> Make(std::vector<FaultRule> rules) {
    auto inner = MakeIoBackend(BackendKind::kAuto, kDepth, [](std::string_view) {});
    EXPECT_TRUE(inner.ok());
    FaultOptions f;
    f.rules = std::move(rules);
    auto backend = std::make_unique<FaultBackend>(std::move(*inner), std::move(f));
    fault_ = backend.get();
    OffloadOptions o;
    o.dirs = {tmp_.Sub("a"), tmp_.Sub("b")};
    o.block_size = kBlock;
    o.queue_depth = kDepth;
    o.staging_bytes = 4 << 20;
    o.bandwidth_cap_bytes_per_s = 4e9;  // a 4 GB/s link: held, not slow
    o.warn = [](std::string_view) {};
    auto e = OffloadEngine::Create(std::move(o), std::move(backend));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(*e) : nullptr;
  }

  // One worker: each round writes one to three tensors (own files, a shared
  // file at aligned offsets, staging leases, unaligned heap buffers), reads
  // each back and checks it, and removes it. `eio`: an EIO is injected, so
  // calls may fail (counted in `failed`); otherwise any failure is unexpected.
  static void Work(OffloadEngine* engine, int thread, bool eio, Tally* tally) {
    std::mt19937_64 rng(static_cast<uint64_t>(thread) * 7919 + 1);
    const std::vector<char> pool = RandomBytes(kMaxTensor + 4096, 100 + thread);
    for (int round = 0; round < kRounds; ++round) {
      const int n = 1 + static_cast<int>(rng() % 3);
      struct Item {
        TensorKey key;
        int64_t bytes = 0;
        int64_t skew = 0;  // where in `pool` the bytes start (misaligns the source)
        StagingLease lease;
        Ticket ticket;
        bool started = false;
      };
      std::vector<Item> items(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        Item& it = items[static_cast<size_t>(i)];
        it.key.tensor = thread * kIdStride + round * 3 + i;
        it.bytes = 1 + static_cast<int64_t>(rng() % kMaxTensor);
        it.skew = static_cast<int64_t>(rng() % 4096);
        if (i == 1) {
          it.key.file = "shared-" + std::to_string(thread) + ".bin";
          it.key.offset = 0;
        } else if (i == 2) {
          it.key.file = "shared-" + std::to_string(thread) + ".bin";
          it.key.offset = 256 * 1024;  // past tensor 1's [0, 200 KB rounded up)
        }
        it.key.device = static_cast<int>(rng() % 3) - 1;  // -1, 0 or 1
        const char* src = pool.data() + it.skew;
        if (rng() % 2 == 0) {
          auto lease = engine->AcquireStaging(it.bytes);
          if (lease.ok()) {
            it.lease = std::move(*lease);
            std::memcpy(it.lease.data(), src, static_cast<size_t>(it.bytes));
            src = static_cast<const char*>(it.lease.data());
          } else if (!eio) {
            tally->unexpected++;
          }
        }
        auto t = engine->WriteAsync(it.key, src, it.bytes);
        if (t.ok()) {
          it.ticket = *t;
          it.started = true;
        } else {
          (eio ? tally->failed : tally->unexpected)++;
        }
      }
      for (Item& it : items) {
        if (!it.started) continue;
        Status s = engine->Wait(it.ticket);
        if (!s.ok()) {
          (eio ? tally->failed : tally->unexpected)++;
          it.started = false;
        }
      }
      for (Item& it : items) {
        if (!it.started) continue;
        std::vector<char> back(static_cast<size_t>(it.bytes) + 1, 0);
        char* dst = back.data() + 1;  // unaligned on purpose
        StagingLease read_lease;
        if (it.lease) {
          auto l = engine->AcquireStaging(it.bytes);
          if (l.ok()) {
            read_lease = std::move(*l);
            dst = static_cast<char*>(read_lease.data());
          }
        }
        Status s = engine->Read(it.key, dst, it.bytes);
        if (s.ok()) {
          const bool same =
              std::memcmp(dst, pool.data() + it.skew, static_cast<size_t>(it.bytes)) == 0;
          (same ? tally->verified : tally->mismatched)++;
        } else if (s.code() == Status::Code::kNotFound) {
          tally->gone++;
        } else {
          (eio ? tally->failed : tally->unexpected)++;
        }
        Status r = engine->Remove(it.key.tensor);
        if (!r.ok() && r.code() != Status::Code::kNotFound && !eio) tally->unexpected++;
      }
    }
  }

  TempDir tmp_;
  FaultBackend* fault_ = nullptr;
};

TEST_F(EngineStress, WritersReadersAndRemoversWithEagainShortAndTheCap) {
  // EAGAIN and half-length transfers on writes and reads at several points;
  // a fifth thread calls RemoveAll now and then, so some reads find their
  // tensor gone (NotFound), never wrong bytes. Each thread writes at least
  // one tensor per round and reads back what RemoveAll left: verified + gone
  // = the tensors written.
  auto engine = Make(
      {Rule(IoOp::kWrite, 5, FaultKind::kEagain, 3), Rule(IoOp::kWrite, 40, FaultKind::kShort, 6),
       Rule(IoOp::kWrite, 90, FaultKind::kEagain, 2), Rule(IoOp::kRead, 3, FaultKind::kShort, 5),
       Rule(IoOp::kRead, 30, FaultKind::kEagain, 4)});
  ASSERT_NE(engine, nullptr);
  Tally tally;
  std::atomic<bool> done{false};
  std::thread remover([&] {
    while (!done) {
      EXPECT_TRUE(engine->RemoveAll().ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(15));
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) workers.emplace_back(Work, engine.get(), t, false, &tally);
  for (std::thread& w : workers) w.join();
  done = true;
  remover.join();
  EXPECT_EQ(tally.mismatched, 0);
  EXPECT_EQ(tally.unexpected, 0);
  EXPECT_EQ(tally.failed, 0);
  EXPECT_GE(tally.verified + tally.gone, kThreads * kRounds);
  EXPECT_GT(tally.verified, 0);
  EXPECT_GT(fault_->injected(), 0);
  EXPECT_EQ(fault_->outstanding(), 0);
  const OffloadStats stats = engine->Stats();
  EXPECT_GT(stats.eagain_resubmits, 0);
  EXPECT_GT(stats.short_continuations, 0);
  ASSERT_TRUE(engine->RemoveAll().ok());
  for (const std::string& entry : ListTree(tmp_.path())) {
    // Only "a", "b" and their run directories may remain while the engine lives.
    EXPECT_LE(std::count(entry.begin(), entry.end(), '/'), 1) << "left behind: " << entry;
  }
  engine.reset();
  std::vector<std::string> left = ListTree(tmp_.path());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"a", "b"}));
}

TEST_F(EngineStress, AnEioMidStressStopsEveryThreadCleanly) {
  // The 120th write request fails with EIO while four threads write and read:
  // every call after it fails (sticky), no read returns wrong bytes, nothing
  // hangs, and no offload file is left.
  auto engine = Make({Rule(IoOp::kWrite, 20, FaultKind::kEagain, 3),
                      Rule(IoOp::kRead, 10, FaultKind::kShort, 3),
                      Rule(IoOp::kWrite, 120, FaultKind::kEio, 1)});
  ASSERT_NE(engine, nullptr);
  Tally tally;
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) workers.emplace_back(Work, engine.get(), t, true, &tally);
  for (std::thread& w : workers) w.join();
  EXPECT_EQ(tally.mismatched, 0);
  EXPECT_EQ(tally.unexpected, 0);
  EXPECT_GT(tally.failed, 0);
  EXPECT_EQ(fault_->outstanding(), 0);
  Status after = engine->Write(TensorKey{}, "x", 1);
  EXPECT_EQ(after.code(), Status::Code::kIoError) << after.ToString();
  for (const std::string& entry : ListTree(tmp_.path())) {
    EXPECT_LE(std::count(entry.begin(), entry.end(), '/'), 1) << "left behind: " << entry;
  }
  engine.reset();
  std::vector<std::string> left = ListTree(tmp_.path());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace ssdtrain::exec

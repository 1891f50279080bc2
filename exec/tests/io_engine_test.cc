// The offload engine's conformance suite, run against every IoBackend
// (io_uring, posix, and the fault backend with no faults) on real files under a
// temporary directory on the disk.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "exec/fault_backend.h"
#include "exec/offload_engine.h"
#include "exec/posix_backend.h"
#include "exec/tests/io_test_util.h"
#include "exec/uring_backend.h"

namespace ssdtrain::exec {
namespace {

using testing::ListTree;
using testing::RandomBytes;
using testing::TempDir;

TensorKey Key(traces::TensorId t) {
  TensorKey k;
  k.tensor = t;
  return k;
}

// Small blocks so that modest tensors span several extents.
constexpr int64_t kBlock = 64 * 1024;
constexpr int kDepth = 8;

class OffloadEngineConformance : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<OffloadEngine> Make(std::vector<std::string> dirs, int64_t staging = 1 << 20,
                                      double cap_bytes_per_s = 0, iovec external = {nullptr, 0},
                                      int depth = kDepth) {
    Result<std::unique_ptr<IoBackend>> b =
        GetParam() == "posix" ? MakePosixBackend(depth) : MakeUringBackend(depth);
    if (!b.ok()) return nullptr;
    std::unique_ptr<IoBackend> backend = std::move(*b);
    if (GetParam() == "fault") {
      backend = std::make_unique<FaultBackend>(std::move(backend), FaultOptions{});
    }
    OffloadOptions o;
    o.dirs = std::move(dirs);
    o.block_size = kBlock;
    o.queue_depth = depth;
    o.staging_bytes = staging;
    o.bandwidth_cap_bytes_per_s = cap_bytes_per_s;
    o.external_staging = external;
    o.warn = [this](std::string_view w) { warnings_.emplace_back(w); };
    auto e = OffloadEngine::Create(std::move(o), std::move(backend));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(*e) : nullptr;
  }

  TempDir tmp_;
  std::vector<std::string> warnings_;
};

#define MAKE_OR_SKIP(var, ...)  \
  auto var = Make(__VA_ARGS__); \
  if (var == nullptr) GTEST_SKIP() << GetParam() << " unavailable here"

// A cap of 20 MB/s makes the SSD path a 20 MB/s link: 2 MiB (2,097,152 bytes,
// 32 extents of 64 KiB) written alone, then read alone, cannot complete in
// under 2,097,152 / 2e7 s = 104.9 ms each, however fast the disk; and the bytes
// still round-trip.
TEST_P(OffloadEngineConformance, BandwidthCapHoldsEachDirectionToItsRate) {
  constexpr double kCap = 20e6;
  constexpr int64_t kBytes = int64_t{2} << 20;
  constexpr int64_t kMinNs = static_cast<int64_t>(kBytes / kCap * 1e9);
  MAKE_OR_SKIP(engine, {tmp_.path()}, 1 << 20, kCap);
  const std::vector<char> data = RandomBytes(kBytes, 7);
  std::vector<char> back(kBytes);
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine->Write(Key(1), data.data(), kBytes).ok());
  const int64_t write_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  start = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine->Read(Key(1), back.data(), kBytes).ok());
  const int64_t read_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_GE(write_ns, kMinNs);
  EXPECT_GE(read_ns, kMinNs);
  EXPECT_EQ(back, data);
}

// Reads and writes share the capped link, as the simulator's drive shares its
// rate: a 2 MiB write and a 2 MiB read issued together cannot both be done in
// under 2 · 2,097,152 / 2e7 s = 209.7 ms (a link per direction: 104.9 ms).
TEST_P(OffloadEngineConformance, BandwidthCapIsSharedByReadsAndWrites) {
  constexpr double kCap = 20e6;
  constexpr int64_t kBytes = int64_t{2} << 20;
  constexpr int64_t kMinNs = static_cast<int64_t>(2 * kBytes / kCap * 1e9);
  MAKE_OR_SKIP(engine, {tmp_.path()}, 1 << 20, kCap);
  const std::vector<char> data = RandomBytes(kBytes, 8);
  std::vector<char> back(kBytes);
  ASSERT_TRUE(engine->Write(Key(1), data.data(), kBytes).ok());
  const auto start = std::chrono::steady_clock::now();
  auto w = engine->WriteAsync(Key(2), data.data(), kBytes);
  auto r = engine->ReadAsync(Key(1), back.data(), kBytes);
  ASSERT_TRUE(w.ok() && r.ok());
  ASSERT_TRUE(engine->Wait(*w).ok());
  ASSERT_TRUE(engine->Wait(*r).ok());
  const int64_t both_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_GE(both_ns, kMinNs);
  EXPECT_EQ(back, data);
}

// The two directions split the link evenly instead of a read waiting behind
// every queued write (as the simulator's SSD serves its read and write queues):
// a 32 MiB write, then a 1 MiB read issued while the write's extents hold every
// slot. Sharing, the read's 1 MiB crosses at 10 MB/s while the write has moved
// 1 of its 32 MiB: the read is done with 31 MiB of the write (about 1.6 s at the
// whole rate) still to go, a margin no delay of this thread on a loaded machine
// comes near (8 MiB left 350 ms). Behind the write it would finish last.
TEST_P(OffloadEngineConformance, BandwidthCapServesAReadBeforeTheQueuedWrites) {
  constexpr double kCap = 20e6;
  constexpr int64_t kWrite = int64_t{32} << 20, kRead = int64_t{1} << 20;
  MAKE_OR_SKIP(engine, {tmp_.path()}, 1 << 20, kCap);
  const std::vector<char> small = RandomBytes(kRead, 9), big = RandomBytes(kWrite, 10);
  std::vector<char> back(kRead);
  ASSERT_TRUE(engine->Write(Key(1), small.data(), kRead).ok());
  auto w = engine->WriteAsync(Key(2), big.data(), kWrite);
  ASSERT_TRUE(w.ok());
  auto r = engine->ReadAsync(Key(1), back.data(), kRead);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(engine->Wait(*r).ok());
  EXPECT_FALSE(engine->Done(*w)) << "the read waited for the whole write";
  ASSERT_TRUE(engine->Wait(*w).ok());
  EXPECT_EQ(back, small);
}

// With one request in flight, every extent's completion is held until the
// 20 MB/s link has moved it; releasing it frees the only slot after the I/O
// loop has taken its blocks for that pass. The loop must go round again for
// the next extent instead of waiting for a completion that cannot come (it
// did wait: a hang, seen under load with a deeper queue). 16 extents of 64 KiB
// take at least 52 ms; a 20 s guard turns a hang into a failure.
TEST_P(OffloadEngineConformance, CappedWriteWithOneSlotKeepsGoingAfterEachRelease) {
  MAKE_OR_SKIP(engine, {tmp_.path()}, 1 << 20, 20e6, {nullptr, 0}, /*depth=*/1);
  const std::vector<char> data = RandomBytes(16 * kBlock, 11);
  std::vector<char> back(data.size());
  auto io = std::async(std::launch::async, [&] {
    Status w = engine->Write(Key(1), data.data(), static_cast<int64_t>(data.size()));
    return w.ok() ? engine->Read(Key(1), back.data(), static_cast<int64_t>(back.size())) : w;
  });
  if (io.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "the capped write/read did not finish in 20 s: the I/O loop is stuck";
    std::_Exit(1);  // the engine's thread is stuck; do not hang in its destructor
  }
  const Status st = io.get();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(back, data);
}

TEST_P(OffloadEngineConformance, RoundTripsOddSizesExactly) {
  // Sizes around the 4096 alignment and the 64 KiB block: 1, 4095, 4097,
  // 65537 (one block + 1 byte), 3*65536 - 123 (a 65413-byte tail).
  MAKE_OR_SKIP(engine, {tmp_.path()});
  const std::vector<int64_t> sizes = {1, 4095, 4097, kBlock + 1, 3 * kBlock - 123};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const auto data = RandomBytes(sizes[i], i + 1);
    TensorKey key = Key(static_cast<int64_t>(i));
    ASSERT_TRUE(engine->Write(key, data.data(), sizes[i]).ok());
    std::vector<char> back(static_cast<size_t>(sizes[i]), 0);
    Status s = engine->Read(key, back.data(), sizes[i]);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(back, data) << "size " << sizes[i];
  }
  // Payload bytes only: 1 + 4095 + 4097 + 65537 + 196485 = 270215 each way.
  EXPECT_EQ(engine->Stats().bytes_written, 270215);
  EXPECT_EQ(engine->Stats().bytes_read, 270215);
}

TEST_P(OffloadEngineConformance, UnalignedBuffersRoundTrip) {
  // A source and destination that start 3 bytes into a buffer go through bounces.
  MAKE_OR_SKIP(engine, {tmp_.path()});
  const int64_t n = 2 * kBlock + 999;
  auto data = RandomBytes(n + 3, 7);
  ASSERT_TRUE(engine->Write(Key(1), data.data() + 3, n).ok());
  std::vector<char> back(static_cast<size_t>(n + 5));
  ASSERT_TRUE(engine->Read(Key(1), back.data() + 5, n).ok());
  EXPECT_EQ(0, std::memcmp(back.data() + 5, data.data() + 3, static_cast<size_t>(n)));
  EXPECT_GT(engine->Stats().bounce_copies, 0);
}

TEST_P(OffloadEngineConformance, StagingLeaseRoundTripsWithoutCopies) {
  MAKE_OR_SKIP(engine, {tmp_.path()});
  const int64_t n = 3 * kBlock + 10;
  auto lease = engine->AcquireStaging(n);
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->capacity(), 3 * kBlock + 4096);  // rounded up to the page
  const auto data = RandomBytes(n, 3);
  std::memcpy(lease->data(), data.data(), static_cast<size_t>(n));
  ASSERT_TRUE(engine->Write(Key(9), lease->data(), n).ok());
  std::memset(lease->data(), 0, static_cast<size_t>(n));
  ASSERT_TRUE(engine->Read(Key(9), lease->data(), n).ok());
  EXPECT_EQ(0, std::memcmp(lease->data(), data.data(), static_cast<size_t>(n)));
}

TEST_P(OffloadEngineConformance, ExternalStagingRoundTripsWithoutCopies) {
  // The replay's own pinned region: registered as a fixed buffer, used in
  // place (odd sizes included: the padding up to the page is the caller's).
  const size_t region = 2 << 20;
  void* p = mmap(nullptr, region, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* base = static_cast<char*>(p);
  {
    MAKE_OR_SKIP(engine, {tmp_.path()}, 1 << 20, 0, iovec{p, region});
    const int64_t n = 3 * kBlock + 10;
    const auto data = RandomBytes(n, 5);
    std::memcpy(base + 4096, data.data(), static_cast<size_t>(n));
    ASSERT_TRUE(engine->Write(Key(4), base + 4096, n).ok());
    ASSERT_TRUE(engine->Read(Key(4), base + (1 << 20), n).ok());
    EXPECT_EQ(0, std::memcmp(base + (1 << 20), data.data(), static_cast<size_t>(n)));
    EXPECT_EQ(engine->Stats().bounce_copies, 0);
    if (GetParam() == "io_uring") {
      EXPECT_TRUE(engine->buffers_registered());
    }
    EXPECT_TRUE(warnings_.empty()) << warnings_.front();
  }
  munmap(p, region);
}

TEST(OffloadEngine, RefusesUnalignedExternalStaging) {
  TempDir tmp;
  std::vector<char> memory(3 * 4096);
  char* odd = memory.data() + (4096 - reinterpret_cast<uintptr_t>(memory.data()) % 4096) + 8;
  OffloadOptions o;
  o.dirs = {tmp.path()};
  o.external_staging = iovec{odd, 4096};
  auto e = OffloadEngine::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("external staging"), std::string::npos)
      << e.status().ToString();
}

TEST_P(OffloadEngineConformance, StripesTensorsOverSeveralDirectories) {
  // Three directories; tensor t of two stripes starts on dir t % 3 (traces/drives.h) and
  // ends on the next, so tensors 0..5 put four files in each.
  const std::vector<std::string> dirs = {tmp_.Sub("ssd0"), tmp_.Sub("ssd1"), tmp_.Sub("ssd2")};
  MAKE_OR_SKIP(engine, dirs);
  std::vector<std::vector<char>> data;
  for (int t = 0; t < 6; ++t) {
    data.push_back(RandomBytes(kBlock + 1 + t, 100 + t));
    ASSERT_TRUE(engine->Write(Key(t), data.back().data(), kBlock + 1 + t).ok());
  }
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(ListTree(dirs[static_cast<size_t>(d)]).size(), 5u);  // run dir + 4 files
    auto path = engine->FilePath(d);
    ASSERT_TRUE(path.ok());
    EXPECT_EQ(path->rfind(dirs[static_cast<size_t>(d)], 0), 0u) << *path;
  }
  for (int t = 0; t < 6; ++t) {
    std::vector<char> back(static_cast<size_t>(kBlock + 1 + t));
    ASSERT_TRUE(engine->Read(Key(t), back.data(), kBlock + 1 + t).ok());
    EXPECT_EQ(back, data[static_cast<size_t>(t)]);
  }
  engine.reset();
  for (const auto& d : dirs) EXPECT_TRUE(ListTree(d).empty()) << d;
}

TEST_P(OffloadEngineConformance, ManyTensorsInFlightTogether) {
  // 64 tensors of 40000 bytes queued at once (more than the queue depth of 8),
  // then all read back in flight together with a second batch of writes.
  MAKE_OR_SKIP(engine, {tmp_.path()});
  constexpr int kN = 64;
  constexpr int64_t kBytes = 40000;
  std::vector<std::vector<char>> data;
  std::vector<Ticket> tickets;
  for (int t = 0; t < 2 * kN; ++t) data.push_back(RandomBytes(kBytes, 1000 + t));
  for (int t = 0; t < kN; ++t) {
    auto ticket = engine->WriteAsync(Key(t), data[static_cast<size_t>(t)].data(), kBytes);
    ASSERT_TRUE(ticket.ok());
    tickets.push_back(*ticket);
  }
  for (Ticket t : tickets) ASSERT_TRUE(engine->Wait(t).ok());
  tickets.clear();
  std::vector<std::vector<char>> back(kN, std::vector<char>(kBytes));
  for (int t = 0; t < kN; ++t) {
    auto r = engine->ReadAsync(Key(t), back[static_cast<size_t>(t)].data(), kBytes);
    ASSERT_TRUE(r.ok());
    tickets.push_back(*r);
    auto w = engine->WriteAsync(Key(kN + t), data[static_cast<size_t>(kN + t)].data(), kBytes);
    ASSERT_TRUE(w.ok());
    tickets.push_back(*w);
  }
  for (Ticket t : tickets) ASSERT_TRUE(engine->Wait(t).ok());
  for (int t = 0; t < kN; ++t)
    EXPECT_EQ(back[static_cast<size_t>(t)], data[static_cast<size_t>(t)]);
  EXPECT_EQ(engine->Stats().bytes_written, 2 * kN * kBytes);
  EXPECT_EQ(engine->Stats().bytes_read, kN * kBytes);
}

TEST_P(OffloadEngineConformance, TensorsShareAFileAtAlignedOffsets) {
  MAKE_OR_SKIP(engine, {tmp_.path()});
  const auto a = RandomBytes(5000, 1), b = RandomBytes(7000, 2);
  ASSERT_TRUE(engine->Write({1, "shared.bin", 0, 0}, a.data(), 5000).ok());
  ASSERT_TRUE(engine->Write({2, "shared.bin", 0, 8192}, b.data(), 7000).ok());
  // [0, 8192) and [8192, 16384): adjacent, no overlap. A third at 4096 overlaps.
  EXPECT_EQ(engine->Write({3, "shared.bin", 0, 4096}, a.data(), 100).code(),
            Status::Code::kInvalidArgument);
  ASSERT_TRUE(engine->Remove(1).ok());
  std::vector<char> back(7000);
  ASSERT_TRUE(engine->Read(Key(2), back.data(), 7000).ok());
  EXPECT_EQ(back, b);
  ASSERT_TRUE(engine->Remove(2).ok());
  EXPECT_EQ(ListTree(tmp_.path()).size(), 1u);  // only the run directory
}

TEST_P(OffloadEngineConformance, ChecksumMismatchNamesTensorAndFile) {
  MAKE_OR_SKIP(engine, {tmp_.path()});
  const int64_t n = 2 * kBlock;
  const auto data = RandomBytes(n, 11);
  ASSERT_TRUE(engine->Write(Key(42), data.data(), n).ok());
  auto path = engine->FilePath(42);
  ASSERT_TRUE(path.ok());
  // Flip one byte in the second extent, behind the engine's back.
  const int fd = ::open(path->c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const char junk = static_cast<char>(data[kBlock + 17] ^ 0x01);
  ASSERT_EQ(::pwrite(fd, &junk, 1, kBlock + 17), 1);
  ::fsync(fd);
  ::close(fd);
  std::vector<char> back(static_cast<size_t>(n));
  Status s = engine->Read(Key(42), back.data(), n);
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_NE(s.message().find("tensor 42"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(*path), std::string::npos) << s.message();
  // The failure removed every offload file; only the (empty) run directory is left.
  EXPECT_EQ(ListTree(tmp_.path()).size(), 1u);
  engine.reset();
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
}

TEST_P(OffloadEngineConformance, RefusesFileNamesThatEscapeTheDirectory) {
  MAKE_OR_SKIP(engine, {tmp_.path()});
  const char byte = 1;
  for (const std::string name : {"../escape.bin", "/tmp/abs.bin", "a/b.bin", "..", ""}) {
    if (name.empty()) continue;  // empty means "engine-chosen name", which is allowed
    Status s = engine->Write({1, name, -1, 0}, &byte, 1);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << name;
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() + "/../escape.bin"));
  // A symlink planted in the offload directory is refused by the plan check.
  std::filesystem::create_symlink("/etc/passwd", tmp_.path() + "/link.bin");
  EXPECT_FALSE(CheckOffloadFileName("link.bin", tmp_.path()).ok());
  EXPECT_TRUE(CheckOffloadFileName("t1.bin", tmp_.path()).ok());
}

TEST_P(OffloadEngineConformance, DestructionRemovesEveryFile) {
  MAKE_OR_SKIP(engine, {tmp_.path()});
  const auto data = RandomBytes(10000, 5);
  for (int t = 0; t < 5; ++t) ASSERT_TRUE(engine->Write(Key(t), data.data(), 10000).ok());
  EXPECT_EQ(ListTree(tmp_.path()).size(), 6u);  // run dir + 5 files
  engine.reset();
  EXPECT_TRUE(ListTree(tmp_.path()).empty());
}

TEST_P(OffloadEngineConformance, ReadBeforeWriteAndWrongSizeAreRefused) {
  MAKE_OR_SKIP(engine, {tmp_.path()});
  std::vector<char> buf(100);
  EXPECT_EQ(engine->Read(Key(5), buf.data(), 100).code(), Status::Code::kNotFound);
  ASSERT_TRUE(engine->Write(Key(5), buf.data(), 100).ok());
  EXPECT_EQ(engine->Read(Key(5), buf.data(), 99).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(engine->Write(Key(5), buf.data(), 100).code(), Status::Code::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(AllBackends, OffloadEngineConformance,
                         ::testing::Values("io_uring", "posix", "fault"));

TEST(CheckPlanFileNames, NamesThePlacementAndField) {
  traces::Plan plan;
  traces::Placement p;
  p.tensor = 7;
  p.action = traces::TensorAction::kOffloadSsd;
  p.file = "../../etc/x";
  plan.placements.push_back(p);
  Status s = CheckPlanFileNames(plan, "plan.json");
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("plan.json: placements[0] (tensor 7).file"), std::string::npos)
      << s.message();
  plan.placements[0].file = "t7.bin";
  plan.placements[0].offset = 100;  // not a multiple of 4096
  EXPECT_NE(CheckPlanFileNames(plan, "plan.json").message().find(".offset"), std::string::npos);
  plan.placements[0].offset = 8192;
  EXPECT_TRUE(CheckPlanFileNames(plan, "plan.json").ok());
}

}  // namespace
}  // namespace ssdtrain::exec

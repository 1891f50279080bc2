#include "exec/bench_io.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <vector>

#include "exec/device.h"
#include "exec/offload_engine.h"

namespace ssdtrain::exec {
namespace {

using Clock = std::chrono::steady_clock;

// The file bench-io writes, inside the engine's run directory.
constexpr const char* kBenchFile = "bench-io.bin";

int64_t Ns(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

// Makes every 4 KiB sector of block `index` unique before it is written (as
// fio's default scramble_buffers does), so that a disk or host that
// deduplicates or caches repeated content sees no repeats: the slots are
// reused every queue_depth blocks. `run` differs from run to run, so that
// neither does a host that remembers the previous run's blocks (on this
// machine's virtual disk a run after an identical one wrote 2-3x faster).
// One store per sector, so the cost stays out of the measurement.
void StampBlock(void* data, int64_t bytes, int64_t index, uint64_t run) {
  auto* words = static_cast<uint64_t*>(data);
  for (int64_t sector = 0; sector * 4096 < bytes; ++sector) {
    words[sector * 512] =
        PatternWord(static_cast<uint64_t>(index) ^ run, static_cast<uint64_t>(sector));
  }
}

// Runs one direction: block i is tensor i, in directory i % n at offset
// (i / n)·block_size, from staging slot i % slots, with every slot's ticket
// outstanding (queue_depth per directory, as fio's iodepth per job).
Status RunPhase(OffloadEngine& engine, IoOp op, const BenchIoOptions& o, int64_t blocks,
                std::vector<StagingLease>& slots, uint64_t run, int64_t* elapsed_ns) {
  std::deque<std::pair<Ticket, size_t>> outstanding;
  const Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < blocks; ++i) {
    const size_t slot = static_cast<size_t>(i % static_cast<int64_t>(slots.size()));
    if (outstanding.size() == slots.size()) {
      SSDTRAIN_RETURN_IF_ERROR(engine.Wait(outstanding.front().first));
      outstanding.pop_front();
    }
    const int64_t bytes = std::min(o.block_size, o.size - i * o.block_size);
    if (op == IoOp::kWrite) StampBlock(slots[slot].data(), bytes, i, run);
    const auto n = static_cast<int64_t>(o.dirs.size());
    TensorKey key{i, kBenchFile, static_cast<int>(i % n), i / n * o.block_size};
    Result<Ticket> t = op == IoOp::kWrite ? engine.WriteAsync(key, slots[slot].data(), bytes)
                                          : engine.ReadAsync(key, slots[slot].data(), bytes);
    if (!t.ok()) return t.status();
    outstanding.emplace_back(*t, slot);
  }
  while (!outstanding.empty()) {
    SSDTRAIN_RETURN_IF_ERROR(engine.Wait(outstanding.front().first));
    outstanding.pop_front();
  }
  *elapsed_ns = Ns(Clock::now() - start);
  return Status::Ok();
}

}  // namespace

Result<BenchIoResult> RunBenchIo(const BenchIoOptions& o) {
  if (o.size <= 0) {
    return Status::InvalidArgument("--size must be positive, got " + std::to_string(o.size));
  }
  if (o.dirs.empty()) return Status::InvalidArgument("no directory given; pass --dir DIR");
  const int n = static_cast<int>(o.dirs.size());
  const int depth = o.queue_depth * n;
  OffloadOptions eo;
  eo.dirs = o.dirs;
  eo.backend = o.backend;
  eo.block_size = o.block_size;
  eo.queue_depth = depth;
  eo.staging_bytes = o.block_size * depth;
  eo.direct_io = o.direct_io;
  eo.allow_buffered_io = o.allow_buffered_io;
  eo.warn = o.warn;
  SSDTRAIN_ASSIGN_OR_RETURN(std::unique_ptr<OffloadEngine> engine, OffloadEngine::Create(eo));
  // Differs from run to run (StampBlock); read once, not per word.
  const auto run = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) << 20;
  std::vector<StagingLease> slots;
  for (int i = 0; i < depth; ++i) {
    SSDTRAIN_ASSIGN_OR_RETURN(StagingLease lease, engine->AcquireStaging(o.block_size));
    // Pseudo-random contents per slot (fio fills its buffers randomly too);
    // StampBlock then makes every block written distinct.
    auto* words = static_cast<uint64_t*>(lease.data());
    for (int64_t w = 0; w < o.block_size / 8; ++w) {
      words[w] = PatternWord(~static_cast<uint64_t>(i) ^ run, static_cast<uint64_t>(w));
    }
    slots.push_back(std::move(lease));
  }
  const int64_t blocks = (o.size + o.block_size - 1) / o.block_size;
  // Lay the files out before timing, as fio does (fallocate once, not per request).
  for (int d = 0; d < n && d < blocks; ++d) {
    const int64_t mine = (blocks - d + n - 1) / n;
    SSDTRAIN_RETURN_IF_ERROR(engine->Preallocate(kBenchFile, d, mine * o.block_size));
  }
  BenchIoResult r;
  r.backend = engine->BackendName();
  r.direct_io = engine->direct_io();
  // The posix backend accepts a registration and ignores it: only io_uring's
  // fixed reads and writes count.
  r.fixed_buffers = r.backend == "io_uring" && engine->buffers_registered();
  r.bytes = o.size;
  SSDTRAIN_RETURN_IF_ERROR(RunPhase(*engine, IoOp::kWrite, o, blocks, slots, run, &r.write_ns));
  SSDTRAIN_RETURN_IF_ERROR(RunPhase(*engine, IoOp::kRead, o, blocks, slots, run, &r.read_ns));
  SSDTRAIN_RETURN_IF_ERROR(engine->RemoveAll());
  return r;
}

}  // namespace ssdtrain::exec

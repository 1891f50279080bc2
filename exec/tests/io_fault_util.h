// What the fault tests share: the engine fixture of io_fault_test.cc,
// io_unwind_test.cc and io_cleanup_test.cc (a fault backend over io_uring, or
// posix where refused), the fault matrix's engine on a named backend
// (io_fault_matrix_test.cc, io_signal_matrix_test.cc), and small helpers.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exec/fault_backend.h"
#include "exec/io_backend.h"
#include "exec/offload_engine.h"
#include "exec/tests/io_test_util.h"

namespace ssdtrain::exec::testing {

inline TensorKey Key(traces::TensorId t) {
  TensorKey k;
  k.tensor = t;
  return k;
}

inline FaultOptions Rules(std::vector<FaultRule> rules) {
  FaultOptions f;
  f.rules = std::move(rules);
  return f;
}

inline FaultRule Rule(IoOp op, int64_t nth, FaultKind kind, int64_t count = 1) {
  FaultRule r;
  r.op = op;
  r.nth = nth;
  r.kind = kind;
  r.count = count;
  return r;
}

inline constexpr int64_t kBlock = 64 * 1024;
inline constexpr int kDepth = 4;

// Only the engine's (empty) run directory may remain while it lives.
inline void ExpectOnlyTheRunDirectory(const std::string& dir) {
  for (const std::string& entry : ListTree(dir)) {
    EXPECT_EQ(entry.find('/'), std::string::npos) << "left behind: " << entry;
  }
}

// 3 blocks and a 100-byte tail: 4 requests; on disk 3 * 65536 + 4096 = 200704 bytes.
inline constexpr int64_t kTensorBytes = 3 * kBlock + 100;
inline constexpr int64_t kTensorDiskBytes = 3 * kBlock + 4096;

inline BackendKind Kind(const std::string& name) { return *ParseBackendKind(name); }

// An engine on `dir` over `backend` ("io_uring" or "posix"), optionally wrapped
// in a fault backend with `rules`; nullptr (and `skip` says why) where the
// backend cannot be made here.
inline std::unique_ptr<OffloadEngine> MakeEngine(const std::string& backend, const std::string& dir,
                                                 std::vector<FaultRule> rules, FaultBackend** fault,
                                                 std::vector<std::string>* warnings,
                                                 std::string* skip,
                                                 bool allow_buffered_io = false) {
  auto inner = MakeIoBackend(Kind(backend), kDepth, [](std::string_view) {});
  if (!inner.ok()) {
    *skip = inner.status().message();
    return nullptr;
  }
  FaultOptions f;
  f.rules = std::move(rules);
  auto wrapped = std::make_unique<FaultBackend>(std::move(*inner), std::move(f));
  if (fault != nullptr) *fault = wrapped.get();
  OffloadOptions o;
  o.dirs = {dir};
  o.block_size = kBlock;
  o.queue_depth = kDepth;
  o.staging_bytes = 0;
  o.allow_buffered_io = allow_buffered_io;
  o.warn = [warnings](std::string_view w) { warnings->emplace_back(w); };
  auto e = OffloadEngine::Create(std::move(o), std::move(wrapped));
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return nullptr;
  EXPECT_EQ((*e)->BackendName(), "fault(" + backend + ")");
  return std::move(*e);
}

class FaultTest : public ::testing::Test {
 protected:
  // An engine on `dir` over a fault backend wrapping io_uring (or posix where
  // io_uring is refused). `fault` points at the backend for its counters.
  std::unique_ptr<OffloadEngine> Make(const std::string& dir, FaultOptions faults,
                                      bool allow_buffered_io = false) {
    auto inner = MakeIoBackend(BackendKind::kAuto, kDepth, [](std::string_view) {});
    EXPECT_TRUE(inner.ok());
    auto backend = std::make_unique<FaultBackend>(std::move(*inner), std::move(faults));
    fault_ = backend.get();
    OffloadOptions o;
    o.dirs = {dir};
    o.block_size = kBlock;
    o.queue_depth = kDepth;
    o.staging_bytes = 1 << 20;
    o.allow_buffered_io = allow_buffered_io;
    o.warn = [this](std::string_view w) { warnings_.emplace_back(w); };
    auto e = OffloadEngine::Create(std::move(o), std::move(backend));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(*e) : nullptr;
  }

  // Only the (empty) run directory may remain while the engine lives.
  void ExpectNoOffloadFiles(const std::string& dir) { ExpectOnlyTheRunDirectory(dir); }

  TempDir tmp_;
  FaultBackend* fault_ = nullptr;
  std::vector<std::string> warnings_;
};

}  // namespace ssdtrain::exec::testing

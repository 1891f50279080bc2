// Striping over several directories (traces/drives.h's rule, which the
// simulator predicts by): each directory receives the bytes the rule gives it,
// to the byte; the bytes come back; a fault on one directory ends the work
// naming that directory's file and leaves nothing in any.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec/fault_backend.h"
#include "exec/offload_engine.h"
#include "exec/tests/io_test_util.h"
#include "exec/uring_backend.h"
#include "traces/drives.h"

namespace ssdtrain::exec {
namespace {

using testing::ListTree;
using testing::RandomBytes;
using testing::TempDir;

constexpr int64_t kStripe = 64 * 1024;

class StripeTest : public ::testing::TestWithParam<int> {
 protected:
  std::vector<std::string> Dirs() {
    std::vector<std::string> dirs;
    for (int d = 0; d < GetParam(); ++d) dirs.push_back(tmp_.Sub("ssd" + std::to_string(d)));
    return dirs;
  }
  std::unique_ptr<OffloadEngine> Make(const std::vector<std::string>& dirs,
                                      FaultOptions faults = {}) {
    auto inner = MakeUringBackend(8);
    if (!inner.ok()) return nullptr;
    auto fault = std::make_unique<FaultBackend>(std::move(*inner), std::move(faults));
    fault_ = fault.get();
    OffloadOptions o;
    o.dirs = dirs;
    o.block_size = kStripe;
    o.queue_depth = 8;
    o.staging_bytes = 1 << 20;
    auto e = OffloadEngine::Create(std::move(o), std::move(fault));
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    return e.ok() ? std::move(*e) : nullptr;
  }
  TempDir tmp_;
  FaultBackend* fault_ = nullptr;
};

TEST_P(StripeTest, EachDirectoryReceivesTheRulesBytesAndTheyComeBack) {
  const int n = GetParam();
  const std::vector<std::string> dirs = Dirs();
  auto engine = Make(dirs);
  if (engine == nullptr) GTEST_SKIP() << "io_uring unavailable here";
  // Sizes around the stripe, several stripes and a tail, on every first drive
  // (and -1: tensor % n), two of them sharing one named file.
  struct Case {
    int64_t bytes;
    int device;
    std::string file;
    int64_t offset;
  };
  const std::vector<Case> cases = {
      {100, 0, "", 0},
      {kStripe, 1, "", 0},
      {kStripe + 1, n - 1, "", 0},
      {7 * kStripe + 12345, 2, "", 0},
      {3 * kStripe, -1, "", 0},
      {5 * kStripe + 4096, 0, "shared.bin", 0},
      {2 * kStripe + 7, 1, "shared.bin", 8 * kStripe},
  };
  std::vector<int64_t> want(static_cast<size_t>(n), 0);
  std::vector<std::vector<char>> data;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    TensorKey key;
    key.tensor = static_cast<traces::TensorId>(i);
    key.device = c.device;
    key.file = c.file;
    key.offset = c.offset;
    data.push_back(RandomBytes(c.bytes, static_cast<uint32_t>(i + 1)));
    ASSERT_TRUE(engine->Write(key, data.back().data(), c.bytes).ok()) << i;
    const int first = c.device >= 0 ? c.device : static_cast<int>(i % static_cast<size_t>(n));
    const std::vector<int64_t> per = traces::StripedBytesPerDrive(c.bytes, kStripe, n, first);
    for (int d = 0; d < n; ++d) want[static_cast<size_t>(d)] += per[static_cast<size_t>(d)];
  }
  const OffloadStats stats = engine->Stats();
  EXPECT_EQ(stats.bytes_written_per_dir, want);
  // Each directory holds a file for each tensor with a stripe there.
  for (int d = 0; d < n; ++d) {
    if (want[static_cast<size_t>(d)] > 0) {
      EXPECT_GE(ListTree(dirs[static_cast<size_t>(d)]).size(), 2u) << dirs[static_cast<size_t>(d)];
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    TensorKey key;
    key.tensor = static_cast<traces::TensorId>(i);
    std::vector<char> back(data[i].size());
    ASSERT_TRUE(engine->Read(key, back.data(), static_cast<int64_t>(back.size())).ok()) << i;
    EXPECT_EQ(back, data[i]) << i;
  }
  // Removing every tensor leaves only the run directories; the engine's end, nothing.
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(engine->Remove(static_cast<traces::TensorId>(i)).ok()) << i;
  }
  for (const std::string& dir : dirs) EXPECT_EQ(ListTree(dir).size(), 1u) << dir;
  engine.reset();
  for (const std::string& dir : dirs) EXPECT_TRUE(ListTree(dir).empty()) << dir;
}

TEST_P(StripeTest, AFaultOnOneDirectoryNamesItsFileAndLeavesNothingInAny) {
  const std::vector<std::string> dirs = Dirs();
  // A four-stripe tensor from drive 0 first lands whole, then a second one's
  // second request (its stripe on drive 1) fails with EIO.
  FaultOptions faults;
  faults.rules.push_back(FaultRule{IoOp::kWrite, 5, FaultKind::kEio, 1});
  auto engine = Make(dirs, faults);
  if (engine == nullptr) GTEST_SKIP() << "io_uring unavailable here";
  const auto data = RandomBytes(4 * kStripe, 9);
  TensorKey a;
  a.tensor = 1;
  a.device = 0;
  ASSERT_TRUE(engine->Write(a, data.data(), 4 * kStripe).ok());
  TensorKey b;
  b.tensor = 2;
  b.device = 0;
  const Status s = engine->Write(b, data.data(), 4 * kStripe);
  EXPECT_EQ(fault_->injected(), 1);
  ASSERT_EQ(s.code(), Status::Code::kIoError) << s.ToString();
  EXPECT_NE(s.message().find(dirs[1] + "/"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("t2.bin"), std::string::npos) << s.message();
  // Nothing but the (empty) run directories, in every directory, at once.
  for (const std::string& dir : dirs) {
    for (const std::string& entry : ListTree(dir)) {
      EXPECT_EQ(entry.find('/'), std::string::npos) << dir << ": left behind: " << entry;
    }
  }
  engine.reset();
  for (const std::string& dir : dirs) EXPECT_TRUE(ListTree(dir).empty()) << dir;
}

INSTANTIATE_TEST_SUITE_P(Directories, StripeTest, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "dirs"; });

}  // namespace
}  // namespace ssdtrain::exec

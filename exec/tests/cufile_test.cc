// The runtime cuFile loader (exec/cufile.h) against stand-in libraries
// (fake_cufile.cc): absent, an entry point missing, a version too old, a
// driver that fails to open, and a complete one whose driver is closed again;
// each failure a clear message and the bounce path (or, under --gds on, an
// error). Then the GPUDirect data path (exec/cufile_backend.h and the
// engine's WriteDeviceAsync/ReadDeviceAsync) through the complete stand-in,
// whose cuFileRead/cuFileWrite are pread/pwrite on real files here: bytes
// striped over two directories, handles registered and deregistered, a cuFile
// error ending the step naming the file with nothing left behind.
#include "exec/cufile.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "exec/offload_engine.h"
#include "exec/tests/io_test_util.h"

namespace ssdtrain::exec {
namespace {

std::string Fake(const std::string& variant) {
  return std::string(SSDTRAIN_FAKE_CUFILE_DIR) + "/libfake_cufile_" + variant + ".so";
}

TEST(CuFile, AnAbsentLibraryIsUnavailableNamingIt) {
  auto f = CuFile::Open("/nonexistent/libcufile.so.0");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(f.status().message().find("/nonexistent/libcufile.so.0 was not found ("),
            std::string::npos)
      << f.status().message();
  auto path = ChooseStoragePath(GdsMode::kAuto, /*cuda_device=*/true, /*plan_gds=*/true,
                                "/nonexistent/libcufile.so.0");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->cufile, nullptr);
  EXPECT_EQ(path->text.rfind("bounce buffers through pinned host memory, not the GPUDirect "
                             "Storage the plan priced: ",
                             0),
            0u)
      << path->text;
  // --gds on: an error, naming the library.
  auto on = ChooseStoragePath(GdsMode::kOn, /*cuda_device=*/true, /*plan_gds=*/false,
                              "/nonexistent/libcufile.so.0");
  ASSERT_FALSE(on.ok());
  EXPECT_EQ(on.status().message().rfind("--gds on: /nonexistent/libcufile.so.0 was not found", 0),
            0u)
      << on.status().message();
}

TEST(CuFile, AMissingEntryPointIsNamed) {
  auto f = CuFile::Open(Fake("no_write"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            Fake("no_write") + " has no cuFileWrite: not a cuFile library this build can use");
}

TEST(CuFile, ATooOldVersionIsRefusedWithIt) {
  auto f = CuFile::Open(Fake("old"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), Fake("old") +
                                      " reports cuFile version 900 (0.90); this build needs 1.0 "
                                      "or newer");
}

TEST(CuFile, ADriverErrorIsSaidWithItsCodeAndTheBouncePathTaken) {
  auto f = CuFile::Open(Fake("driver_error"));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("cuFileDriverOpen failed (cuFile error 5033)"),
            std::string::npos)
      << f.status().message();
  auto path = ChooseStoragePath(GdsMode::kAuto, /*cuda_device=*/true, /*plan_gds=*/true,
                                Fake("driver_error"));
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->cufile, nullptr);
  EXPECT_NE(path->text.find("cuFile error 5033"), std::string::npos) << path->text;
}

TEST(CuFile, ACompleteLibraryLoadsWithItsVersionAndClosesItsDriver) {
  // Keep the library loaded across the loader's dlclose to read its counters.
  void* keep = ::dlopen(Fake("ok").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(keep, nullptr) << ::dlerror();
  auto* opens = static_cast<int*>(::dlsym(keep, "fake_cufile_opens"));
  auto* closes = static_cast<int*>(::dlsym(keep, "fake_cufile_closes"));
  ASSERT_NE(opens, nullptr);
  ASSERT_NE(closes, nullptr);
  {
    auto f = CuFile::Open(Fake("ok"));
    ASSERT_TRUE(f.ok()) << f.status().message();
    EXPECT_EQ((*f)->version(), 1130);
    EXPECT_EQ((*f)->VersionText(), "1.13");
    EXPECT_NE((*f)->api().Read, nullptr);
    EXPECT_NE((*f)->api().Write, nullptr);
    EXPECT_EQ(*opens, 1);
    EXPECT_EQ(*closes, 0);
  }
  EXPECT_EQ(*closes, 1);
  // Chosen for a CUDA replay, and said; the CPU backend's auto and any off take the files.
  auto path =
      ChooseStoragePath(GdsMode::kAuto, /*cuda_device=*/true, /*plan_gds=*/true, Fake("ok"));
  ASSERT_TRUE(path.ok());
  EXPECT_NE(path->cufile, nullptr);
  EXPECT_EQ(path->text, "GPUDirect Storage: cuFile 1.13 (" + Fake("ok") +
                            "), device memory to the files and back without a host copy");
  path = ChooseStoragePath(GdsMode::kAuto, /*cuda_device=*/false, /*plan_gds=*/true, Fake("ok"));
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->cufile, nullptr);
  EXPECT_EQ(path->text, "the CPU backend's files (no GPU, no GPUDirect Storage)");
  // A plan that priced the bounce buffers is replayed on them unless --gds on.
  path = ChooseStoragePath(GdsMode::kAuto, /*cuda_device=*/true, /*plan_gds=*/false, Fake("ok"));
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->cufile, nullptr);
  EXPECT_EQ(path->text,
            "bounce buffers through pinned host memory, the path the plan priced (its hardware's "
            "storage.gds is false; --gds on takes GPUDirect Storage)");
  path = ChooseStoragePath(GdsMode::kOn, /*cuda_device=*/true, /*plan_gds=*/false, Fake("ok"));
  ASSERT_TRUE(path.ok());
  EXPECT_NE(path->cufile, nullptr);
  path = ChooseStoragePath(GdsMode::kOff, /*cuda_device=*/true, /*plan_gds=*/true, Fake("ok"));
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(path->cufile, nullptr);
  EXPECT_EQ(path->text, "bounce buffers through pinned host memory (--gds off)");
  EXPECT_FALSE(ParseGdsMode("yes").ok());
  ::dlclose(keep);
}

// The stand-in's counters, read through a handle that keeps it loaded.
struct FakeCounters {
  explicit FakeCounters(const std::string& path) : keep(::dlopen(path.c_str(), RTLD_NOW)) {}
  ~FakeCounters() {
    if (keep != nullptr) ::dlclose(keep);
  }
  template <typename T>
  T Get(const char* name) const {
    return static_cast<const std::atomic<T>*>(::dlsym(keep, name))->load();
  }
  void* keep;
};

std::shared_ptr<CuFile> Load(const std::string& variant) {
  auto f = CuFile::Open(Fake(variant));
  EXPECT_TRUE(f.ok()) << f.status().message();
  return f.ok() ? std::shared_ptr<CuFile>(std::move(*f)) : nullptr;
}

TEST(CuFileDataPath, DeviceMemoryGoesThroughCuFileStripedOverTwoDirectories) {
  FakeCounters fake(Fake("ok"));
  ASSERT_NE(fake.keep, nullptr) << ::dlerror();
  const int handles_before = fake.Get<int>("fake_cufile_handles_registered");
  const long long written_before = fake.Get<long long>("fake_cufile_bytes_written");
  const long long read_before = fake.Get<long long>("fake_cufile_bytes_read");
  testing::TempDir tmp;
  OffloadOptions o;
  o.dirs = {tmp.Sub("a"), tmp.Sub("b")};
  o.block_size = 64 << 10;
  o.queue_depth = 4;
  o.staging_bytes = 0;
  o.cufile = Load("ok");
  ASSERT_NE(o.cufile, nullptr);
  // 5 stripes and an unaligned tail: 2.5 stripes a directory.
  const int64_t bytes = 4 * (64 << 10) + 12345;
  const std::vector<char> src = testing::RandomBytes(bytes, 7);
  std::vector<char> back(static_cast<size_t>(bytes), 0);
  std::vector<std::string> run_dirs;
  {
    auto engine = OffloadEngine::Create(o);
    ASSERT_TRUE(engine.ok()) << engine.status().message();
    EXPECT_TRUE((*engine)->device_io());
    EXPECT_EQ((*engine)->BackendName(), "cufile 1.13");
    run_dirs = (*engine)->run_dirs();
    const TensorKey key{3, "act.bin", 0, 0};
    ASSERT_TRUE((*engine)->Wait(*(*engine)->WriteDeviceAsync(key, src.data(), bytes)).ok());
    auto ticket = (*engine)->ReadDeviceAsync(key, back.data(), bytes);
    ASSERT_TRUE(ticket.ok()) << ticket.status().message();
    ASSERT_TRUE((*engine)->Wait(*ticket).ok());
    EXPECT_EQ(std::memcmp(src.data(), back.data(), static_cast<size_t>(bytes)), 0);
    const OffloadStats st = (*engine)->Stats();
    EXPECT_EQ(st.bytes_written, bytes);
    EXPECT_EQ(st.bytes_read, bytes);
    EXPECT_EQ(st.bounce_copies, 0);
    // Stripes 0, 2, 4 to the first directory, 1 and 3 to the second.
    EXPECT_EQ(st.bytes_written_per_dir,
              (std::vector<int64_t>{2 * (64 << 10) + 12345, 2 * (64 << 10)}));
    // Every byte through cuFile, one handle a file.
    EXPECT_EQ(fake.Get<long long>("fake_cufile_bytes_written") - written_before, bytes);
    EXPECT_EQ(fake.Get<long long>("fake_cufile_bytes_read") - read_before, bytes);
    EXPECT_EQ(fake.Get<int>("fake_cufile_handles_registered") - handles_before, 2);
    // Host memory on the same engine goes by pread/pwrite, checksummed.
    const TensorKey host_key{4, "host.bin", 0, 0};
    ASSERT_TRUE((*engine)->Write(host_key, src.data(), bytes).ok());
    ASSERT_TRUE((*engine)->Read(host_key, back.data(), bytes).ok());
    EXPECT_EQ(fake.Get<long long>("fake_cufile_bytes_written") - written_before, bytes);
  }
  // Every handle deregistered before its file closed; nothing left on either drive.
  EXPECT_EQ(fake.Get<int>("fake_cufile_handles_deregistered"),
            fake.Get<int>("fake_cufile_handles_registered"));
  EXPECT_TRUE(testing::ListTree(o.dirs[0]).empty());
  EXPECT_TRUE(testing::ListTree(o.dirs[1]).empty());
}

TEST(CuFileDataPath, DeviceMemoryWithoutCuFileIsRefused) {
  testing::TempDir tmp;
  OffloadOptions o;
  o.dirs = {tmp.path()};
  o.staging_bytes = 0;
  auto engine = OffloadEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  EXPECT_FALSE((*engine)->device_io());
  char buf[4096] = {};
  auto t = (*engine)->WriteDeviceAsync(TensorKey{1, "", 0, 0}, buf, sizeof(buf));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(t.status().message().find("GPU memory needs GPUDirect Storage"), std::string::npos);
}

TEST(CuFileDataPath, ACuFileErrorEndsTheWriteNamingTheFileAndLeavesNothing) {
  testing::TempDir tmp;
  OffloadOptions o;
  o.dirs = {tmp.Sub("a"), tmp.Sub("b")};
  o.block_size = 64 << 10;
  o.staging_bytes = 0;
  std::vector<std::string> warnings;
  o.warn = [&](std::string_view w) { warnings.emplace_back(w); };
  o.cufile = Load("write_error");
  ASSERT_NE(o.cufile, nullptr);
  const std::vector<char> src = testing::RandomBytes(3 * (64 << 10), 9);
  auto engine = OffloadEngine::Create(o);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  auto ticket = (*engine)->WriteDeviceAsync(TensorKey{5, "act.bin", 0, 0}, src.data(),
                                            static_cast<int64_t>(src.size()));
  ASSERT_TRUE(ticket.ok()) << ticket.status().message();
  const Status s = (*engine)->Wait(*ticket);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("act.bin"), std::string::npos) << s.message();
  // cuFile's own code said once; its files gone from both directories.
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rfind("cuFileWrite failed with cuFile error 5011", 0), 0u) << warnings[0];
  for (const std::string& run : (*engine)->run_dirs()) {
    EXPECT_TRUE(testing::ListTree(run).empty()) << run;
  }
}

}  // namespace
}  // namespace ssdtrain::exec

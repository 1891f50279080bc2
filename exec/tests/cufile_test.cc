// The runtime cuFile loader (exec/cufile.h) against stand-in libraries
// (fake_cufile.cc): absent, an entry point missing, a version too old, a
// driver that fails to open, and a complete one whose driver is closed again;
// each failure a clear message and the bounce path.
#include "exec/cufile.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

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
  const StoragePath path = ChooseStoragePath(true, "/nonexistent/libcufile.so.0");
  EXPECT_FALSE(path.cufile_loaded);
  EXPECT_EQ(path.text.rfind("bounce buffers through pinned host memory: ", 0), 0u) << path.text;
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
  const StoragePath path = ChooseStoragePath(true, Fake("driver_error"));
  EXPECT_FALSE(path.cufile_loaded);
  EXPECT_NE(path.text.find("cuFile error 5033"), std::string::npos) << path.text;
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
  // Loaded, and said to be unused for data (the engine's path is the bounce one).
  const StoragePath path = ChooseStoragePath(true, Fake("ok"));
  EXPECT_TRUE(path.cufile_loaded);
  EXPECT_NE(path.text.find("cuFile 1.13 found"), std::string::npos) << path.text;
  EXPECT_NE(path.text.find("no cuFile data path yet"), std::string::npos) << path.text;
  EXPECT_EQ(ChooseStoragePath(false).text,
            "the CPU backend's files (no GPU, no GPUDirect Storage)");
  ::dlclose(keep);
}

}  // namespace
}  // namespace ssdtrain::exec

// A fixture for the tests that replay a small trace on the CPU backend: a
// scratch offload directory of its own, removed after the test, and the
// options of one verified step in a 64 MiB device.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "exec/replay.h"

namespace ssdtrain::testing {

class VerifiedReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("ssdtrain-" + std::string(info->test_suite_name()) + "-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // One verified step on the CPU backend in a 64 MiB device.
  exec::ReplayOptions Verified() const {
    exec::ReplayOptions ro;
    ro.dirs = {dir_.string()};
    ro.backend = exec::BackendChoice::kCpu;
    ro.steps = 1;
    ro.verify = true;
    ro.device_memory_bytes = int64_t{64} << 20;
    return ro;
  }

  std::filesystem::path dir_;
};

}  // namespace ssdtrain::testing

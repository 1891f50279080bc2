// Runs the built `ssdtrain` binary from tests, capturing exit status and output.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "cmake/build_paths.h"

namespace ssdtrain::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline std::string SsdtrainBinary() { return std::string(ConfiguredBinaryDir()) + "/app/ssdtrain"; }
inline std::string SourceDir() { return ConfiguredSourceDir(); }

// Runs a shell command line, stdout and stderr together.
inline CliResult Shell(const std::string& command) {
  CliResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `args` is appended to the binary's path as shell words.
inline CliResult RunSsdtrain(const std::string& args) {
  return Shell(SsdtrainBinary() + " " + args);
}

// A CLI test's fixture: a fresh folder per test (named by `prefix`, the
// process and the test), removed after it, and the shipped configs by name.
class CliTest : public ::testing::Test {
 protected:
  explicit CliTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ssdtrain-" + prefix_ + "-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Model(const std::string& name) {
    return SourceDir() + "/configs/models/" + name + ".json";
  }
  static std::string Hardware(const std::string& name) {
    return SourceDir() + "/configs/hardware/" + name + ".json";
  }
  std::string prefix_;
  std::filesystem::path dir_;
};

}  // namespace ssdtrain::testing

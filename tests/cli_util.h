// Runs the built `ssdtrain` binary from tests, capturing exit status and output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace ssdtrain::testing {

struct CliResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline std::string SsdtrainBinary() { return std::string(SSDTRAIN_BINARY_DIR) + "/app/ssdtrain"; }
inline std::string SourceDir() { return SSDTRAIN_SOURCE_DIR; }

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

}  // namespace ssdtrain::testing

#include "app/self_path.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <system_error>

#include "cmake/build_paths.h"

namespace ssdtrain::app {
namespace {

namespace fs = std::filesystem;

// The first "ssdtrain" on PATH, canonical; empty when none.
fs::path OnPath() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    std::error_code ec;
    const fs::path candidate = fs::canonical(fs::path(dir) / "ssdtrain", ec);
    if (!ec) return candidate;
  }
  return {};
}

std::string ShellWord(const std::string& s) {
  if (s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._+-") ==
      std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string SelfCommand() {
  std::error_code ec;
  const fs::path self = fs::canonical("/proc/self/exe", ec);
  if (ec) return "ssdtrain";
  if (OnPath() == self) return "ssdtrain";
  return ShellWord(self.string());
}

std::string ConfigsDir() {
  std::error_code ec;
  const fs::path self = fs::canonical("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = self.parent_path().parent_path() / "share" / "ssdtrain" / "configs";
    if (fs::is_directory(installed / "hardware", ec)) return installed.string();
  }
  return std::string(ConfiguredSourceDir()) + "/configs";
}

}  // namespace ssdtrain::app

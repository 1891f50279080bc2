#include "exec/tests/io_test_util.h"

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>

namespace ssdtrain::exec::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base && *base ? base : "/tmp") + "/ssdtrain-io-test-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::Sub(const std::string& name) const {
  const std::string p = path_ + "/" + name;
  fs::create_directories(p);
  return p;
}

SmallTmpfs::SmallTmpfs(int64_t bytes) {
  const std::string opts = "size=" + std::to_string(bytes);
  if (::mount("ssdtrain-test", dir_.path().c_str(), "tmpfs", 0, opts.c_str()) == 0) {
    mounted_ = true;
  } else {
    why_ = std::string("cannot mount a tmpfs here (") + std::strerror(errno) +
           "); needs root or CAP_SYS_ADMIN";
  }
}

SmallTmpfs::~SmallTmpfs() {
  if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
}

std::vector<char> RandomBytes(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<char> v(static_cast<size_t>(n));
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

std::vector<std::string> ListTree(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    out.push_back(fs::relative(e.path(), dir).string());
  }
  return out;
}

}  // namespace ssdtrain::exec::testing

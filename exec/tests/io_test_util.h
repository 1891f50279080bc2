// Helpers for the I/O tests: a temporary directory on the real disk (not
// /dev/shm: the suite must see O_DIRECT), deterministic random bytes, a small
// tmpfs mount for the ENOSPC cases, a directory that refuses O_DIRECT, and
// directory listings.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ssdtrain::exec::testing {

// mkdtemp under $TMPDIR (or /tmp); removed recursively on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Makes and returns path()/name.
  std::string Sub(const std::string& name) const;

 private:
  std::string path_;
};

// A tmpfs of `bytes` mounted on a fresh directory, unmounted on destruction.
// ok() is false (and why() says why) where mounting is not allowed.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(int64_t bytes);
  ~SmallTmpfs();
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return dir_.path(); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

// A fresh directory on a real filesystem that refuses O_DIRECT with EINVAL:
// under /dev/shm where its tmpfs does (Linux before 6.6), else on a ramfs
// mounted for it (needs root). ok() is false, and why() says why, where
// neither refuses (newer kernels accept O_DIRECT on tmpfs) or mounting is not
// allowed. Removed (unmounted) on destruction.
class DirectIoRefusingDir {
 public:
  DirectIoRefusingDir();
  ~DirectIoRefusingDir();
  DirectIoRefusingDir(const DirectIoRefusingDir&) = delete;
  DirectIoRefusingDir& operator=(const DirectIoRefusingDir&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& why() const { return why_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string shm_dir_;  // made under /dev/shm, removed on destruction
  std::unique_ptr<TempDir> mount_point_;
  bool mounted_ = false;
  std::string why_;
};

std::vector<char> RandomBytes(int64_t n, uint64_t seed);
// Every entry below `dir` (recursive), as paths relative to it; empty if none.
std::vector<std::string> ListTree(const std::string& dir);

}  // namespace ssdtrain::exec::testing

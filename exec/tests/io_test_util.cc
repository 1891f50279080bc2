#include "exec/tests/io_test_util.h"

#include <fcntl.h>
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

namespace {

// 0 when `dir` takes an O_DIRECT file, else the errno of the refusal.
int ProbeDirectIo(const std::string& dir) {
  const std::string probe = dir + "/.probe";
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
  const int err = fd < 0 ? errno : 0;
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return err;
}

}  // namespace

DirectIoRefusingDir::DirectIoRefusingDir() {
  std::string shm = "/dev/shm/ssdtrain-io-test-XXXXXX";
  std::string shm_says = "cannot make a directory there";
  if (::mkdtemp(shm.data()) != nullptr) {
    shm_dir_ = shm;
    const int err = ProbeDirectIo(shm);
    if (err == EINVAL) {
      path_ = shm;
      return;
    }
    shm_says = err == 0 ? "takes O_DIRECT" : std::string("fails otherwise: ") + std::strerror(err);
  }
  mount_point_ = std::make_unique<TempDir>();
  const std::string& mnt = mount_point_->path();
  if (::mount("ssdtrain-test", mnt.c_str(), "ramfs", 0, "mode=0700") != 0) {
    why_ = "no directory here refuses O_DIRECT: /dev/shm " + shm_says +
           ", and a ramfs cannot be mounted (" + std::strerror(errno) +
           "; needs root or CAP_SYS_ADMIN)";
    return;
  }
  mounted_ = true;
  const int err = ProbeDirectIo(mnt);
  if (err == EINVAL) {
    path_ = mnt;
  } else {
    why_ = "no directory here refuses O_DIRECT: /dev/shm " + shm_says + ", ramfs " +
           (err == 0 ? std::string("takes O_DIRECT") : std::strerror(err));
  }
}

DirectIoRefusingDir::~DirectIoRefusingDir() {
  if (mounted_) ::umount2(mount_point_->path().c_str(), MNT_DETACH);
  if (!shm_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(shm_dir_, ec);
  }
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

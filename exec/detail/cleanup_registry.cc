#include "exec/detail/cleanup_registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>

#include "exec/signal_cleanup.h"

namespace ssdtrain::exec::detail {
namespace {

struct Slot {
  std::atomic<int> state{0};  // 0 free, 1 being written, 2 live
  char path[PATH_MAX];
};

Slot g_slots[kMaxCleanupDirs];
struct sigaction g_previous_int;
struct sigaction g_previous_term;
std::mutex g_install_mu;  // serializes InstallHandlers

void OnSignal(int sig) {
  // A listed directory may hold another (a caller's scratch directory holding
  // the engine's run directory): what could not go in one pass is tried again
  // once the pass removed something, so inner directories go first.
  bool done[kMaxCleanupDirs] = {};
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < kMaxCleanupDirs; ++i) {
      if (done[i] || g_slots[i].state.load(std::memory_order_acquire) != 2) continue;
      if (RemoveDirSignalSafe(g_slots[i].path)) done[i] = progress = true;
    }
  }
  ::sigaction(sig, sig == SIGINT ? &g_previous_int : &g_previous_term, nullptr);
  ::raise(sig);
}

// Installs OnSignal for `sig` unless it is already there or the signal is
// ignored: a process started with SIGINT ignored (a background job of a shell
// script) must neither lose its files nor stop on Ctrl-C.
void InstallHandler(int sig, struct sigaction* previous) {
  struct sigaction current {};
  if (::sigaction(sig, nullptr, &current) != 0) return;
  if (current.sa_handler == SIG_IGN || current.sa_handler == OnSignal) return;
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  ::sigaction(sig, &action, previous);
}

void InstallHandlers() {
  std::lock_guard lock(g_install_mu);
  InstallHandler(SIGINT, &g_previous_int);
  InstallHandler(SIGTERM, &g_previous_term);
}

}  // namespace

Result<int> RegisterCleanupDir(const std::string& dir) {
  if (dir.size() + 1 > sizeof(Slot::path)) {
    return Status::InvalidArgument("offload run directory " + dir + " is longer than " +
                                   std::to_string(sizeof(Slot::path) - 1) +
                                   " bytes; point --dir at a shorter path");
  }
  InstallHandlers();
  for (int i = 0; i < kMaxCleanupDirs; ++i) {
    int expected = 0;
    if (g_slots[i].state.compare_exchange_strong(expected, 1)) {
      std::memcpy(g_slots[i].path, dir.c_str(), dir.size() + 1);
      g_slots[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return Status::ResourceExhausted(
      "cannot register offload run directory " + dir +
      " for removal on SIGINT/SIGTERM: " + std::to_string(kMaxCleanupDirs) +
      " run directories are live in this process already; destroy other offload engines "
      "first or pass fewer --dir");
}

void UnregisterCleanupDir(int slot) {
  if (slot >= 0 && slot < kMaxCleanupDirs) g_slots[slot].state.store(0, std::memory_order_release);
}

bool RemoveDirSignalSafe(const char* dir) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  bool ok = true;
  // Large enough for a few hundred entries per call; loops until the end.
  alignas(8) char buf[8192];
  while (true) {
    const long n = ::syscall(SYS_getdents64, fd, buf, sizeof(buf));
    if (n <= 0) {
      ok = ok && n == 0;
      break;
    }
    for (long pos = 0; pos < n;) {
      struct LinuxDirent64 {
        ino64_t d_ino;
        off64_t d_off;
        unsigned short d_reclen;
        unsigned char d_type;
        char d_name[1];
      };
      const auto* entry = reinterpret_cast<const LinuxDirent64*>(buf + pos);
      pos += entry->d_reclen;
      const char* name = entry->d_name;
      if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
      if (::unlinkat(fd, name, 0) != 0) ok = false;
    }
  }
  ::close(fd);
  if (::rmdir(dir) != 0) ok = false;
  return ok;
}

}  // namespace ssdtrain::exec::detail

namespace ssdtrain::exec {

Result<ScopedSignalCleanup> ScopedSignalCleanup::Make(const std::string& dir) {
  SSDTRAIN_ASSIGN_OR_RETURN(const int slot, detail::RegisterCleanupDir(dir));
  return ScopedSignalCleanup(slot);
}

ScopedSignalCleanup::~ScopedSignalCleanup() { detail::UnregisterCleanupDir(slot_); }

ScopedSignalCleanup::ScopedSignalCleanup(ScopedSignalCleanup&& other) noexcept
    : slot_(std::exchange(other.slot_, -1)) {}

ScopedSignalCleanup& ScopedSignalCleanup::operator=(ScopedSignalCleanup&& other) noexcept {
  if (this != &other) {
    detail::UnregisterCleanupDir(slot_);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

}  // namespace ssdtrain::exec

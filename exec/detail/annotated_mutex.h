// A mutex, a scoped lock and a condition variable that clang's thread-safety
// analysis (-Wthread-safety) understands, as LevelDB's port::Mutex and
// Abseil's Mutex are: a member marked SSDTRAIN_GUARDED_BY(mu_) may only be
// touched with mu_ held, and a function marked SSDTRAIN_REQUIRES(mu_) only
// called with it held; the compiler checks both. Under gcc the macros expand to
// nothing and the types are thin wrappers over std::mutex and
// std::condition_variable.
//
// Waiting is written as a loop over the condition, not with a predicate lambda
// (the analysis does not see that a lambda runs with the lock held):
//
//   MutexLock lock(&mu_);
//   while (!done_) cv_.Wait(&mu_);
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define SSDTRAIN_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SSDTRAIN_THREAD_ANNOTATION(x)
#endif

#define SSDTRAIN_CAPABILITY(x) SSDTRAIN_THREAD_ANNOTATION(capability(x))
#define SSDTRAIN_SCOPED_CAPABILITY SSDTRAIN_THREAD_ANNOTATION(scoped_lockable)
#define SSDTRAIN_GUARDED_BY(x) SSDTRAIN_THREAD_ANNOTATION(guarded_by(x))
#define SSDTRAIN_PT_GUARDED_BY(x) SSDTRAIN_THREAD_ANNOTATION(pt_guarded_by(x))
#define SSDTRAIN_REQUIRES(...) SSDTRAIN_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define SSDTRAIN_ACQUIRE(...) SSDTRAIN_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define SSDTRAIN_RELEASE(...) SSDTRAIN_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define SSDTRAIN_EXCLUDES(...) SSDTRAIN_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define SSDTRAIN_ASSERT_HELD(x) SSDTRAIN_THREAD_ANNOTATION(assert_capability(x))
#define SSDTRAIN_NO_THREAD_SAFETY_ANALYSIS SSDTRAIN_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace ssdtrain::exec::detail {

class CondVar;

// Not recursive. Lock/Unlock directly only where a scope cannot express it
// (MutexLock covers the rest).
class SSDTRAIN_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() SSDTRAIN_ACQUIRE() { mu_.lock(); }
  void Unlock() SSDTRAIN_RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds the mutex (where it cannot see it).
  void AssertHeld() const SSDTRAIN_ASSERT_HELD(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to the end of the scope, except between
// Unlock() and Lock() (a section that must run without it, such as a blocking
// system call).
class SSDTRAIN_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) SSDTRAIN_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() SSDTRAIN_RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() SSDTRAIN_RELEASE() {
    mu_->Unlock();
    held_ = false;
  }
  void Lock() SSDTRAIN_ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// A std::condition_variable over a Mutex: Wait releases the mutex while it
// blocks and holds it again when it returns (also on a spurious wake-up, so
// callers loop over their condition).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) SSDTRAIN_REQUIRES(mu) {
    // Borrow the held std::mutex for the wait and give it back held.
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // As Wait, returning by `deadline` at the latest; false when it has passed.
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline) SSDTRAIN_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace ssdtrain::exec::detail

// Not built: exec_thread_safety_analysis_rejects_unlocked_access compiles it
// with clang's -Wthread-safety -Werror and passes only when both mistakes
// below are reported (exec/io.cmake). Good() is the correct use and must not be.
#include "exec/detail/annotated_mutex.h"

namespace ssdtrain::exec::detail {

class Counter {
 public:
  void Good() {
    MutexLock lock(&mu_);
    BumpLocked();
  }
  void UnguardedWrite() { count_ = 1; }       // mistake 1: mu_ not held
  void HelperWithoutLock() { BumpLocked(); }  // mistake 2: mu_ not held

 private:
  void BumpLocked() SSDTRAIN_REQUIRES(mu_) { ++count_; }
  Mutex mu_;
  int count_ SSDTRAIN_GUARDED_BY(mu_) = 0;
};

}  // namespace ssdtrain::exec::detail

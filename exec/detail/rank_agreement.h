// RankAgreement: this rank's side of the StepSync protocol (exec/step_sync.h)
// during a replay (exec/detail/replayer.h, exec/replay.cc).
#pragma once

#include "exec/step_sync.h"
#include "traces/status.h"

namespace ssdtrain::exec::detail {

// This rank's side of the StepSync protocol (exec/step_sync.h): every
// agreement point goes through At(); a failure that no agreement has told the
// other ranks about yet is told at the next one (OnFailure).
class RankAgreement {
 public:
  explicit RankAgreement(StepSync* sync) : sync_(sync) {}
  Status At(const Status& local) {
    if (sync_ == nullptr) return local;
    Status all = sync_->Agree(local);
    if (!all.ok()) told_ = true;
    return all;
  }
  // Tells the other ranks of this rank's failure without waiting (a rank
  // blocked on a neighbour learns of it at once); once.
  void Abort(const Status& status) {
    if (sync_ == nullptr || aborted_) return;
    aborted_ = true;
    sync_->Abort(status);
  }
  // Aborts, then agrees.
  void OnFailure(const Status& status) {
    if (sync_ == nullptr || told_) return;
    told_ = true;
    Abort(status);
    (void)sync_->Agree(status);  // the others stop on it; this rank already has
  }
  // A neighbour's abort ended a Receive or WaitSends: the run's error is its.
  void PeerFailed(const Status& status) {
    if (peer_failure_.ok()) peer_failure_ = status;
  }
  const Status& peer_failure() const { return peer_failure_; }
  StepSync* sync() const { return sync_; }

 private:
  StepSync* sync_;
  bool told_ = false, aborted_ = false;
  Status peer_failure_;
};

}  // namespace ssdtrain::exec::detail

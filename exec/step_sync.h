// StepSync: what a replay needs from the other ranks of a multi-process run
// (`mpirun -np N ssdtrain replay ...`; the MPI implementation is
// app/mpi_sync.cc, the tests' in-process one exec/tests/thread_ranks.h).
// The replay stays free of MPI.
//
// Layout (traces/layout.h, the one place it is decided): N = tp × cp × pp ×
// dp ranks in Megatron-LM's order, tensor-parallel fastest, then context-
// parallel, then data-parallel, then pipeline: rank r = tp_index + tp ·
// (cp_index + cp · (dp_index + dp · stage)). The tp ranks of one stage,
// replica and cp index are consecutive and form its tensor-parallel group;
// the cp group is strided by tp; the dense gradients go over the layout's
// DenseGradientGroup (dp × cp, or HSDP's replica group at ZeRO-2/3), ZeRO-2/3's
// gathers and reduce-scatters over its ShardGroup; the expert-parallel group
// (ep > 1) is ep consecutive replicas of one stage and tp index
// (Layout::EpGroup). Stage s's neighbours are rank r − tp·cp·dp (stage s − 1)
// and rank r + tp·cp·dp (stage s + 1): activations go forward,
// gradients back. Interleaved 1F1B wraps: the last stage's next is stage 0 and
// stage 0's previous the last stage (traces/chunks.h: chunk c of the last
// stage feeds chunk c + 1 of stage 0).
//
// The protocol, the same on every rank so that collectives always pair up:
//   set-up done                        Agree(status)
//   each step: the stage's whole step, its send and recv ops moving real
//              bytes between neighbours (SendAsync, Receive), its
//              collective ops (tp > 1) exchanging their pieces with the
//              other ranks of its tensor-parallel group the same way
//              (exec/replay_tensor_parallel.cc), its all-to-alls (ep > 1)
//              with those of its expert-parallel group
//              (exec/replay_expert_parallel.cc), its pending
//              sends completed (WaitSends) before the step ends;
//              in its last micro-batch's backward, each gradient bucket
//              (traces/dp_buckets.h), once the op completing it has run
//              and its gradients are in host memory,
//                                      AllReduceSumAsync(the bucket) over
//                                      its group (the dense gradients',
//                                      or the routed experts' data-
//                                      parallel group), in the
//                                      buckets' order, progressed at each
//                                      later op (ProgressAllReduces);
//              before the optimizer    WaitAllReduces, then the copies back
//              step done, its checks   Agree(status)
//              included
// Every rank makes every bucket's all-reduce of a step exactly once, in
// order, also after a failure in that step: a failing rank posts the ones it
// has not posted (their bytes whatever its buffer holds) and waits for all
// before its one Agree, so no rank waits for ever in an all-reduce.
//
// Failure. A rank that fails anywhere first calls Abort(its error), which
// sends every other rank a message without waiting; then, within a step, it
// completes the step's bucket all-reduces as above; then it calls Agree(its
// error) once, at the next point in the list above, and stops. A rank blocked
// in Receive or WaitSends watches for such a message and returns
// "rank R failed: ..." at once (a tensor-parallel collective waits in
// Receive too), which is its own failure: it too calls Abort,
// completes the buckets, and then Agree once. A rank not blocked on a
// neighbour reaches its next agreement point and learns of the failure there.
// So every rank makes exactly one more Agree call after the first failure,
// and they all meet in it (each rank's engine removes its files as it
// unwinds). A rank waiting in WaitAllReduces does not watch for aborts: it
// needs none, as its peers' all-reduces come in any case. Nothing fallible
// runs after the last step's Agree, where the CLI's next collective (the
// gather of the reports) follows.
// Messages left unreceived by a failure (sends to a rank that stopped, a
// collective's pieces a stopped peer never took, the abort messages) are
// drained by the implementation before it shuts down.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::exec {

// Which of a step's point-to-point messages: the `index`th send (in trace
// order) of micro-batch `micro_batch`'s forward (an activation, to the next
// stage) or backward (a gradient, to the previous stage) pass; or, with
// `collective`, a piece of a tensor-parallel collective (`index` names the op
// and the piece, exec/replay_tensor_parallel.cc). Any values: a StepSync
// carries the tag with the message (app/mpi_sync.cc: in a header before the
// payload, not in MPI's tag, which holds 15 bits for certain).
struct PipelineTag {
  int64_t micro_batch = 0;
  bool gradient = false;
  int64_t index = 0;
  bool collective = false;
  // Interleaved 1F1B: the model chunk that sent it (traces/chunks.h); -1: none.
  int64_t chunk = -1;
  bool operator==(const PipelineTag&) const = default;
  // "the activation 0 of micro-batch 2", "the collective piece 9 of micro-batch 2",
  // interleaved "the gradient 0 of micro-batch 2 from chunk 1"
  std::string Describe() const {
    return std::string(collective ? "the collective piece "
                       : gradient ? "the gradient "
                                  : "the activation ") +
           std::to_string(index) + " of micro-batch " + std::to_string(micro_batch) +
           (chunk >= 0 ? " from chunk " + std::to_string(chunk) : "");
  }
};

// The ranks a gradient bucket is summed over (traces/dp_buckets.h, "Groups"):
// the layout's DenseGradientGroup, or, at ep > 1, the routed experts'
// gradient group (traces::Layout::ExpertGradientGroup: their data-parallel
// group, the ranks of one stage, tp index and expert index; at ZeRO 2 and 3
// the replica group).
enum class SumGroup { kDenseGradients, kExpertDataParallel };

class StepSync {
 public:
  virtual ~StepSync() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's status at this point: Ok when all are. Otherwise this rank's
  // own error, or the error of the lowest failing rank, naming it.
  virtual Status Agree(const Status& local) = 0;
  // Sums `count` elements of `dtype` at `host` in place over the ranks of this
  // rank's dense gradient group (all ranks when tp = pp = 1 at ZeRO 0 or 1).
  virtual Status AllReduceSum(void* host, int64_t count, traces::DType dtype) = 0;
  // The same sum without waiting for it (the gradient buckets, overlapping
  // backward): posts it and returns; `host` stays the sum's, untouched by the
  // caller, until WaitAllReduces has returned, over `group`. Every rank of a
  // group posts the same sums in the same order. The MPI implementation is
  // MPI_Iallreduce on a communicator of the group's own; one that cannot
  // overlap may sum at once.
  virtual Status AllReduceSumAsync(void* host, int64_t count, traces::DType dtype,
                                   SumGroup group) = 0;
  // How many ranks a sum over `group` adds up (this rank among them).
  virtual int SumGroupSize(SumGroup group) const = 0;
  // Lets the posted sums progress without blocking (MPI moves a nonblocking
  // collective only inside MPI calls) and sets `*completed` to how many of
  // those posted since the last WaitAllReduces have completed, a prefix in
  // posting order.
  virtual Status ProgressAllReduces(int64_t* completed) = 0;
  // Blocks until every posted sum has completed; the first error among them.
  virtual Status WaitAllReduces() = 0;

  // Point-to-point messages: the pipeline's (pp > 1), the pieces of the
  // tensor-parallel collectives (tp > 1) and of the expert-parallel
  // all-to-alls (ep > 1). Called by one thread per rank.
  // Why not MPI's collectives for tp: a rank blocked in one cannot see another
  // rank's abort, nor leave it when a peer has stopped; messages can be
  // waited for with an eye on aborts and drained at the end.
  //
  // Posts `bytes` at `host` (any size: the MPI implementation sends more
  // than its int count in pieces) to rank `to` under `tag` and returns without
  // waiting for the receiver; `host` may be reused at once (the message is
  // the implementation's own copy until it completes, also when this rank
  // fails and its buffers go before the message is received).
  virtual Status SendAsync(int to, const PipelineTag& tag, const void* host, int64_t bytes) = 0;
  // Blocks until the next message from rank `from` arrives (messages from one
  // rank arrive in the order it sent them) and receives it into `host`,
  // whatever its tag: the caller checks `*tag` and `*bytes` against the one it
  // expects. A message larger than `capacity` is an error. When another rank
  // aborts (Abort) first: Status::Unavailable("rank R failed: <its message>")
  // (that code means a peer's failure here; any other error is this rank's).
  virtual Status Receive(int from, void* host, int64_t capacity, PipelineTag* tag,
                         int64_t* bytes) = 0;
  // Blocks until every posted send has completed, or another rank aborts
  // (then Status::Unavailable, as Receive).
  virtual Status WaitSends() = 0;
  // Tells every other rank, without waiting, that this one failed with
  // `status` (see "Failure" above). Once per rank; later calls do nothing.
  virtual void Abort(const Status& status) = 0;
};

}  // namespace ssdtrain::exec

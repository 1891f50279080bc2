// The MPI side of app/mpi_sync.h: MpiSync, exec::StepSync on MPI, shared by
// its parts — start and finish (mpi_sync.cc), the pipeline's point-to-point
// messages and the aborts (mpi_messages.cc), the collectives: agreeing, the
// gradients' sums, the reports' gather (mpi_collectives.cc). Built only with
// SSDTRAIN_WITH_MPI.
#pragma once

#ifdef SSDTRAIN_WITH_MPI

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/detail/mapped_buffer.h"
#include "app/mpi_sync.h"
#include "exec/step_sync.h"
#include "traces/status.h"

namespace ssdtrain::app::detail {

Status MpiError(int code, const std::string& what);

// Every pipeline message goes under one tag, its exec::PipelineTag in a
// header before its payload (so any micro-batch count fits); the abort
// messages and the reports' gather have their own.
inline constexpr int kPipelineTag = 0;
inline constexpr int kAbortTag = 1;
inline constexpr int kGatherTag = 2;
// The most bytes one MPI call moves: MPI's counts are int. Larger pipeline
// messages and reports go in pieces (a message's pieces in order, as MPI
// keeps the order of one sender's messages under one tag).
inline constexpr int64_t kMaxPieceBytes = int64_t{1} << 30;
// The most elements one MPI sum takes (its count is an int); larger sums go
// in pieces.
inline constexpr int64_t kMaxSumElements = int64_t{1} << 30;

// What precedes a pipeline message's payload in its first piece.
struct WireHeader {
  int64_t micro_batch = 0;
  int64_t gradient = 0;
  int64_t index = 0;
  int64_t bytes = 0;  // the payload's
  int64_t collective = 0;
  int64_t chunk = -1;  // PipelineTag::chunk
};
inline constexpr int64_t kHeaderBytes = sizeof(WireHeader);

inline exec::PipelineTag TagOf(const WireHeader& h) {
  return {h.micro_batch, h.gradient != 0, h.index, h.collective != 0, h.chunk};
}

class MpiSync final : public RankSync {
 public:
  MpiSync();
  ~MpiSync() override;

  // The collectives (mpi_collectives.cc).
  Status SplitStages(const traces::Layout& layout) override;
  Status Agree(const Status& local) override;
  Status AllReduceSum(void* host, int64_t count, traces::DType dtype) override;
  Status AllReduceSumAsync(void* host, int64_t count, traces::DType dtype,
                           exec::SumGroup group) override;
  int SumGroupSize(exec::SumGroup group) const override;
  Status ProgressAllReduces(int64_t* completed) override;
  Status WaitAllReduces() override;
  // Lengths in 64 bits, then each rank's bytes to rank 0 point to point in
  // pieces: MPI_Gatherv's int counts and offsets hold at most 2 GiB in all.
  Result<std::vector<std::string>> GatherAtRankZero(const std::string& mine) override;

  // The pipeline's messages and the aborts (mpi_messages.cc).
  Status SendAsync(int to, const exec::PipelineTag& tag, const void* host, int64_t bytes) override;
  Status Receive(int from, void* host, int64_t capacity, exec::PipelineTag* tag,
                 int64_t* bytes) override;
  Status WaitSends() override;
  void Abort(const Status& status) override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  // The MPI type and sum of `dtype` (16-bit floats: our own sums, above).
  void TypeAndSum(traces::DType dtype, MPI_Datatype* type_out, MPI_Op* op_out) const;

  // Another rank's abort message, if one has come: "rank R failed: ...".
  Status CheckAbort();
  // Before MPI_Finalize: every message sent to this rank and not received (a
  // failure stopped its receiver; the aborts) is received and dropped, then
  // this rank's sends complete. Every rank counts what it sent to each.
  void Drain();
  // Moves the copies of completed pipeline sends to free_copies_.
  Status RecycleCompletedSends();
  // A buffer of at least `bytes`: a completed send's, or a new one.
  std::unique_ptr<MappedBuffer> TakeCopy(int64_t bytes);
  // Waits for the next piece of a pipeline message from rank `from` (its
  // size in `*count`), or another rank's abort.
  Status AwaitPiece(int from, int* count);
  static Status MpiCount(const MPI_Status& status, int* count);
  // Receives a message's first piece: its header into `*h`, the `first`
  // payload bytes after it into `host`. Through a warm buffer of our own and
  // one copy out: a derived datatype scattering header and payload (one
  // receive, no copy) ran the pipeline's sends 30-40% slower on Open MPI's
  // shared memory (tiny-gpt pp 2: 380 -> 520 ms a step).
  Status ReceiveFirstPiece(int from, WireHeader* h, char* host, int64_t first);
  // Receives a first piece too large for the caller's buffer, to name it.
  Status ReceiveHeaderOnly(int from, int count, WireHeader* h);
  static Status TooLarge(int from, const WireHeader& h, int64_t capacity);

  int rank_ = 0, size_ = 1;
  MPI_Op sum_fp16_ = MPI_OP_NULL, sum_bf16_ = MPI_OP_NULL, sum_fp8_ = MPI_OP_NULL;
  MPI_Comm stage_comm_ = MPI_COMM_WORLD;  // this stage's data-parallel group
  // The nonblocking sums: a duplicate of stage_comm_, and the sums posted
  // since the last WaitAllReduces (each one request per piece), of which the
  // first sums_completed_ have completed.
  MPI_Comm async_comm_ = MPI_COMM_NULL;
  // The routed experts' buckets at ep > 1 (exec::SumGroup): this rank's
  // expert-data-parallel group (traces::Layout::ExpertDpGroup); null where
  // the layout has none of more than one rank.
  MPI_Comm expert_comm_ = MPI_COMM_NULL;
  struct PostedSum {
    std::vector<MPI_Request> requests;
  };
  std::vector<PostedSum> sums_;
  size_t sums_completed_ = 0;
  // Point-to-point messages (pipeline pieces and aborts): sends not yet
  // complete, and how many messages went to and came from each rank.
  struct PendingSend {
    std::vector<MPI_Request> requests;   // one per piece
    std::unique_ptr<MappedBuffer> copy;  // header and payload, until all complete
  };
  std::vector<PendingSend> pending_;
  std::vector<MPI_Request> abort_requests_;                 // completed by Drain
  std::vector<std::unique_ptr<MappedBuffer>> free_copies_;  // completed sends' copies
  MappedBuffer receive_buffer_;  // a first piece lands here (ReceiveFirstPiece)
  std::vector<long long> sent_to_, received_from_;
  bool aborted_ = false;
  std::string abort_text_;  // the abort messages' buffer, kept until they complete
};

}  // namespace ssdtrain::app::detail

#endif  // SSDTRAIN_WITH_MPI

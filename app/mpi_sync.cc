#include "app/mpi_sync.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "exec/host_sum.h"

#ifdef SSDTRAIN_WITH_MPI
#include <mpi.h>
#endif

namespace ssdtrain::app {

bool LaunchedAsRanks() {
  // Open MPI's and the PMI standard's launch variables.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && std::atoi(v) > 1) return true;
  }
  return false;
}

Result<std::unique_ptr<RankSync>> StartRanksIfLaunched() {
  if (!LaunchedAsRanks()) return std::unique_ptr<RankSync>();
  return StartRanks();
}

Result<std::string> MakeRankDir(const std::string& dir, int rank, bool* made) {
  const std::string mine = (std::filesystem::path(dir) / ("rank-" + std::to_string(rank))).string();
  std::error_code ec;
  *made = std::filesystem::create_directory(mine, ec);
  if (ec) return Status::IoError(mine + ": cannot create the rank's directory: " + ec.message());
  return mine;
}

#ifndef SSDTRAIN_WITH_MPI

Result<std::unique_ptr<RankSync>> StartRanks() {
  return Status::Unavailable(
      "started by mpirun, but this ssdtrain was built without MPI (install libopenmpi-dev, "
      "the project's scripts/install-deps.sh does, and rebuild)");
}

#else

namespace {

// MPI has no 16-bit floating-point sum: these add in fp32 and round back.
void SumFp16(void* in, void* inout, int* len, MPI_Datatype*) {
  exec::SumInto(traces::DType::kFp16, in, inout, *len);
}
void SumBf16(void* in, void* inout, int* len, MPI_Datatype*) {
  exec::SumInto(traces::DType::kBf16, in, inout, *len);
}

Status MpiError(int code, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Status::Internal(what + ": " + std::string(text, static_cast<size_t>(len)));
}

// Every pipeline message goes under one tag, its exec::PipelineTag in a
// header before its payload (so any micro-batch count fits); the abort
// messages and the reports' gather have their own.
constexpr int kPipelineTag = 0;
constexpr int kAbortTag = 1;
constexpr int kGatherTag = 2;
// The most bytes one MPI call moves: MPI's counts are int. Larger pipeline
// messages and reports go in pieces (a message's pieces in order, as MPI
// keeps the order of one sender's messages under one tag).
constexpr int64_t kMaxPieceBytes = int64_t{1} << 30;
// The most elements one MPI sum takes (its count is an int); larger sums go
// in pieces.
constexpr int64_t kMaxSumElements = int64_t{1} << 30;

// What precedes a pipeline message's payload in its first piece.
struct WireHeader {
  int64_t micro_batch = 0;
  int64_t gradient = 0;
  int64_t index = 0;
  int64_t bytes = 0;  // the payload's
  int64_t collective = 0;
};
constexpr int64_t kHeaderBytes = sizeof(WireHeader);

exec::PipelineTag TagOf(const WireHeader& h) {
  return {h.micro_batch, h.gradient != 0, h.index, h.collective != 0};
}
// How a blocked Receive or WaitSends waits between two polls: for its first
// kSpinFor it only yields the core (a message that is nearly there costs a few
// microseconds, not a sleep's 20 to 40: the 8-byte ping-pong measured 38-45 us
// with sleeps alone), then it sleeps kPollInterval, short against a step's
// milliseconds and long enough to leave the core to the replay's other
// threads. A blocking MPI wait would spin at full speed in Open MPI and could
// not see another rank's abort.
constexpr auto kSpinFor = std::chrono::microseconds(200);
constexpr auto kPollInterval = std::chrono::microseconds(20);

class PollWait {
 public:
  void Next() {
    if (std::chrono::steady_clock::now() - start_ < kSpinFor) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kPollInterval);
    }
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

class MpiSync final : public RankSync {
 public:
  MpiSync() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Op_create(&SumFp16, /*commute=*/1, &sum_fp16_);
    MPI_Op_create(&SumBf16, /*commute=*/1, &sum_bf16_);
    sent_to_.assign(static_cast<size_t>(size_), 0);
    received_from_.assign(static_cast<size_t>(size_), 0);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &async_comm_) != MPI_SUCCESS) async_comm_ = MPI_COMM_NULL;
  }
  ~MpiSync() override {
    (void)WaitAllReduces();  // a failed run's last buckets (exec/step_sync.h)
    Drain();
    if (async_comm_ != MPI_COMM_NULL) MPI_Comm_free(&async_comm_);
    if (stage_comm_ != MPI_COMM_WORLD) MPI_Comm_free(&stage_comm_);
    MPI_Op_free(&sum_fp16_);
    MPI_Op_free(&sum_bf16_);
    MPI_Finalize();
  }

  Status SplitStages(int tp, int dp) override {
    if (tp < 1 || dp < 1 || size_ % (tp * dp) != 0) {
      return Status::InvalidArgument("tp × dp = " + std::to_string(tp) + " × " +
                                     std::to_string(dp) + " does not divide the " +
                                     std::to_string(size_) + " ranks");
    }
    if (stage_comm_ != MPI_COMM_WORLD) MPI_Comm_free(&stage_comm_);
    stage_comm_ = MPI_COMM_WORLD;
    if (dp != size_) {
      const exec::RankLayout layout{tp, dp, size_ / (tp * dp)};
      // One group per stage and tensor-parallel index, ordered by replica.
      const int color = static_cast<int>(layout.StageOf(rank_) * tp + layout.TpIndexOf(rank_));
      const int rc = MPI_Comm_split(MPI_COMM_WORLD, color,
                                    static_cast<int>(layout.DpIndexOf(rank_)), &stage_comm_);
      if (rc != MPI_SUCCESS) {
        stage_comm_ = MPI_COMM_WORLD;
        return MpiError(rc, "MPI_Comm_split into the stages' data-parallel groups");
      }
    }
    // The nonblocking sums on a communicator of their own, so that they never
    // match a blocking collective of the stage's (or the world's) by order.
    if (async_comm_ != MPI_COMM_NULL) MPI_Comm_free(&async_comm_);
    const int rc = MPI_Comm_dup(stage_comm_, &async_comm_);
    if (rc != MPI_SUCCESS) {
      async_comm_ = MPI_COMM_NULL;
      return MpiError(rc, "MPI_Comm_dup of the stage's data-parallel group");
    }
    return Status::Ok();
  }

  Status SendAsync(int to, const exec::PipelineTag& tag, const void* host, int64_t bytes) override {
    // A copy of our own, the header before the payload: the message may still
    // be read (Open MPI's shared memory reads it from this process) after the
    // caller's buffer is gone. Copies of completed sends are reused: a fresh
    // buffer per message costs its page faults (16 MiB on this project's VM:
    // ~18 ms, against ~3 ms for the copy into a warm one).
    SSDTRAIN_RETURN_IF_ERROR(RecycleCompletedSends());
    const int64_t total = kHeaderBytes + bytes;
    PendingSend send;
    send.copy = TakeCopy(total);
    const WireHeader header{tag.micro_batch, tag.gradient ? 1 : 0, tag.index, bytes,
                            tag.collective ? 1 : 0};
    std::memcpy(send.copy->data(), &header, sizeof(header));
    std::memcpy(send.copy->data() + kHeaderBytes, host, static_cast<size_t>(bytes));
    Status posted = Status::Ok();
    for (int64_t at = 0; at < total && posted.ok(); at += kMaxPieceBytes) {
      const int n = static_cast<int>(std::min(kMaxPieceBytes, total - at));
      MPI_Request request = MPI_REQUEST_NULL;
      const int rc = MPI_Isend(send.copy->data() + at, n, MPI_BYTE, to, kPipelineTag,
                               MPI_COMM_WORLD, &request);
      if (rc != MPI_SUCCESS) {
        posted = MpiError(rc, "MPI_Isend to rank " + std::to_string(to));
        break;
      }
      send.requests.push_back(request);
      ++sent_to_[static_cast<size_t>(to)];
    }
    pending_.push_back(std::move(send));  // the pieces posted stay ours until they complete
    return posted;
  }

  Status Receive(int from, void* host, int64_t capacity, exec::PipelineTag* tag,
                 int64_t* bytes) override {
    int count = 0;
    SSDTRAIN_RETURN_IF_ERROR(AwaitPiece(from, &count));
    if (count < kHeaderBytes) {
      return Status::Internal("a pipeline message of " + std::to_string(count) +
                              " bytes from rank " + std::to_string(from) +
                              ", shorter than its header");
    }
    WireHeader h;
    const int64_t first = count - kHeaderBytes;  // the payload's bytes in this piece
    if (first > capacity) {
      SSDTRAIN_RETURN_IF_ERROR(ReceiveHeaderOnly(from, count, &h));
      return TooLarge(from, h, capacity);
    }
    auto* out = static_cast<char*>(host);
    SSDTRAIN_RETURN_IF_ERROR(ReceiveFirstPiece(from, &h, out, first));
    if (h.bytes > capacity) return TooLarge(from, h, capacity);
    for (int64_t done = first; done < h.bytes; done += count) {
      SSDTRAIN_RETURN_IF_ERROR(AwaitPiece(from, &count));
      if (count != std::min(kMaxPieceBytes, h.bytes - done)) {
        return Status::Internal("a piece of " + std::to_string(count) + " bytes from rank " +
                                std::to_string(from) + " in " + TagOf(h).Describe() + " at byte " +
                                std::to_string(done) + " of " + std::to_string(h.bytes));
      }
      const int rc = MPI_Recv(out + done, count, MPI_BYTE, from, kPipelineTag, MPI_COMM_WORLD,
                              MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Recv from rank " + std::to_string(from));
      ++received_from_[static_cast<size_t>(from)];
    }
    *tag = TagOf(h);
    *bytes = h.bytes;
    return Status::Ok();
  }

  Status WaitSends() override {
    PollWait wait;
    while (true) {
      SSDTRAIN_RETURN_IF_ERROR(RecycleCompletedSends());
      if (pending_.empty()) return Status::Ok();
      SSDTRAIN_RETURN_IF_ERROR(CheckAbort());
      wait.Next();
    }
  }

  void Abort(const Status& status) override {
    if (aborted_) return;
    aborted_ = true;
    abort_text_ = status.message();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request request = MPI_REQUEST_NULL;
      if (MPI_Isend(abort_text_.data(), static_cast<int>(abort_text_.size()), MPI_CHAR, r,
                    kAbortTag, MPI_COMM_WORLD, &request) == MPI_SUCCESS) {
        abort_requests_.push_back(request);
        ++sent_to_[static_cast<size_t>(r)];
      }
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status Agree(const Status& local) override {
    // The lowest failing rank (size_ when none), then its message.
    const int mine = local.ok() ? size_ : rank_;
    int first = size_;
    int rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return MpiError(rc, "agreeing on the ranks' status");
    if (first == size_) return Status::Ok();
    std::string message = local.ok() ? "" : local.message();
    int len = static_cast<int>(message.size());
    MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD);
    message.resize(static_cast<size_t>(len));
    MPI_Bcast(message.data(), len, MPI_CHAR, first, MPI_COMM_WORLD);
    if (!local.ok()) return local;
    return Status::Unavailable("rank " + std::to_string(first) + " failed: " + message);
  }

  Status AllReduceSum(void* host, int64_t count, traces::DType dtype) override {
    MPI_Datatype type = MPI_BYTE;
    MPI_Op op = MPI_SUM;
    TypeAndSum(dtype, &type, &op);
    // MPI counts are int: large gradients go in pieces.
    auto* p = static_cast<uint8_t*>(host);
    const int64_t element = traces::DTypeSize(dtype);
    for (int64_t done = 0; done < count; done += kMaxSumElements) {
      const int n = static_cast<int>(std::min(kMaxSumElements, count - done));
      const int rc = MPI_Allreduce(MPI_IN_PLACE, p + done * element, n, type, op, stage_comm_);
      if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Allreduce");
    }
    return Status::Ok();
  }

  Status AllReduceSumAsync(void* host, int64_t count, traces::DType dtype) override {
    if (async_comm_ == MPI_COMM_NULL) {
      return Status::Internal(
          "no communicator for the nonblocking all-reduces (MPI_Comm_dup failed)");
    }
    MPI_Datatype type = MPI_BYTE;
    MPI_Op op = MPI_SUM;
    TypeAndSum(dtype, &type, &op);
    auto* p = static_cast<uint8_t*>(host);
    const int64_t element = traces::DTypeSize(dtype);
    PostedSum sum;
    Status posted = Status::Ok();
    for (int64_t done = 0; done < count; done += kMaxSumElements) {
      const int n = static_cast<int>(std::min(kMaxSumElements, count - done));
      MPI_Request request = MPI_REQUEST_NULL;
      const int rc =
          MPI_Iallreduce(MPI_IN_PLACE, p + done * element, n, type, op, async_comm_, &request);
      if (rc != MPI_SUCCESS) {
        posted = MpiError(rc, "MPI_Iallreduce");
        break;
      }
      sum.requests.push_back(request);
    }
    sums_.push_back(std::move(sum));  // the pieces posted complete in WaitAllReduces
    return posted;
  }

  Status ProgressAllReduces(int64_t* completed) override {
    while (sums_completed_ < sums_.size()) {
      std::vector<MPI_Request>& r = sums_[sums_completed_].requests;
      int done = 0;
      const int rc = MPI_Testall(static_cast<int>(r.size()), r.data(), &done, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Testall of the gradients' all-reduces");
      if (!done) break;
      ++sums_completed_;
    }
    *completed = static_cast<int64_t>(sums_completed_);
    return Status::Ok();
  }

  Status WaitAllReduces() override {
    Status first = Status::Ok();
    for (PostedSum& sum : sums_) {
      const int rc = MPI_Waitall(static_cast<int>(sum.requests.size()), sum.requests.data(),
                                 MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS && first.ok()) {
        first = MpiError(rc, "MPI_Waitall of the gradients' all-reduces");
      }
    }
    sums_.clear();
    sums_completed_ = 0;
    return first;
  }

  // Lengths in 64 bits, then each rank's bytes to rank 0 point to point in
  // pieces: MPI_Gatherv's int counts and offsets hold at most 2 GiB in all.
  Result<std::vector<std::string>> GatherAtRankZero(const std::string& mine) override {
    const int64_t len = static_cast<int64_t>(mine.size());
    std::vector<int64_t> lens(static_cast<size_t>(size_));
    int rc = MPI_Gather(&len, 1, MPI_INT64_T, lens.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return MpiError(rc, "gathering the ranks' report lengths");
    std::vector<std::string> out;
    if (rank_ != 0) {
      for (int64_t at = 0; at < len; at += kMaxPieceBytes) {
        const int n = static_cast<int>(std::min(kMaxPieceBytes, len - at));
        rc = MPI_Send(mine.data() + at, n, MPI_CHAR, 0, kGatherTag, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return MpiError(rc, "sending this rank's report to rank 0");
      }
      return out;
    }
    out.push_back(mine);
    for (int r = 1; r < size_; ++r) {
      std::string& theirs =
          out.emplace_back(static_cast<size_t>(lens[static_cast<size_t>(r)]), '\0');
      for (int64_t at = 0; at < static_cast<int64_t>(theirs.size()); at += kMaxPieceBytes) {
        const int n =
            static_cast<int>(std::min(kMaxPieceBytes, static_cast<int64_t>(theirs.size()) - at));
        rc = MPI_Recv(theirs.data() + at, n, MPI_CHAR, r, kGatherTag, MPI_COMM_WORLD,
                      MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          return MpiError(rc, "receiving rank " + std::to_string(r) + "'s report");
        }
      }
    }
    return out;
  }

 private:
  // The MPI type and sum of `dtype` (16-bit floats: our own sums, above).
  void TypeAndSum(traces::DType dtype, MPI_Datatype* type_out, MPI_Op* op_out) const {
    MPI_Datatype type = MPI_BYTE;
    MPI_Op op = MPI_SUM;
    switch (dtype) {
      case traces::DType::kFp32:
        type = MPI_FLOAT;
        break;
      case traces::DType::kFp16:
        type = MPI_UINT16_T;
        op = sum_fp16_;
        break;
      case traces::DType::kBf16:
        type = MPI_UINT16_T;
        op = sum_bf16_;
        break;
      case traces::DType::kInt32:
        type = MPI_INT32_T;
        break;
      case traces::DType::kInt64:
        type = MPI_INT64_T;
        break;
      case traces::DType::kUint8:
        type = MPI_UINT8_T;
        break;
    }
    *type_out = type;
    *op_out = op;
  }

  // Another rank's abort message, if one has come: "rank R failed: ...".
  Status CheckAbort() {
    int flag = 0;
    MPI_Status status;
    int rc = MPI_Iprobe(MPI_ANY_SOURCE, kAbortTag, MPI_COMM_WORLD, &flag, &status);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Iprobe for an abort");
    if (!flag) return Status::Ok();
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    std::string text(static_cast<size_t>(count), '\0');
    rc = MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, kAbortTag, MPI_COMM_WORLD,
                  MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Recv of an abort");
    ++received_from_[static_cast<size_t>(status.MPI_SOURCE)];
    return Status::Unavailable("rank " + std::to_string(status.MPI_SOURCE) + " failed: " + text);
  }

  // Before MPI_Finalize: every message sent to this rank and not received (a
  // failure stopped its receiver; the aborts) is received and dropped, then
  // this rank's sends complete. Every rank counts what it sent to each.
  void Drain() {
    std::vector<long long> expected(static_cast<size_t>(size_), 0);
    if (MPI_Alltoall(sent_to_.data(), 1, MPI_LONG_LONG, expected.data(), 1, MPI_LONG_LONG,
                     MPI_COMM_WORLD) != MPI_SUCCESS) {
      return;  // MPI is broken: MPI_Finalize reports it
    }
    std::vector<char> scratch;
    for (int r = 0; r < size_; ++r) {
      while (received_from_[static_cast<size_t>(r)] < expected[static_cast<size_t>(r)]) {
        MPI_Status status;
        if (MPI_Probe(r, MPI_ANY_TAG, MPI_COMM_WORLD, &status) != MPI_SUCCESS) return;
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        scratch.resize(static_cast<size_t>(std::max(count, 1)));
        MPI_Recv(scratch.data(), count, MPI_BYTE, r, status.MPI_TAG, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        ++received_from_[static_cast<size_t>(r)];
      }
    }
    for (PendingSend& send : pending_) {
      MPI_Waitall(static_cast<int>(send.requests.size()), send.requests.data(),
                  MPI_STATUSES_IGNORE);
    }
    if (!abort_requests_.empty()) {
      MPI_Waitall(static_cast<int>(abort_requests_.size()), abort_requests_.data(),
                  MPI_STATUSES_IGNORE);
    }
  }

  // Moves the copies of completed pipeline sends to free_copies_.
  Status RecycleCompletedSends() {
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      PendingSend& send = pending_[i];
      int done = 0;
      const int rc = MPI_Testall(static_cast<int>(send.requests.size()), send.requests.data(),
                                 &done, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) return MpiError(rc, "completing the pipeline's sends");
      if (done) {
        free_copies_.push_back(std::move(send.copy));
        continue;
      }
      if (kept != i) pending_[kept] = std::move(send);
      ++kept;
    }
    pending_.resize(kept);
    return Status::Ok();
  }

  // A buffer of at least `bytes`: a completed send's, or a new one.
  std::unique_ptr<std::vector<char>> TakeCopy(int64_t bytes) {
    auto warm = std::find_if(free_copies_.begin(), free_copies_.end(), [&](const auto& b) {
      return static_cast<int64_t>(b->size()) >= bytes;
    });
    if (warm == free_copies_.end()) {
      return std::make_unique<std::vector<char>>(static_cast<size_t>(bytes));
    }
    std::unique_ptr<std::vector<char>> copy = std::move(*warm);
    free_copies_.erase(warm);
    return copy;
  }

  // Waits for the next piece of a pipeline message from rank `from` (its
  // size in `*count`), or another rank's abort.
  Status AwaitPiece(int from, int* count) {
    PollWait wait;
    while (true) {
      SSDTRAIN_RETURN_IF_ERROR(CheckAbort());
      int flag = 0;
      MPI_Status status;
      const int rc = MPI_Iprobe(from, kPipelineTag, MPI_COMM_WORLD, &flag, &status);
      if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Iprobe for rank " + std::to_string(from));
      if (flag) return MpiCount(status, count);
      wait.Next();
    }
  }

  static Status MpiCount(const MPI_Status& status, int* count) {
    const int rc = MPI_Get_count(&status, MPI_BYTE, count);
    return rc == MPI_SUCCESS ? Status::Ok() : MpiError(rc, "MPI_Get_count");
  }

  // Receives a message's first piece: its header into `*h`, the `first`
  // payload bytes after it into `host`. Through a warm buffer of our own and
  // one copy out: a derived datatype scattering header and payload (one
  // receive, no copy) ran the pipeline's sends 30-40% slower on Open MPI's
  // shared memory (tiny-gpt pp 2: 380 -> 520 ms a step).
  Status ReceiveFirstPiece(int from, WireHeader* h, char* host, int64_t first) {
    const auto count = static_cast<size_t>(kHeaderBytes + first);
    if (receive_buffer_.size() < count) receive_buffer_.resize(count);
    const int rc = MPI_Recv(receive_buffer_.data(), static_cast<int>(count), MPI_BYTE, from,
                            kPipelineTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Recv from rank " + std::to_string(from));
    ++received_from_[static_cast<size_t>(from)];
    std::memcpy(h, receive_buffer_.data(), sizeof(*h));
    std::memcpy(host, receive_buffer_.data() + kHeaderBytes, static_cast<size_t>(first));
    return Status::Ok();
  }

  // Receives a first piece too large for the caller's buffer, to name it.
  Status ReceiveHeaderOnly(int from, int count, WireHeader* h) {
    std::vector<char> scratch(static_cast<size_t>(count));
    const int rc = MPI_Recv(scratch.data(), count, MPI_BYTE, from, kPipelineTag, MPI_COMM_WORLD,
                            MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Recv from rank " + std::to_string(from));
    ++received_from_[static_cast<size_t>(from)];
    std::memcpy(h, scratch.data(), sizeof(*h));
    return Status::Ok();
  }

  static Status TooLarge(int from, const WireHeader& h, int64_t capacity) {
    return Status::FailedPrecondition("the next message from rank " + std::to_string(from) + " (" +
                                      TagOf(h).Describe() + ") has " + std::to_string(h.bytes) +
                                      " bytes, more than the " + std::to_string(capacity) +
                                      " expected");
  }

  int rank_ = 0, size_ = 1;
  MPI_Op sum_fp16_ = MPI_OP_NULL, sum_bf16_ = MPI_OP_NULL;
  MPI_Comm stage_comm_ = MPI_COMM_WORLD;  // this stage's data-parallel group
  // The nonblocking sums: a duplicate of stage_comm_, and the sums posted
  // since the last WaitAllReduces (each one request per piece), of which the
  // first sums_completed_ have completed.
  MPI_Comm async_comm_ = MPI_COMM_NULL;
  struct PostedSum {
    std::vector<MPI_Request> requests;
  };
  std::vector<PostedSum> sums_;
  size_t sums_completed_ = 0;
  // Point-to-point messages (pipeline pieces and aborts): sends not yet
  // complete, and how many messages went to and came from each rank.
  struct PendingSend {
    std::vector<MPI_Request> requests;        // one per piece
    std::unique_ptr<std::vector<char>> copy;  // header and payload, until all complete
  };
  std::vector<PendingSend> pending_;
  std::vector<MPI_Request> abort_requests_;                      // completed by Drain
  std::vector<std::unique_ptr<std::vector<char>>> free_copies_;  // completed sends' copies
  std::vector<char> receive_buffer_;  // a first piece lands here (ReceiveFirstPiece)
  std::vector<long long> sent_to_, received_from_;
  bool aborted_ = false;
  std::string abort_text_;  // the abort messages' buffer, kept until they complete
};

}  // namespace

Result<std::unique_ptr<RankSync>> StartRanks() {
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Init_thread");
  // Errors come back as return codes, reported with the rank's message.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return std::unique_ptr<RankSync>(new MpiSync());
}

#endif

}  // namespace ssdtrain::app

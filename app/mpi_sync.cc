#include "app/mpi_sync.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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

float HalfToFloat(uint16_t h) {
  _Float16 f;
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}
uint16_t FloatToHalf(float x) {
  const _Float16 f = static_cast<_Float16>(x);
  uint16_t h;
  std::memcpy(&h, &f, 2);
  return h;
}
float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t FloatToBf16(float x) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// MPI has no 16-bit floating-point sum: these add in fp32 and round back.
void SumFp16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = FloatToHalf(HalfToFloat(a[i]) + HalfToFloat(b[i]));
}
void SumBf16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = FloatToBf16(Bf16ToFloat(a[i]) + Bf16ToFloat(b[i]));
}

Status MpiError(int code, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Status::Internal(what + ": " + std::string(text, static_cast<size_t>(len)));
}

// The abort message's tag: above every pipeline message's (exec/step_sync.h).
constexpr int kAbortTag = static_cast<int>(exec::kMaxPipelineTag) + 1;
// How long a blocked Receive or WaitSends sleeps between two polls: short
// against a step's milliseconds, long enough to leave the core to the replay.
constexpr auto kPollInterval = std::chrono::microseconds(20);

class MpiSync final : public RankSync {
 public:
  MpiSync() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Op_create(&SumFp16, /*commute=*/1, &sum_fp16_);
    MPI_Op_create(&SumBf16, /*commute=*/1, &sum_bf16_);
    sent_to_.assign(static_cast<size_t>(size_), 0);
    received_from_.assign(static_cast<size_t>(size_), 0);
  }
  ~MpiSync() override {
    Drain();
    if (stage_comm_ != MPI_COMM_WORLD) MPI_Comm_free(&stage_comm_);
    MPI_Op_free(&sum_fp16_);
    MPI_Op_free(&sum_bf16_);
    MPI_Finalize();
  }

  Status SplitStages(int dp) override {
    if (dp < 1 || size_ % dp != 0) {
      return Status::InvalidArgument("dp = " + std::to_string(dp) + " does not divide the " +
                                     std::to_string(size_) + " ranks");
    }
    if (stage_comm_ != MPI_COMM_WORLD) MPI_Comm_free(&stage_comm_);
    stage_comm_ = MPI_COMM_WORLD;
    if (dp == size_) return Status::Ok();
    const int rc = MPI_Comm_split(MPI_COMM_WORLD, rank_ / dp, rank_ % dp, &stage_comm_);
    if (rc != MPI_SUCCESS) {
      stage_comm_ = MPI_COMM_WORLD;
      return MpiError(rc, "MPI_Comm_split into the stages' data-parallel groups");
    }
    return Status::Ok();
  }

  Status SendAsync(int to, const exec::PipelineTag& tag, const void* host, int64_t bytes) override {
    if (bytes > INT_MAX) {
      return Status::InvalidArgument("a pipeline message of " + std::to_string(bytes) +
                                     " bytes, more than MPI's int count");
    }
    // A copy of our own: the message may still be read (Open MPI's shared
    // memory reads it from this process) after the caller's buffer is gone.
    // Copies of completed sends are reused: a fresh buffer per message costs
    // its page faults (16 MiB on this project's VM: ~18 ms, against ~3 ms
    // for the copy into a warm one).
    SSDTRAIN_RETURN_IF_ERROR(RecycleCompletedSends());
    std::unique_ptr<std::vector<char>> copy;
    auto warm = std::find_if(free_copies_.begin(), free_copies_.end(), [&](const auto& b) {
      return static_cast<int64_t>(b->size()) >= bytes;
    });
    if (warm != free_copies_.end()) {
      copy = std::move(*warm);
      free_copies_.erase(warm);
    } else {
      copy = std::make_unique<std::vector<char>>(static_cast<size_t>(bytes));
    }
    std::memcpy(copy->data(), host, static_cast<size_t>(bytes));
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = MPI_Isend(copy->data(), static_cast<int>(bytes), MPI_BYTE, to,
                             static_cast<int>(exec::EncodeTag(tag)), MPI_COMM_WORLD, &request);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Isend to rank " + std::to_string(to));
    pending_.push_back(request);
    pending_bytes_.push_back(std::move(copy));
    ++sent_to_[static_cast<size_t>(to)];
    return Status::Ok();
  }

  Status Receive(int from, void* host, int64_t capacity, exec::PipelineTag* tag,
                 int64_t* bytes) override {
    while (true) {
      SSDTRAIN_RETURN_IF_ERROR(CheckAbort());
      int flag = 0;
      MPI_Status status;
      int rc = MPI_Iprobe(from, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &status);
      if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Iprobe for rank " + std::to_string(from));
      if (!flag || status.MPI_TAG == kAbortTag) {  // an abort: CheckAbort takes it
        std::this_thread::sleep_for(kPollInterval);
        continue;
      }
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      if (count > capacity) {
        return Status::FailedPrecondition(
            "the next message from rank " + std::to_string(from) + " (" +
            exec::DecodeTag(status.MPI_TAG).Describe() + ") has " + std::to_string(count) +
            " bytes, more than the " + std::to_string(capacity) + " expected");
      }
      rc = MPI_Recv(host, count, MPI_BYTE, from, status.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Recv from rank " + std::to_string(from));
      ++received_from_[static_cast<size_t>(from)];
      *tag = exec::DecodeTag(status.MPI_TAG);
      *bytes = count;
      return Status::Ok();
    }
  }

  Status WaitSends() override {
    while (!pending_.empty()) {
      int done = 0;
      const int rc = MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done,
                                 MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) return MpiError(rc, "completing the pipeline's sends");
      if (done) {
        for (auto& copy : pending_bytes_) {
          if (copy != nullptr) free_copies_.push_back(std::move(copy));
        }
        pending_.clear();
        pending_bytes_.clear();
        break;
      }
      SSDTRAIN_RETURN_IF_ERROR(CheckAbort());
      std::this_thread::sleep_for(kPollInterval);
    }
    return Status::Ok();
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
        pending_.push_back(request);
        pending_bytes_.push_back(nullptr);
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
    // MPI counts are int: large gradients go in pieces.
    auto* p = static_cast<uint8_t*>(host);
    const int64_t element = traces::DTypeSize(dtype);
    constexpr int64_t kPiece = int64_t{1} << 30;
    for (int64_t done = 0; done < count; done += kPiece) {
      const int n = static_cast<int>(std::min(kPiece, count - done));
      const int rc = MPI_Allreduce(MPI_IN_PLACE, p + done * element, n, type, op, stage_comm_);
      if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Allreduce");
    }
    return Status::Ok();
  }

  Result<std::vector<std::string>> GatherAtRankZero(const std::string& mine) override {
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(static_cast<size_t>(size_));
    int rc = MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return MpiError(rc, "gathering the ranks' reports");
    std::vector<int> offsets(static_cast<size_t>(size_), 0);
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[static_cast<size_t>(r)] = total;
      total += lens[static_cast<size_t>(r)];
    }
    std::string all(static_cast<size_t>(rank_ == 0 ? total : 0), '\0');
    rc = MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR,
                     0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return MpiError(rc, "gathering the ranks' reports");
    std::vector<std::string> out;
    if (rank_ != 0) return out;
    for (int r = 0; r < size_; ++r) {
      out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                               static_cast<size_t>(lens[static_cast<size_t>(r)])));
    }
    return out;
  }

 private:
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
    if (!pending_.empty()) {
      MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
    }
  }

  // Moves the copies of completed pipeline sends to free_copies_.
  Status RecycleCompletedSends() {
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      int done = 0;
      if (pending_bytes_[i] != nullptr) {  // an abort's message stays until WaitSends or Drain
        const int rc = MPI_Test(&pending_[i], &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return MpiError(rc, "completing the pipeline's sends");
      }
      if (done) {
        free_copies_.push_back(std::move(pending_bytes_[i]));
        continue;
      }
      pending_[kept] = pending_[i];
      pending_bytes_[kept] = std::move(pending_bytes_[i]);
      ++kept;
    }
    pending_.resize(kept);
    pending_bytes_.resize(kept);
    return Status::Ok();
  }

  int rank_ = 0, size_ = 1;
  MPI_Op sum_fp16_ = MPI_OP_NULL, sum_bf16_ = MPI_OP_NULL;
  MPI_Comm stage_comm_ = MPI_COMM_WORLD;  // this stage's data-parallel group
  // Point-to-point messages (pipeline and aborts): requests not yet complete,
  // and how many went to and came from each rank.
  std::vector<MPI_Request> pending_;
  std::vector<std::unique_ptr<std::vector<char>>> pending_bytes_;  // each send's own copy
  std::vector<std::unique_ptr<std::vector<char>>> free_copies_;    // completed sends' copies
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

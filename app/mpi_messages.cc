// MpiSync's point-to-point messages (app/detail/mpi_sync.h): the pipeline's
// messages in pieces behind their header, their send copies recycled, the
// polling waits that see another rank's abort, the aborts, and the drain
// before MPI_Finalize.
#ifdef SSDTRAIN_WITH_MPI

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "app/detail/mpi_sync.h"

namespace ssdtrain::app::detail {
namespace {

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

}  // namespace

Status MpiSync::SendAsync(int to, const exec::PipelineTag& tag, const void* host, int64_t bytes) {
  // A copy of our own, the header before the payload: the message may still
  // be read (Open MPI's shared memory reads it from this process) after the
  // caller's buffer is gone. Copies of completed sends are reused: a fresh
  // buffer per message costs its page faults (16 MiB on this project's VM:
  // ~18 ms in 4 KiB pages, against ~3 ms for the copy into a warm one), and a
  // fresh one is a MappedBuffer, in huge pages where the kernel has them.
  SSDTRAIN_RETURN_IF_ERROR(RecycleCompletedSends());
  const int64_t total = kHeaderBytes + bytes;
  PendingSend send;
  send.copy = TakeCopy(total);
  const WireHeader header{tag.micro_batch, tag.gradient ? 1 : 0,   tag.index,
                          bytes,           tag.collective ? 1 : 0, tag.chunk};
  std::memcpy(send.copy->data(), &header, sizeof(header));
  std::memcpy(send.copy->data() + kHeaderBytes, host, static_cast<size_t>(bytes));
  Status posted = Status::Ok();
  for (int64_t at = 0; at < total && posted.ok(); at += kMaxPieceBytes) {
    const int n = static_cast<int>(std::min(kMaxPieceBytes, total - at));
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc =
        MPI_Isend(send.copy->data() + at, n, MPI_BYTE, to, kPipelineTag, MPI_COMM_WORLD, &request);
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

Status MpiSync::Receive(int from, void* host, int64_t capacity, exec::PipelineTag* tag,
                        int64_t* bytes) {
  int count = 0;
  SSDTRAIN_RETURN_IF_ERROR(AwaitPiece(from, &count));
  if (count < kHeaderBytes) {
    return Status::Internal("a pipeline message of " + std::to_string(count) + " bytes from rank " +
                            std::to_string(from) + ", shorter than its header");
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

Status MpiSync::WaitSends() {
  PollWait wait;
  while (true) {
    SSDTRAIN_RETURN_IF_ERROR(RecycleCompletedSends());
    if (pending_.empty()) return Status::Ok();
    SSDTRAIN_RETURN_IF_ERROR(CheckAbort());
    wait.Next();
  }
}

void MpiSync::Abort(const Status& status) {
  if (aborted_) return;
  aborted_ = true;
  abort_text_ = status.message();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(abort_text_.data(), static_cast<int>(abort_text_.size()), MPI_CHAR, r, kAbortTag,
                  MPI_COMM_WORLD, &request) == MPI_SUCCESS) {
      abort_requests_.push_back(request);
      ++sent_to_[static_cast<size_t>(r)];
    }
  }
}

Status MpiSync::CheckAbort() {
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

void MpiSync::Drain() {
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
    MPI_Waitall(static_cast<int>(send.requests.size()), send.requests.data(), MPI_STATUSES_IGNORE);
  }
  if (!abort_requests_.empty()) {
    MPI_Waitall(static_cast<int>(abort_requests_.size()), abort_requests_.data(),
                MPI_STATUSES_IGNORE);
  }
}

Status MpiSync::RecycleCompletedSends() {
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    PendingSend& send = pending_[i];
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(send.requests.size()), send.requests.data(), &done,
                               MPI_STATUSES_IGNORE);
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

std::unique_ptr<MappedBuffer> MpiSync::TakeCopy(int64_t bytes) {
  auto warm = std::find_if(free_copies_.begin(), free_copies_.end(),
                           [&](const auto& b) { return static_cast<int64_t>(b->size()) >= bytes; });
  if (warm == free_copies_.end()) {
    return std::make_unique<MappedBuffer>(static_cast<size_t>(bytes));
  }
  std::unique_ptr<MappedBuffer> copy = std::move(*warm);
  free_copies_.erase(warm);
  return copy;
}

Status MpiSync::AwaitPiece(int from, int* count) {
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

Status MpiSync::MpiCount(const MPI_Status& status, int* count) {
  const int rc = MPI_Get_count(&status, MPI_BYTE, count);
  return rc == MPI_SUCCESS ? Status::Ok() : MpiError(rc, "MPI_Get_count");
}

Status MpiSync::ReceiveFirstPiece(int from, WireHeader* h, char* host, int64_t first) {
  const auto count = static_cast<size_t>(kHeaderBytes + first);
  if (receive_buffer_.size() < count) receive_buffer_ = MappedBuffer(count);  // nothing kept
  const int rc = MPI_Recv(receive_buffer_.data(), static_cast<int>(count), MPI_BYTE, from,
                          kPipelineTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Recv from rank " + std::to_string(from));
  ++received_from_[static_cast<size_t>(from)];
  std::memcpy(h, receive_buffer_.data(), sizeof(*h));
  std::memcpy(host, receive_buffer_.data() + kHeaderBytes, static_cast<size_t>(first));
  return Status::Ok();
}

Status MpiSync::ReceiveHeaderOnly(int from, int count, WireHeader* h) {
  std::vector<char> scratch(static_cast<size_t>(count));
  const int rc = MPI_Recv(scratch.data(), count, MPI_BYTE, from, kPipelineTag, MPI_COMM_WORLD,
                          MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Recv from rank " + std::to_string(from));
  ++received_from_[static_cast<size_t>(from)];
  std::memcpy(h, scratch.data(), sizeof(*h));
  return Status::Ok();
}

Status MpiSync::TooLarge(int from, const WireHeader& h, int64_t capacity) {
  return Status::FailedPrecondition(
      "the next message from rank " + std::to_string(from) + " (" + TagOf(h).Describe() + ") has " +
      std::to_string(h.bytes) + " bytes, more than the " + std::to_string(capacity) + " expected");
}

}  // namespace ssdtrain::app::detail

#endif  // SSDTRAIN_WITH_MPI

// OffloadEngine::Impl, the I/O thread: takes blocks into queue slots, submits
// them (failing exactly the requests the backend did not queue), handles
// completions the liburing way (EAGAIN resubmits with backoff, short transfers
// continue, EOF is an error), and keeps reaping after a failed wait until the
// kernel has handed back every request.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "exec/detail/engine_impl.h"
#include "exec/detail/round_up.h"

namespace ssdtrain::exec {
namespace {

using detail::NowNs;
using detail::RoundUp;

// -EAGAIN: the first answer is resubmitted at once; each further one in a row
// for the same request waits twice as long as the last, from 50 us up to 10 ms,
// so that a device that keeps answering EAGAIN does not spin the I/O thread.
constexpr int64_t kEagainBackoffMinNs = 50'000;
constexpr int64_t kEagainBackoffMaxNs = 10'000'000;
constexpr int kMaxBackoffShift = 8;  // 50 us << 8 is past the 10 ms cap
// After a failed wait for completions, the I/O thread pauses this long before
// reaping again (the requests in flight still belong to the kernel).
constexpr auto kReapRetryDelay = std::chrono::milliseconds(1);

}  // namespace

void OffloadEngine::Impl::SetBusy(IoOp op, int delta) {
  const int d = op == IoOp::kRead ? 0 : 1;
  const int before = dir_in_flight[d];
  dir_in_flight[d] += delta;
  if (before == 0 && dir_in_flight[d] > 0) busy_since[d] = NowNs();
  if (before > 0 && dir_in_flight[d] == 0) {
    const int64_t busy = NowNs() - busy_since[d];
    detail::MutexLock lock(&mu);
    (op == IoOp::kRead ? stats.read_busy_ns : stats.write_busy_ns) += busy;
  }
}

IoRequest OffloadEngine::Impl::ToIoRequest(const Request& r, size_t slot) const {
  IoRequest io;
  io.op = r.job->op;
  io.fd = r.job->SegmentOf(r.block).fd;
  io.buf = r.io_buf + r.done;
  io.len = static_cast<uint32_t>(r.len - r.done);
  io.offset = r.offset + r.done;
  io.buf_index = r.buf_index;
  io.user_data = slot;
  io.device_memory = r.job->device;
  return io;
}

bool OffloadEngine::Impl::InExternal(const char* p, int64_t n) const {
  const auto* base = static_cast<const char*>(options.external_staging.iov_base);
  return base != nullptr && p >= base &&
         p + n <= base + static_cast<int64_t>(options.external_staging.iov_len);
}

int OffloadEngine::Impl::ExternalFixedIndex(const char* p, int64_t n) const {
  const int chunk = detail::ChunkOf(static_cast<const char*>(options.external_staging.iov_base), p,
                                    n, detail::kMaxFixedBufferBytes);
  return chunk < 0 ? -1 : external_index + chunk;
}

void OffloadEngine::Impl::Prepare(size_t s, Job* job, int64_t block) {
  Request& r = requests[s];
  r = Request{};
  r.busy = true;
  r.job = job;
  r.block = block;
  const int64_t start = block * options.block_size;
  r.payload = std::min(options.block_size, job->bytes - start);
  r.len = RoundUp(r.payload, kDirectIoAlign);
  r.offset = job->OffsetOf(block, options.block_size);
  char* user = job->buf + start;
  if (job->device) {
    // GPU memory to or from the file as it is: cuFile takes the unaligned
    // tail itself (its own bounce), and nothing here may touch the memory.
    r.len = r.payload;
    r.io_buf = user;
    r.crc = job->crcs[static_cast<size_t>(block)];
    return;
  }
  const bool in_lease = pool->InLeaseRegion(user, r.len);
  const bool in_external = InExternal(user, r.len);
  const bool aligned_start = reinterpret_cast<uintptr_t>(user) % kDirectIoAlign == 0;
  // In place when O_DIRECT can take the memory as it is: an aligned start,
  // and whole pages, or the padding up to the page owned by us (the lease
  // region) or by the caller's external staging.
  r.bounced = !(aligned_start && (in_lease || in_external || r.payload == r.len));
  r.io_buf = r.bounced ? pool->slot(static_cast<int>(s)) : user;
  r.buf_index = !registered                 ? -1
                : in_external && !r.bounced ? ExternalFixedIndex(r.io_buf, r.len)
                                            : pool->FixedIndexOf(r.io_buf, r.len);
  r.crc = job->crcs[static_cast<size_t>(block)];
  if (job->op == IoOp::kWrite) {
    if (r.bounced) std::memcpy(r.io_buf, user, static_cast<size_t>(r.payload));
    if (r.len > r.payload) {
      std::memset(r.io_buf + r.payload, 0, static_cast<size_t>(r.len - r.payload));
    }
  }
}

bool OffloadEngine::Impl::Complete(size_t s, int64_t res, Status* error) {
  Request& r = requests[s];
  Job& job = *r.job;
  if (res == -EAGAIN) {
    const int64_t delay =
        ++r.eagain_streak < 2
            ? 0
            : std::min(kEagainBackoffMaxNs,
                       kEagainBackoffMinNs << std::min(r.eagain_streak - 2, kMaxBackoffShift));
    r.resubmit_ns = delay > 0 ? NowNs() + delay : 0;
    detail::MutexLock lock(&mu);
    stats.eagain_resubmits++;
    stats.eagain_backoff_ns += delay;
    return true;
  }
  r.eagain_streak = 0;
  if (res < 0) {
    *error = IoErrorStatus(job, job.SegmentOf(r.block), static_cast<int>(-res));
    return false;
  }
  if (res == 0) {
    *error = Status::IoError(
        std::string(job.op == IoOp::kRead ? "unexpected end of file reading"
                                          : "zero-byte write writing") +
        " tensor " + std::to_string(job.tensor) + " in " + job.SegmentOf(r.block).path +
        " at byte " + std::to_string(r.offset + r.done) + " (" + std::to_string(r.len - r.done) +
        " bytes missing); the file was truncated or the disk is failing");
    return false;
  }
  r.done += res;
  if (r.done < r.len && job.SegmentOf(r.block).direct && r.done % kDirectIoAlign != 0) {
    *error =
        Status::IoError(std::string(job.op == IoOp::kRead ? "reading" : "writing") + " tensor " +
                        std::to_string(job.tensor) + " in " + job.SegmentOf(r.block).path +
                        ": the device transferred " + std::to_string(r.done) + " of " +
                        std::to_string(r.len) + " bytes at byte " + std::to_string(r.offset) +
                        ", stopping inside a " + std::to_string(kDirectIoAlign) +
                        "-byte block where O_DIRECT cannot continue; the file system or device is "
                        "misbehaving: check it (dmesg) or point --dir elsewhere");
    return false;
  }
  if (r.done < r.len) {
    detail::MutexLock lock(&mu);
    stats.short_continuations++;
    return true;
  }
  if (job.op == IoOp::kRead && r.bounced) {
    std::memcpy(job.buf + r.block * options.block_size, r.io_buf, static_cast<size_t>(r.payload));
  }
  return false;
}

void OffloadEngine::Impl::SubmitBatch(const std::vector<IoRequest>& batch, const char* what,
                                      std::vector<size_t>* free_slots) {
  if (batch.empty()) return;
  size_t queued = 0;
  Status s = backend->Submit(batch, &queued);
  if (s.ok() && queued == batch.size()) return;
  if (s.ok()) s = Status::Internal("the I/O backend queued only part of a batch");
  for (size_t i = queued; i < batch.size(); ++i) {
    FinishRequest(static_cast<size_t>(batch[i].user_data), s.WithPrefix(what), free_slots);
  }
}

std::deque<OffloadEngine::Impl::Job*>::iterator OffloadEngine::Impl::NextJob() {
  const auto oldest = queue.begin();
  const int d = (*oldest)->op == IoOp::kWrite ? 1 : 0;
  // The oldest's direction has no more in flight: it wins without a scan (this
  // runs for every block taken, and forward queues many writes and no reads).
  if (dir_in_flight[1 - d] >= dir_in_flight[d]) return oldest;
  const auto other = std::find_if(queue.begin(), queue.end(), [d](const Job* j) {
    return (j->op == IoOp::kWrite ? 1 : 0) != d;
  });
  return other == queue.end() ? oldest : other;
}

void OffloadEngine::Impl::IoLoop() {
  const size_t depth = requests.size();
  std::vector<IoRequest> batch;
  std::vector<IoCompletion> done(depth);
  std::vector<size_t> free_slots;
  for (size_t i = depth; i-- > 0;) free_slots.push_back(i);
  while (true) {
    batch.clear();
    int64_t wait_ns = -1;
    if (!TakeBlocks(&batch, &free_slots)) return;
    SubmitBatch(batch, "submitting I/O", &free_slots);
    batch.clear();
    ResubmitDue(&batch, &free_slots, &wait_ns);
    SubmitBatch(batch, "resubmitting I/O", &free_slots);
    ReleaseHeld(&free_slots, &wait_ns);
    if (GoRoundAgain(free_slots)) wait_ns = 0;
    Result<int> n = backend->Reap(done, 1, wait_ns);
    if (!n.ok()) {
      // Waiting failed, but the requests in flight are still the kernel's:
      // record the failure (no new blocks are taken) and keep reaping until
      // every one has come back; the purge follows then.
      {
        detail::MutexLock lock(&mu);
        RecordFailureLocked(n.status().WithPrefix("waiting for I/O completions"));
      }
      std::this_thread::sleep_for(kReapRetryDelay);
      continue;
    }
    batch.clear();
    for (int i = 0; i < *n; ++i) OnCompletion(done[static_cast<size_t>(i)], &batch, &free_slots);
    SubmitBatch(batch, "resubmitting I/O", &free_slots);
  }
}

bool OffloadEngine::Impl::TakeBlocks(std::vector<IoRequest>* batch,
                                     std::vector<size_t>* free_slots) {
  detail::MutexLock lock(&mu);
  MaybePurgeLocked();
  if (stopping && in_flight == 0) {
    for (Job* job : queue) {
      if (job->in_flight == 0) {
        job->status = Status::FailedPrecondition("the offload engine was destroyed");
        job->finished = true;
      }
    }
    queue.clear();
    cv.NotifyAll();
    return false;
  }
  while (failed.ok() && !stopping && !queue.empty() && !free_slots->empty()) {
    const auto q = NextJob();
    Job* job = *q;
    const int64_t block = job->next_block++;
    if (job->next_block == job->blocks) queue.erase(q);
    const size_t s = free_slots->back();
    free_slots->pop_back();
    job->in_flight++;
    in_flight++;
    stats.requests++;
    lock.Unlock();
    Prepare(s, job, block);
    JoinLink(s, job->op);
    SetBusy(job->op, +1);
    batch->push_back(ToIoRequest(requests[s], s));
    lock.Lock();
  }
  return true;
}

bool OffloadEngine::Impl::GoRoundAgain(const std::vector<size_t>& free_slots) {
  detail::MutexLock lock(&mu);
  return (failed.ok() && !stopping && !queue.empty() && !free_slots.empty()) ||
         (stopping && in_flight == 0);
}

void OffloadEngine::Impl::OnCompletion(const IoCompletion& c, std::vector<IoRequest>* batch,
                                       std::vector<size_t>* free_slots) {
  const size_t s = static_cast<size_t>(c.user_data);
  Status error;
  bool failed_already;
  {
    detail::MutexLock lock(&mu);
    failed_already = !failed.ok();
  }
  if (Complete(s, c.result, &error) && !failed_already) {
    if (requests[s].resubmit_ns > 0) {
      backoff.push_back(s);  // -EAGAIN again: resubmitted after its backoff
      return;
    }
    batch->push_back(ToIoRequest(requests[s], s));
    detail::MutexLock lock(&mu);
    stats.requests++;
    return;
  }
  if (error.ok() && failed_already && requests[s].done < requests[s].len) {
    error = Status::IoError("cancelled after an earlier failure");
  }
  if (error.ok() && !failed_already && requests[s].on_link) {
    AdvanceLink(NowNs());
    if (requests[s].on_link) {
      held.push_back(s);  // the capped link has not moved these bytes yet
      return;
    }
  }
  FinishRequest(s, error, free_slots);
}

void OffloadEngine::Impl::ResubmitDue(std::vector<IoRequest>* batch,
                                      std::vector<size_t>* free_slots, int64_t* wait_ns) {
  if (backoff.empty()) return;
  bool failed_already;
  {
    detail::MutexLock lock(&mu);
    failed_already = !failed.ok();
  }
  const int64_t now = NowNs();
  int64_t next = -1;
  size_t kept = 0;
  for (size_t s : backoff) {
    if (failed_already) {
      FinishRequest(s, Status::IoError("cancelled after an earlier failure"), free_slots);
    } else if (requests[s].resubmit_ns <= now) {
      batch->push_back(ToIoRequest(requests[s], s));
      detail::MutexLock lock(&mu);
      stats.requests++;
    } else {
      backoff[kept++] = s;
      const int64_t left = requests[s].resubmit_ns - now;
      next = next < 0 ? left : std::min(next, left);
    }
  }
  backoff.resize(kept);
  if (next >= 0 && (*wait_ns < 0 || next < *wait_ns)) *wait_ns = next;
}

void OffloadEngine::Impl::FinishRequest(size_t s, const Status& error,
                                        std::vector<size_t>* free_slots) {
  LeaveLink(s);
  Request& r = requests[s];
  Job& job = *r.job;
  SetBusy(job.op, -1);
  detail::MutexLock lock(&mu);
  r.busy = false;
  free_slots->push_back(s);
  in_flight--;
  job.in_flight--;
  if (error.ok()) {
    job.blocks_done++;
    if (r.bounced) stats.bounce_copies++;
    if (job.op == IoOp::kWrite) {
      auto it = tensors.find(job.tensor);
      if (it != tensors.end()) it->second.crcs[static_cast<size_t>(r.block)] = r.crc;
      stats.bytes_written += r.payload;
      stats.bytes_written_per_dir[static_cast<size_t>(job.SegmentOf(r.block).dir)] += r.payload;
    }
  } else {
    if (job.status.ok()) job.status = error;
    RecordFailureLocked(error);
    // No more blocks of this job.
    auto q = std::find(queue.begin(), queue.end(), &job);
    if (q != queue.end()) queue.erase(q);
    job.next_block = job.blocks;
  }
  const bool all_submitted = job.next_block >= job.blocks;
  if (job.in_flight == 0 && all_submitted && !job.finished) {
    job.finished = true;
    if (job.status.ok()) {
      if (job.blocks_done != job.blocks) {
        job.status = Status::Internal("tensor " + std::to_string(job.tensor) +
                                      ": job finished with blocks missing");
      }
    }
    auto it = tensors.find(job.tensor);
    if (it != tensors.end()) {
      it->second.active_jobs--;
      if (job.op == IoOp::kWrite && job.status.ok()) it->second.written = true;
    }
    cv.NotifyAll();
  }
}

}  // namespace ssdtrain::exec

// OffloadEngine::Impl, jobs: WriteAsync/ReadAsync checked and queued for the I/O
// thread (a write reserves its extent, and its file, before anything else),
// Wait (with the read's CRC32C check) and Done.
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iterator>
#include <string>
#include <utility>

#include "exec/checksum.h"
#include "exec/detail/engine_impl.h"
#include "exec/detail/errno_text.h"
#include "exec/detail/round_up.h"
#include "exec/detail/test_points.h"
#include "traces/drives.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec {
namespace {

using detail::RoundUp;

}  // namespace

OffloadEngine::Impl::Segment OffloadEngine::Impl::SegmentFor(const File& f) const {
  const Dir& d = dirs[static_cast<size_t>(f.dir)];
  return Segment{f.fd, d.direct, f.dir, f.path, d.path};
}

Result<Ticket> OffloadEngine::Impl::Enqueue(const TensorKey& key, IoOp op, char* buf, int64_t bytes,
                                            bool device) {
  if (device && options.cufile == nullptr) {
    return Status::FailedPrecondition(
        "tensor " + std::to_string(key.tensor) +
        ": GPU memory needs GPUDirect Storage, and this engine has no cuFile (replay --gds on)");
  }
  if (buf == nullptr || bytes <= 0) {
    return Status::InvalidArgument("tensor " + std::to_string(key.tensor) +
                                   ": buffer must be non-null and bytes > 0, got " +
                                   std::to_string(bytes));
  }
  if (key.tensor < 0) {
    return Status::InvalidArgument("tensor id " + std::to_string(key.tensor) +
                                   " is negative; tensor ids are >= 0");
  }
  if (!key.file.empty()) SSDTRAIN_RETURN_IF_ERROR(CheckOffloadFileName(key.file));
  const int64_t blocks = (bytes + options.block_size - 1) / options.block_size;
  std::vector<uint32_t> crcs(static_cast<size_t>(blocks));
  if (op == IoOp::kWrite && !device) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t start = b * options.block_size;
      crcs[static_cast<size_t>(b)] =
          Crc32c(buf + start, static_cast<size_t>(std::min(options.block_size, bytes - start)));
    }
  }
  detail::MutexLock lock(&mu);
  if (!failed.ok()) return StoppedStatusLocked();
  if (stopping) return Status::FailedPrecondition("the offload engine is shutting down");
  auto job = std::make_unique<Job>();
  job->op = op;
  job->tensor = key.tensor;
  job->buf = buf;
  job->device = device;
  job->bytes = bytes;
  job->blocks = blocks;
  job->crcs = std::move(crcs);
  Tensor* t = nullptr;
  if (op == IoOp::kWrite) {
    if (key.offset < 0 || key.offset % kDirectIoAlign != 0) {
      return Status::InvalidArgument("tensor " + std::to_string(key.tensor) + ": file offset " +
                                     std::to_string(key.offset) +
                                     " is not a non-negative multiple of 4096");
    }
    if (tensors.count(key.tensor) != 0) {
      return Status::FailedPrecondition("tensor " + std::to_string(key.tensor) +
                                        " is already offloaded; Remove it before writing again");
    }
    // Stripe j of the tensor goes to directory (first + j) % n (traces/drives.h);
    // directory j of `ks` holds stripes j, j + ks, ..., padded, from key.offset.
    const int n = static_cast<int>(dirs.size());
    const int ks = static_cast<int>(std::min<int64_t>(n, blocks));
    const int first = FirstDir(key);
    const std::string name = key.file.empty() ? traces::OffloadFileName(key.tensor) : key.file;
    std::vector<int> dir_of(static_cast<size_t>(ks));
    std::vector<int64_t> end_of(static_cast<size_t>(ks));
    for (int j = 0; j < ks; ++j) {
      dir_of[static_cast<size_t>(j)] = (first + j) % n;
      end_of[static_cast<size_t>(j)] =
          key.offset +
          RoundUp(traces::StripedBytes(bytes, options.block_size, ks, 0, j), kDirectIoAlign);
    }
    // Every refusal comes before a file is created: a refused write leaves
    // no file and no open fd behind.
    for (int j = 0; j < ks; ++j) {
      auto existing = FileForLocked(name, dir_of[static_cast<size_t>(j)], /*create=*/false);
      if (existing.ok()) {
        const File& f = **existing;
        const int64_t end = end_of[static_cast<size_t>(j)];
        auto next = f.extents.lower_bound(key.offset);
        const bool overlaps_next = next != f.extents.end() && next->first < end;
        const bool overlaps_prev =
            next != f.extents.begin() && std::prev(next)->second > key.offset;
        if (overlaps_next || overlaps_prev) {
          return Status::InvalidArgument("tensor " + std::to_string(key.tensor) + " at [" +
                                         std::to_string(key.offset) + ", " + std::to_string(end) +
                                         ") overlaps another tensor in " + f.path);
        }
      } else if (existing.status().code() != Status::Code::kNotFound) {
        return existing.status();
      }
    }
    Tensor rec;
    rec.offset = key.offset;
    rec.bytes = bytes;
    rec.crcs.assign(static_cast<size_t>(job->blocks), 0);
    rec.checked = !device;
    std::vector<File*> made;
    for (int j = 0; j < ks; ++j) {
      auto f = FileForLocked(name, dir_of[static_cast<size_t>(j)], /*create=*/true);
      if (!f.ok()) return FailAndPurgeLocked(f.status());
      (*f)->extents[key.offset] = end_of[static_cast<size_t>(j)];
      rec.file_keys.push_back(std::to_string((*f)->dir) + "/" + (*f)->name);
      made.push_back(*f);
    }
    t = &tensors.emplace(key.tensor, std::move(rec)).first->second;
    for (File* f : made) job->segments.push_back(SegmentFor(*f));
    std::vector<std::pair<int, int64_t>> reserve;  // fd, bytes from key.offset
    for (int j = 0; j < ks; ++j) {
      const File& f = *made[static_cast<size_t>(j)];
      if (options.preallocate && end_of[static_cast<size_t>(j)] > f.reserved_end) {
        reserve.emplace_back(f.fd, end_of[static_cast<size_t>(j)] - key.offset);
      }
    }
    if (!reserve.empty()) {
      t->active_jobs++;   // keeps Remove away while unlocked
      ++unlocked_writes;  // keeps RemoveAll and the purge away (they would free t, close fds)
      lock.Unlock();
      detail::HitTestPoint(detail::TestPoint::kWriteUnlocked, key.tensor);
      int err = 0;
      size_t failed_at = 0;
      for (size_t i = 0; i < reserve.size() && err == 0; ++i) {
        const int injected = detail::HitTestPoint(detail::TestPoint::kFallocate, key.tensor);
        const int rc =
            injected > 0 ? -1 : ::fallocate(reserve[i].first, 0, key.offset, reserve[i].second);
        err = rc == 0 ? 0 : injected > 0 ? injected : errno;
        if (err == EOPNOTSUPP || err == ENOSYS) err = 0;
        failed_at = i;
      }
      lock.Lock();
      t->active_jobs--;
      --unlocked_writes;
      if (!failed.ok()) {
        // A failure came meanwhile; the purge waited for this write to let go.
        WaitForPurgeLocked();
        return StoppedStatusLocked();
      }
      if (err != 0) {
        const auto seg =
            std::find_if(job->segments.begin(), job->segments.end(),
                         [&](const Segment& g) { return g.fd == reserve[failed_at].first; });
        return FailAndPurgeLocked(IoErrorStatus(*job, *seg, err));
      }
    }
  } else {
    auto it = tensors.find(key.tensor);
    if (it == tensors.end()) {
      return Status::NotFound("tensor " + std::to_string(key.tensor) +
                              " was never offloaded (or was removed); nothing to read");
    }
    t = &it->second;
    if (!t->written) {
      return Status::FailedPrecondition("tensor " + std::to_string(key.tensor) +
                                        ": its write has not completed; Wait on it first");
    }
    if (t->bytes != bytes) {
      return Status::InvalidArgument("tensor " + std::to_string(key.tensor) + ": read of " +
                                     std::to_string(bytes) + " bytes but " +
                                     std::to_string(t->bytes) + " were written");
    }
    for (const std::string& fkey : t->file_keys)
      job->segments.push_back(SegmentFor(files.at(fkey)));
    job->crcs = t->crcs;
    // GPU memory cannot be checksummed here, nor a tensor that was written from it.
    job->verify = t->checked && !device;
  }
  job->file_offset = t->offset;
  t->active_jobs++;
  job->id = next_ticket++;
  Job* raw = job.get();
  jobs.emplace(job->id, std::move(job));
  queue.push_back(raw);
  const Ticket ticket{raw->id};
  lock.Unlock();
  cv.NotifyAll();  // RemoveAll may be waiting for this write to be queued
  backend->Notify();
  return ticket;
}

Status OffloadEngine::Impl::Wait(Ticket ticket) {
  detail::MutexLock lock(&mu);
  auto it = jobs.find(ticket.id);
  if (it == jobs.end()) {
    return Status::InvalidArgument("unknown ticket " + std::to_string(ticket.id) +
                                   " (already waited for?)");
  }
  Job* job = it->second.get();
  while (!job->finished) cv.Wait(&mu);
  if (job->status.ok() && job->op == IoOp::kRead) {
    lock.Unlock();
    Status check = job->verify ? VerifyRead(*job) : Status::Ok();
    lock.Lock();
    if (!check.ok()) {
      job->status = check;
      RecordFailureLocked(check);
      backend->Notify();
    } else {
      stats.bytes_read += job->bytes;
    }
  }
  // A failing job's files go away before its waiter hears of the failure.
  if (!job->status.ok()) {
    while (!purged) cv.Wait(&mu);
  }
  Status s = job->status;
  jobs.erase(it);
  return s;
}

Status OffloadEngine::Impl::VerifyRead(const Job& job) const {
  for (int64_t b = 0; b < job.blocks; ++b) {
    const int64_t start = b * options.block_size;
    const int64_t payload = std::min(options.block_size, job.bytes - start);
    const uint32_t want = job.crcs[static_cast<size_t>(b)];
    const uint32_t got = Crc32c(job.buf + start, static_cast<size_t>(payload));
    if (got != want) {
      char hex[64];
      std::snprintf(hex, sizeof(hex), "stored CRC32C %08x, read %08x", want, got);
      const int64_t at = job.OffsetOf(b, options.block_size);
      return Status::Corruption("checksum mismatch reading tensor " + std::to_string(job.tensor) +
                                " from " + job.SegmentOf(b).path + " at bytes [" +
                                std::to_string(at) + ", " + std::to_string(at + payload) + "): " +
                                hex + "; the file was modified or the disk returned bad data");
    }
  }
  return Status::Ok();
}

bool OffloadEngine::Impl::Done(Ticket ticket) const {
  detail::MutexLock lock(&mu);
  auto it = jobs.find(ticket.id);
  return it != jobs.end() && it->second->finished && (it->second->status.ok() || purged);
}

}  // namespace ssdtrain::exec

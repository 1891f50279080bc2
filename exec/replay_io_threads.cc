// Replayer: the I/O threads: D2H copies into SSD writes (submitter), writes landing
// (completer), reads into H2D copies (reader); the first failure stops them all.
// See exec/detail/replayer.h.
#include <cctype>
#include <deque>
#include <string>

#include "exec/detail/replayer.h"
#include "exec/detail/test_points.h"

namespace ssdtrain::exec::detail {
namespace {

// `status` with "<verb> tensor <s>" said first, unless its message names that
// tensor already (the engine's I/O errors do: "writing tensor 7 to ...").
Status ForTensor(const Status& status, const std::string& verb, TensorId s) {
  const std::string name = "tensor " + std::to_string(s);
  const std::string& text = status.message();
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const size_t end = at + name.size();
    if (end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]))) return status;
  }
  return status.WithPrefix(verb + " " + name);
}

}  // namespace

Replayer::~Replayer() {
  // Nothing enqueued may outlive the buffers. A destructor cannot report; a
  // failing stream has already failed the step that used it.
  (void)device_.SynchronizeAll();
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (std::thread* t : {&submitter_, &completer_, &reader_}) {
    if (t->joinable()) t->join();
  }
  for (Slot& slot : slots_) device_.Free(slot.buffer);
}

void Replayer::Fail(const Status& status) {
  {
    MutexLock lock(&mu_);
    if (error_.ok()) error_ = status;
  }
  staging_.Abort();
  cv_.NotifyAll();
}

Status Replayer::error() {
  MutexLock lock(&mu_);
  return error_;
}

// Waits for each D2H copy, then starts its write (unless forwarding dropped it).
void Replayer::SubmitLoop() {
  while (true) {
    WriteJob job;
    {
      MutexLock lock(&mu_);
      while (!stop_ && writes_.empty()) cv_.Wait(&mu_);
      if (writes_.empty()) return;
      job = writes_.front();
      writes_.pop_front();
    }
    Slot& sl = slot(job.storage);
    Status st = sl.d2h_end->Synchronize();
    if (Host(job.storage)) {
      // offload-host: the copy is the write; it stays in host memory. An
      // eviction joins the cache's list with the decision (tensor_cache.h).
      if (st.ok() && cache_.BeginWrite(job.storage) && cache_.OnWriteLanded(job.storage)) {
        detail::HitTestPoint(detail::TestPoint::kEvictionDecided, job.storage);
      }
      if (!st.ok())
        Fail(st.WithPrefix("copying tensor " + std::to_string(job.storage) + " to host memory"));
      {
        MutexLock lock(&mu_);
        --pending_writes_;
      }
      cv_.NotifyAll();
      continue;
    }
    bool started = false;
    if (st.ok() && cache_.BeginWrite(job.storage)) {
      sl.write_begin_ns = NowNs();
      auto ticket =
          Direct(job.storage)
              ? engine_.WriteDeviceAsync(KeyOf(job.storage), sl.buffer.ptr, life(job.storage).bytes)
              : engine_.WriteAsync(KeyOf(job.storage), sl.staging.data, life(job.storage).bytes);
      if (ticket.ok()) {
        started = true;
        job.ticket = ticket->id;
        MutexLock lock(&mu_);
        landing_.push_back(job);
      } else {
        st = ticket.status();
      }
    }
    if (started) {
      cv_.NotifyAll();
      continue;
    }
    staging_.Release(sl.staging);
    if (!st.ok()) Fail(st);
    {
      MutexLock lock(&mu_);
      --pending_writes_;
    }
    cv_.NotifyAll();
  }
}

// Waits for writes to land, in order; lands evictions.
void Replayer::CompleteLoop() {
  while (true) {
    WriteJob job;
    {
      MutexLock lock(&mu_);
      while (!stop_ && landing_.empty()) cv_.Wait(&mu_);
      if (landing_.empty()) return;
      job = landing_.front();
      landing_.pop_front();
    }
    Slot& sl = slot(job.storage);
    Status st = engine_.Wait(Ticket{job.ticket});
    sl.write_end_ns = NowNs();
    sl.wrote = true;
    staging_.Release(sl.staging);
    if (!st.ok()) Fail(ForTensor(st, "writing", job.storage));
    // An eviction joins the cache's list with the decision (tensor_cache.h).
    if (st.ok() && cache_.OnWriteLanded(job.storage)) {
      detail::HitTestPoint(detail::TestPoint::kEvictionDecided, job.storage);
    }
    {
      MutexLock lock(&mu_);
      --pending_writes_;
    }
    cv_.NotifyAll();
  }
}

// Waits for reads, copies them to the device, and releases their staging.
// GPUDirect reads are started here, every queued one before the oldest is
// waited for, each once compute is done with its memory (h2d_ready).
void Replayer::ReadLoop() {
  std::deque<WriteJob> started;
  while (true) {
    std::deque<WriteJob> fresh;
    {
      MutexLock lock(&mu_);
      while (!stop_ && reads_.empty() && started.empty()) cv_.Wait(&mu_);
      if (reads_.empty() && started.empty()) return;
      fresh.swap(reads_);
    }
    for (WriteJob& j : fresh) {
      if (Direct(j.storage)) {
        Slot& sl = slot(j.storage);
        j.started = sl.h2d_ready->Synchronize();
        if (j.started.ok()) {
          auto ticket =
              engine_.ReadDeviceAsync(KeyOf(j.storage), sl.buffer.ptr, life(j.storage).bytes);
          if (ticket.ok()) {
            j.ticket = ticket->id;
          } else {
            j.started = ticket.status();
          }
        }
      }
      started.push_back(std::move(j));
    }
    WriteJob job = std::move(started.front());
    started.pop_front();
    Slot& sl = slot(job.storage);
    const bool host = Host(job.storage);
    const bool direct = Direct(job.storage);
    Status st = host                ? Status::Ok()
                : !job.started.ok() ? job.started
                                    : engine_.Wait(Ticket{job.ticket});
    sl.read_end_ns = NowNs();
    if (st.ok()) st = device_.Wait(Stream::kHostToDevice, *sl.h2d_ready);
    if (st.ok()) st = device_.Record(*sl.h2d_start, Stream::kHostToDevice);
    if (st.ok() && !direct) {
      st = device_.CopyToDeviceAsync(sl.buffer, 0, sl.staging.data, life(job.storage).bytes,
                                     Stream::kHostToDevice);
    }
    if (st.ok()) st = device_.Record(*sl.h2d_end, Stream::kHostToDevice);
    if (st.ok()) st = sl.h2d_end->Synchronize();
    if (!host) staging_.Release(sl.staging);
    if (st.ok()) {
      cache_.OnReadLanded(job.storage);
      sl.copied_in = true;
    } else {
      st = ForTensor(st, "reading", job.storage);
      Fail(st);
    }
    {
      MutexLock lock(&mu_);
      sl.read_status = st;
      sl.read_done = true;
    }
    cv_.NotifyAll();
  }
}

}  // namespace ssdtrain::exec::detail

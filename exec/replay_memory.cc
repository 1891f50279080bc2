// Replayer: device memory as the replay holds it: allocation under the budget with
// backpressure, release, and the reads that bring storages back.
// See exec/detail/replayer.h.
#include <algorithm>
#include <string>

#include "exec/detail/format_bytes.h"
#include "exec/detail/replayer.h"

namespace ssdtrain::exec::detail {

void Replayer::Account(TensorId s, int64_t sign) {
  if (!life(s).activation()) return;
  // Counted as the device holds it (traces/storage_plan.h).
  activation_now_ += sign * traces::DeviceBytes(life(s).bytes, device_.allocation_alignment());
  activation_peak_ = std::max(activation_peak_, activation_now_);
}

void Replayer::Release(TensorId s) {
  Slot& sl = slot(s);
  if (!sl.resident) return;
  device_.Free(sl.buffer);
  sl.buffer = {};
  sl.resident = false;
  Account(s, -1);
}

void Replayer::DrainEvictions() {
  for (TensorId s : cache_.TakeEvictions()) Release(s);
}

// Allocates storage `s`, waiting for in-flight writes to land and evict when
// the device is full. Marks `stalled` when it had to wait.
Status Replayer::Materialize(TensorId s, const traces::Op& op, bool* stalled) {
  if (life(s).bytes <= 0) {  // an empty tensor needs no memory
    slot(s).resident = true;
    return Status::Ok();
  }
  while (true) {
    DrainEvictions();
    Result<DeviceBuffer> buffer = Status::ResourceExhausted("");
    const int64_t need = traces::DeviceBytes(life(s).bytes, device_.allocation_alignment());
    if (budget_bytes_ > 0 && device_.used_bytes() + need > budget_bytes_) {
      buffer = Status::ResourceExhausted("the plan's budget of " +
                                         detail::FormatBytes(budget_bytes_) + " holds " +
                                         detail::FormatBytes(device_.used_bytes()) + " already");
    } else {
      buffer = device_.Allocate(life(s).bytes);
    }
    if (buffer.ok()) {
      slot(s).buffer = *buffer;
      slot(s).resident = true;
      Account(s, +1);
      return Status::Ok();
    }
    if (buffer.status().code() != Status::Code::kResourceExhausted) return buffer.status();
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (pending_writes_ == 0 && !cache_.HasEvictions()) {
      return Status::ResourceExhausted(
          "device memory exhausted at op " + std::to_string(op.id) + " (" + op.name +
          ") allocating tensor " + std::to_string(s) + " (" + trace_.tensor(s).name +
          "): " + buffer.status().message() +
          (budget_bytes_ > 0 ? "; raise the plan's memory_budget_bytes or offload more"
                             : "; raise --device-memory or offload more"));
    }
    *stalled = true;
    while (!cache_.HasEvictions() && pending_writes_ != 0 && error_.ok()) cv_.Wait(&mu_);
  }
}

Status Replayer::IssueRead(TensorId s, const traces::Op& op, bool* stalled) {
  Slot& sl = slot(s);
  if (sl.read_issued) return Status::Ok();
  SSDTRAIN_RETURN_IF_ERROR(Materialize(s, op, stalled));
  for (auto* e : {&sl.h2d_ready, &sl.h2d_start, &sl.h2d_end}) {
    if (!*e) {
      SSDTRAIN_ASSIGN_OR_RETURN(*e, device_.CreateEvent());
    }
  }
  // The H2D copy may reuse memory compute has just freed: order it after.
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*sl.h2d_ready, Stream::kCompute));
  sl.read_begin_ns = NowNs();
  uint64_t ticket_id = 0;
  if (Host(s)) {
    sl.staging = HostCopy(s);  // the copy back reads it where it stayed
  } else if (Direct(s)) {
    // GPUDirect: the read goes into the device buffer itself, once h2d_ready
    // says compute is done with the memory: the read thread starts it.
  } else {
    SSDTRAIN_ASSIGN_OR_RETURN(sl.staging, staging_.Acquire(life(s).bytes, stalled));
    auto ticket = engine_.ReadAsync(KeyOf(s), sl.staging.data, life(s).bytes);
    if (!ticket.ok()) {
      staging_.Release(sl.staging);
      return ticket.status();
    }
    ticket_id = ticket->id;
  }
  sl.read_issued = true;
  {
    MutexLock lock(&mu_);
    reads_.push_back({s, ticket_id, Status::Ok()});
  }
  cv_.NotifyAll();
  return Status::Ok();
}

Status Replayer::AwaitRead(TensorId s) {
  Slot& sl = slot(s);
  MutexLock lock(&mu_);
  while (!sl.read_done && error_.ok()) cv_.Wait(&mu_);
  if (!error_.ok()) return error_;
  lock.Unlock();
  sl.read_consumed = true;
  SSDTRAIN_RETURN_IF_ERROR(sl.read_status);
  return device_.Wait(Stream::kCompute, *sl.h2d_end);
}

}  // namespace ssdtrain::exec::detail

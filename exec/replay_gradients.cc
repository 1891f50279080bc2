// Replayer: the data-parallel ranks' gradient all-reduce (exec/step_sync.h).
// See exec/detail/replayer.h.
#include <string>

#include "exec/detail/format_bytes.h"
#include "exec/detail/replayer.h"
#include "exec/detail/test_points.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec::detail {

Status Replayer::InitGradients() {
  if (agreement_.sync() == nullptr) return Status::Ok();
  int64_t bytes = 0;
  for (const traces::StorageInfo& info : plan_.storages) {
    if (info.persistent() && info.bytes > 0 &&
        traces::IsWeightGradient(trace_, trace_.tensor(info.root))) {
      gradients_.push_back(info.root);
      bytes += info.bytes;
    }
  }
  if (bytes == 0) return Status::Ok();
  auto host = HostStaging::Create(device_, bytes);
  if (!host.ok()) {
    return host.status().WithPrefix("host memory for the gradients' all-reduce (" +
                                    FormatBytes(bytes) + ")");
  }
  gradient_host_ = std::move(*host);
  return Status::Ok();
}

// Enqueues weight gradient `g`'s copy from `host` back to the device.
Status Replayer::CopyGradientBack(TensorId g, const uint8_t* host) {
  if (HitTestPoint(TestPoint::kGradientCopyBack, g) != 0) {
    return Status::Internal("copying " + trace_.tensor(g).name +
                            " back to the device after its all-reduce: injected by a test");
  }
  return device_.CopyToDeviceAsync(slot(g).buffer, 0, host, life(g).bytes);
}

// Copies every weight gradient to host memory, agrees with the other ranks
// that all got this far, sums them over the ranks and copies them back. The
// step's clock includes it; the timeline shows it on the network lane.
Status Replayer::AllReduceGradients() {
  allreduce_begin_ns_ = NowNs();
  auto* host = gradient_host_ ? static_cast<uint8_t*>(gradient_host_->base()) : nullptr;
  Status st = device_.Synchronize(Stream::kCompute);  // the backward has written them
  int64_t at = 0;
  for (TensorId g : gradients_) {
    if (!st.ok()) break;
    st = device_.CopyToHostAsync(host + at, slot(g).buffer, 0, life(g).bytes);
    at += life(g).bytes;
  }
  if (st.ok()) st = device_.Synchronize(Stream::kDeviceToHost);
  if (!st.ok()) st = st.WithPrefix("copying the gradients to host memory for the all-reduce");
  // Nothing fallible between an agreement that all are well and the
  // all-reduces: no rank waits in an all-reduce another rank will not join.
  SSDTRAIN_RETURN_IF_ERROR(agreement_.At(st));
  SSDTRAIN_RETURN_IF_ERROR(SumGradients(host));
  // Only now what may fail on one rank alone: the copies back. A failure
  // there reaches the others at the step's end agreement.
  at = 0;
  for (TensorId g : gradients_) {
    SSDTRAIN_RETURN_IF_ERROR(CopyGradientBack(g, host + at));
    at += life(g).bytes;
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kHostToDevice));
  allreduce_end_ns_ = NowNs();
  return Status::Ok();
}

// Every rank makes every all-reduce, also after one failed here, so that
// the ranks' collectives pair up; the first failure is the result.
Status Replayer::SumGradients(uint8_t* host) {
  Status first = Status::Ok();
  int64_t at = 0;
  for (TensorId g : gradients_) {
    const traces::DType dtype = trace_.tensor(g).dtype;
    const int64_t count = life(g).bytes / traces::DTypeSize(dtype);
    Status st = agreement_.sync()->AllReduceSum(host + at, count, dtype);
    if (first.ok() && !st.ok()) first = st.WithPrefix("all-reduce of " + trace_.tensor(g).name);
    at += life(g).bytes;
  }
  return first;
}

}  // namespace ssdtrain::exec::detail

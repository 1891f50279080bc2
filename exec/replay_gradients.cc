// Replayer: the data-parallel ranks' gradient all-reduce (exec/step_sync.h).
// See exec/detail/replayer.h.
#include <string>

#include "exec/detail/format_bytes.h"
#include "exec/detail/replayer.h"
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
  // all-reduce: no rank waits in an all-reduce another rank will not join.
  SSDTRAIN_RETURN_IF_ERROR(agreement_.At(st));
  at = 0;
  for (TensorId g : gradients_) {
    const traces::DType dtype = trace_.tensor(g).dtype;
    const int64_t count = life(g).bytes / traces::DTypeSize(dtype);
    SSDTRAIN_RETURN_IF_ERROR(agreement_.sync()
                                 ->AllReduceSum(host + at, count, dtype)
                                 .WithPrefix("all-reduce of " + trace_.tensor(g).name));
    SSDTRAIN_RETURN_IF_ERROR(
        device_.CopyToDeviceAsync(slot(g).buffer, 0, host + at, life(g).bytes));
    at += life(g).bytes;
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kHostToDevice));
  allreduce_end_ns_ = NowNs();
  return Status::Ok();
}

}  // namespace ssdtrain::exec::detail

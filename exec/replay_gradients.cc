// Replayer: the data-parallel ranks' gradient buckets (traces/dp_buckets.h),
// each all-reduced over the stage's ranks (exec/step_sync.h; the routed
// experts' only where their group is that, set_buckets) as soon as the
// last micro-batch's backward has produced it, or (the plan's ddp local) all
// of them once the step's backward has ended. See exec/detail/replayer.h.
#include <string>
#include <utility>
#include <vector>

#include "exec/detail/format_bytes.h"
#include "exec/detail/replayer.h"
#include "exec/detail/test_points.h"
#include "traces/storage_plan.h"

namespace ssdtrain::exec::detail {

// The expert-data-parallel group (traces/dp_buckets.h) is the dp group at
// ep 1, a group of its own between (StepSync's SumGroup), and no group at
// ep = dp: nothing to exchange.
Status Replayer::set_buckets(traces::BucketTable table, traces::DdpImpl ddp) {
  ddp_ = ddp;
  std::vector<traces::GradientBucket> kept;
  table.bytes = 0;
  for (traces::GradientBucket& b : table.buckets) {
    if (b.group == traces::BucketGroup::kExpertDataParallel && table.expert_dp == 1 &&
        table.dp > 1) {
      continue;
    }
    table.bytes += b.bytes;
    kept.push_back(std::move(b));
  }
  table.buckets = std::move(kept);
  buckets_ = std::move(table);
  return Status::Ok();
}

// One host buffer, the buckets back to back in their order, each bucket its
// gradients back to back (GradientBucket::offsets): one all-reduce per bucket
// over a contiguous range, as Megatron's grad buffer does on the device.
Status Replayer::InitGradients() {
  if (agreement_.sync() == nullptr || buckets_.buckets.empty()) return Status::Ok();
  buckets_after_.assign(trace_.ops.size(), {});
  int64_t bytes = 0;
  for (size_t b = 0; b < buckets_.buckets.size(); ++b) {
    const traces::GradientBucket& bucket = buckets_.buckets[b];
    for (TensorId g : bucket.gradients) {
      // Resident all step, or (set_to_none) from its first writer to the optimizer.
      const bool held =
          life(g).persistent() || life(g).role == traces::StorageRole::kWeightGradient;
      if (!held || life(g).bytes != trace_.tensor(g).bytes) {
        return Status::Internal("gradient bucket " + std::to_string(b) + ": " +
                                trace_.tensor(g).name + " is not a weight gradient's own storage");
      }
    }
    if (bucket.complete_after == traces::kNoOp) {
      return Status::Internal("gradient bucket " + std::to_string(b) + " has no backward op");
    }
    bucket_offset_.push_back(bytes);
    bytes += bucket.bytes;
    buckets_after_[static_cast<size_t>(bucket.complete_after)].push_back(b);
    SSDTRAIN_ASSIGN_OR_RETURN(auto copied, device_.CreateEvent());
    bucket_copied_.push_back(std::move(copied));
  }
  auto host = HostStaging::Create(device_, bytes);
  if (!host.ok()) {
    return host.status().WithPrefix("host memory for the gradients' all-reduce (" +
                                    FormatBytes(bytes) + ")");
  }
  gradient_host_ = std::move(*host);
  return Status::Ok();
}

uint8_t* Replayer::BucketHost(size_t b) {
  return static_cast<uint8_t*>(gradient_host_->base()) + bucket_offset_[b];
}

void Replayer::ResetBuckets() {
  buckets_copied_ = buckets_posted_ = buckets_done_ = 0;
  buckets_waited_ = buckets_.buckets.empty();
  bucket_runs_.assign(buckets_.buckets.size(), BucketRun{});
  allreduce_end_ns_ = exposed_begin_ns_ = 0;
}

// After `op` is issued: the buckets it completes go to host memory behind it
// on the device-to-host stream.
Status Replayer::CopyBucketsOut(const traces::Op& op) {
  if (buckets_after_.empty()) return Status::Ok();
  for (size_t b : buckets_after_[static_cast<size_t>(op.id)]) {
    SSDTRAIN_RETURN_IF_ERROR(
        device_.Wait(Stream::kDeviceToHost, *op_end_[static_cast<size_t>(op.id)]));
    const traces::GradientBucket& bucket = buckets_.buckets[b];
    for (size_t i = 0; i < bucket.gradients.size(); ++i) {
      const TensorId g = bucket.gradients[i];
      SSDTRAIN_RETURN_IF_ERROR(device_.CopyToHostAsync(BucketHost(b) + bucket.offsets[i],
                                                       slot(g).buffer, 0, life(g).bytes,
                                                       Stream::kDeviceToHost));
    }
    SSDTRAIN_RETURN_IF_ERROR(device_.Record(*bucket_copied_[b], Stream::kDeviceToHost));
    bucket_runs_[b].after_op = op.id;
    buckets_copied_ = b + 1;
  }
  return Status::Ok();
}

// Posts, in order, the buckets whose copies have landed (all of them, waiting
// for the copies, with `wait`), and lets the posted ones progress. Under local
// DDP only with `wait`, and only once every copy has landed (one stream: the
// last one), so that nothing goes before the backward has ended on the device.
Status Replayer::PostBuckets(bool wait) {
  if (buckets_waited_) return Status::Ok();
  if (traces::BucketsWaitForBackward(ddp_)) {
    if (!wait) return Status::Ok();
    if (buckets_posted_ < buckets_copied_) {
      SSDTRAIN_RETURN_IF_ERROR(bucket_copied_[buckets_copied_ - 1]->Synchronize().WithPrefix(
          "copying the gradients to host memory for the all-reduce"));
    }
  }
  while (buckets_posted_ < buckets_copied_) {
    Event& copied = *bucket_copied_[buckets_posted_];
    if (wait) {
      SSDTRAIN_RETURN_IF_ERROR(copied.Synchronize().WithPrefix(
          "copying the gradients to host memory for the all-reduce"));
    } else if (!copied.Query()) {
      break;
    }
    SSDTRAIN_RETURN_IF_ERROR(PostBucket(buckets_posted_));
    ++buckets_posted_;
  }
  if (buckets_posted_ == buckets_done_) return Status::Ok();
  int64_t completed = 0;
  SSDTRAIN_RETURN_IF_ERROR(agreement_.sync()->ProgressAllReduces(&completed));
  for (; buckets_done_ < static_cast<size_t>(completed); ++buckets_done_) {
    bucket_runs_[buckets_done_].done_ns = NowNs();
  }
  return Status::Ok();
}

Status Replayer::PostBucket(size_t b) {
  const traces::GradientBucket& bucket = buckets_.buckets[b];
  const int64_t now = NowNs();
  bucket_runs_[b].bytes = bucket.bytes;
  bucket_runs_[b].gradients = static_cast<int64_t>(bucket.gradients.size());
  bucket_runs_[b].posted_ns = now;
  // The routed experts' buckets over their own group where it is not the
  // dense one (ep > 1: set_buckets).
  const exec::SumGroup group =
      bucket.group == traces::BucketGroup::kExpertDataParallel && buckets_.expert_dp != buckets_.dp
          ? exec::SumGroup::kExpertDataParallel
          : exec::SumGroup::kDenseGradients;
  bucket_runs_[b].ranks = agreement_.sync()->SumGroupSize(group);
  Status st =
      agreement_.sync()->AllReduceSumAsync(BucketHost(b), bucket.elements(), bucket.dtype, group);
  return st.ok() ? st : st.WithPrefix("all-reduce of gradient bucket " + std::to_string(b));
}

// Enqueues weight gradient `g`'s copy from `host` back to the device.
Status Replayer::CopyGradientBack(TensorId g, const uint8_t* host) {
  if (HitTestPoint(TestPoint::kGradientCopyBack, g) != 0) {
    return Status::Internal("copying " + trace_.tensor(g).name +
                            " back to the device after its all-reduce: injected by a test");
  }
  return device_.CopyToDeviceAsync(slot(g).buffer, 0, host, life(g).bytes, Stream::kHostToDevice);
}

// Before the optimizer: the buckets not posted yet go now (the last ones wait
// for the end of backward), then every sum completes and the gradients go
// back to the device. The step's clock includes it; the timeline shows the
// buckets on the network lane.
Status Replayer::FinishGradients() {
  if (buckets_waited_) return Status::Ok();
  exposed_begin_ns_ = NowNs();
  SSDTRAIN_RETURN_IF_ERROR(PostBuckets(/*wait=*/true));
  if (buckets_posted_ != buckets_.buckets.size()) {
    return Status::Internal("gradient bucket " + std::to_string(buckets_posted_) +
                            " was never completed by its backward op");
  }
  buckets_waited_ = true;
  SSDTRAIN_RETURN_IF_ERROR(agreement_.sync()->WaitAllReduces());
  const int64_t summed = NowNs();
  for (; buckets_done_ < buckets_.buckets.size(); ++buckets_done_) {
    bucket_runs_[buckets_done_].done_ns = summed;
  }
  // Only now what may fail on one rank alone: the copies back. A failure
  // there reaches the others at the step's end agreement.
  for (size_t b = 0; b < buckets_.buckets.size(); ++b) {
    const traces::GradientBucket& bucket = buckets_.buckets[b];
    for (size_t i = 0; i < bucket.gradients.size(); ++i) {
      SSDTRAIN_RETURN_IF_ERROR(
          CopyGradientBack(bucket.gradients[i], BucketHost(b) + bucket.offsets[i]));
    }
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kHostToDevice));
  allreduce_end_ns_ = NowNs();
  return Status::Ok();
}

// A step that failed still makes every bucket's all-reduce (exec/step_sync.h):
// the other ranks are told first, the copies still in flight land, the
// buckets not posted go with whatever their bytes are, and all complete.
void Replayer::CompleteBucketsAfterFailure(const Status& failure) {
  if (buckets_waited_) return;
  buckets_waited_ = true;
  agreement_.Abort(failure);
  (void)device_.Synchronize(Stream::kDeviceToHost);
  for (; buckets_posted_ < buckets_.buckets.size(); ++buckets_posted_) {
    (void)PostBucket(buckets_posted_);
  }
  (void)agreement_.sync()->WaitAllReduces();
}

}  // namespace ssdtrain::exec::detail

// Replayer: the measured step: op and copy events into a timeline, exposed I/O, busy
// time per lane.
// See exec/detail/replayer.h.
#include <algorithm>
#include <utility>
#include <vector>

#include "exec/detail/replayer.h"

namespace ssdtrain::exec::detail {

Status Replayer::CollectTimeline(int64_t t0, StepRecord& record) {
  traces::Timeline& tl = record.timeline;
  std::vector<std::pair<int64_t, int64_t>> lanes[5];
  int64_t prev_end = -1;
  std::vector<int64_t> starts(issues_.size());
  for (size_t i = 0; i < issues_.size(); ++i) {
    const Issue& is = issues_[i];
    SSDTRAIN_ASSIGN_OR_RETURN(int64_t start, is.start->TimeNs());
    SSDTRAIN_ASSIGN_OR_RETURN(int64_t end, is.end->TimeNs());
    start -= t0;
    end -= t0;
    starts[i] = start;
    const traces::Op& op = trace_.op(is.op);
    if (is.beside) {  // the exchange, beside the compute stream's ops
      tl.spans.push_back(
          {traces::Lane::kNetwork, start, end, op.id, -1, op.micro_batch, op.stage, op.name});
      record.ops.push_back({op.id, start, end, is.io_dependent});
      continue;
    }
    if (is.io_dependent && prev_end >= 0 && start > prev_end) {
      record.exposed_io_ns += start - prev_end;
    }
    prev_end = std::max(prev_end, end);
    tl.spans.push_back({traces::Lane::kCompute, start, end, op.id, -1, op.micro_batch, op.stage,
                        (is.recompute ? "recompute " : "") + op.name});
    lanes[0].emplace_back(start, end);
    if (!is.recompute) record.ops.push_back({op.id, start, end, is.io_dependent});
  }
  for (const Sample& s : samples_) {
    tl.memory.push_back({starts[s.issue], s.device_bytes, s.activation_bytes});
  }
  for (size_t s = 0; s < slots_.size(); ++s) {
    Slot& sl = slots_[s];
    const std::string& name = trace_.tensors[s].name;
    const TensorId id = static_cast<TensorId>(s);
    if (sl.copied_out) {
      SSDTRAIN_ASSIGN_OR_RETURN(int64_t a, sl.d2h_start->TimeNs());
      SSDTRAIN_ASSIGN_OR_RETURN(int64_t b, sl.d2h_end->TimeNs());
      tl.spans.push_back(
          {traces::Lane::kDeviceToHost, a - t0, b - t0, traces::kNoOp, id, 0, 0, name});
      lanes[1].emplace_back(a - t0, b - t0);
    }
    if (sl.copied_in) {
      SSDTRAIN_ASSIGN_OR_RETURN(int64_t a, sl.h2d_start->TimeNs());
      SSDTRAIN_ASSIGN_OR_RETURN(int64_t b, sl.h2d_end->TimeNs());
      tl.spans.push_back(
          {traces::Lane::kHostToDevice, a - t0, b - t0, traces::kNoOp, id, 0, 0, name});
      lanes[2].emplace_back(a - t0, b - t0);
    }
    if (sl.wrote) {
      tl.spans.push_back({traces::Lane::kSsdWrite, sl.write_begin_ns - t0, sl.write_end_ns - t0,
                          traces::kNoOp, id, 0, 0, name});
      lanes[3].emplace_back(sl.write_begin_ns - t0, sl.write_end_ns - t0);
    }
    if (sl.read_done && sl.read_status.ok() && !Host(id)) {
      tl.spans.push_back({traces::Lane::kSsdRead, sl.read_begin_ns - t0, sl.read_end_ns - t0,
                          traces::kNoOp, id, 0, 0, name});
      lanes[4].emplace_back(sl.read_begin_ns - t0, sl.read_end_ns - t0);
    }
  }
  // Each bucket from its post to when it was first seen complete.
  for (const BucketRun& b : bucket_runs_) {
    BucketRun& run = record.buckets.emplace_back(b);
    run.posted_ns -= t0;
    run.done_ns -= t0;
    tl.spans.push_back({traces::Lane::kNetwork, run.posted_ns, run.done_ns, traces::kNoOp, -1, 0,
                        static_cast<int>(trace_.header.stage), "data-parallel all-reduce",
                        b.bytes});
  }
  record.busy = {traces::BusyTime(lanes[0]), traces::BusyTime(lanes[1]), traces::BusyTime(lanes[2]),
                 traces::BusyTime(lanes[3]), traces::BusyTime(lanes[4])};
  return Status::Ok();
}

}  // namespace ssdtrain::exec::detail

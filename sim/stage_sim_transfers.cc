// The stage simulator's offload transfers: a write's device-to-host copy and
// SSD write, a read's SSD read and host-to-device copy (GDS: straight to the
// device), as flows on the fluid network. See sim/detail/stage_simulator.h.
#include <memory>
#include <vector>

#include "sim/detail/stage_simulator.h"
#include "traces/drives.h"

namespace ssdtrain::sim::detail {

void StageSimulator::StartOffload(size_t sid) {
  Storage& s = storages_[sid];
  s.write = WriteState::kQueued;
  writes_started_.push_back(sid);
  const TensorId t = s.root;
  if (s.action == TensorAction::kOffloadSsd) io_bytes_unpaid_ += s.bytes;
  if (s.action == TensorAction::kOffloadSsd && hw_.storage.gds) {
    auto flow = std::make_shared<FluidNetwork::FlowId>(-1);
    *flow = net_.Start(Bytes{s.bytes}, {{d2h_, d2h_rate_}, {ssd_, ssd_write_rate_, kSsdWriteQueue}},
                       ssd_write_latency_, [this, sid, flow, t] {
                         Storage& st = storages_[sid];
                         const int64_t begin = net_.BeginTime(*flow).ns();
                         const std::string& name = trace_.tensor(t).name;
                         AddSpan(traces::Lane::kDeviceToHost, begin, Now(), traces::kNoOp, t, name);
                         AddSpan(traces::Lane::kSsdWrite, begin, Now(), traces::kNoOp, t, name);
                         CountSsdWrite(st);
                         st.write = WriteState::kLanded;
                         result_.write_landed_ns[st.root] = Now();
                         MaybeRelease(st);
                         TryIssue();  // an op may be waiting for this memory
                       });
    s.write_flow = *flow;
    return;
  }
  auto flow = std::make_shared<FluidNetwork::FlowId>(-1);
  *flow = net_.Start(Bytes{s.bytes}, {{d2h_, d2h_rate_}, {host_mem_, host_rate_}}, pcie_latency_,
                     [this, sid, flow, t] {
                       Storage& st = storages_[sid];
                       AddSpan(traces::Lane::kDeviceToHost, net_.BeginTime(*flow).ns(), Now(),
                               traces::kNoOp, t, trace_.tensor(t).name);
                       host_bytes_ += st.bytes;
                       Sample();
                       if (st.action == TensorAction::kOffloadHost) {
                         st.write = WriteState::kLanded;
                         result_.write_landed_ns[st.root] = Now();
                         result_.host_bytes_written += st.bytes;
                         MaybeRelease(st);
                         TryIssue();
                         return;
                       }
                       // Bounce: the pinned copy goes on to the SSD, unless forwarding drops it
                       // first.
                       st.write = WriteState::kStaged;
                       auto ssd_flow = std::make_shared<FluidNetwork::FlowId>(-1);
                       *ssd_flow = net_.Start(
                           Bytes{st.bytes},
                           {{host_mem_, host_rate_}, {ssd_, ssd_write_rate_, kSsdWriteQueue}},
                           ssd_write_latency_, [this, sid, ssd_flow, t] {
                             Storage& x = storages_[sid];
                             AddSpan(traces::Lane::kSsdWrite, net_.BeginTime(*ssd_flow).ns(), Now(),
                                     traces::kNoOp, t, trace_.tensor(t).name);
                             CountSsdWrite(x);
                             host_bytes_ -= x.bytes;
                             Sample();
                             x.write = WriteState::kLanded;
                             result_.write_landed_ns[x.root] = Now();
                             MaybeRelease(x);
                             TryIssue();
                           });
                       st.stage_flow = *ssd_flow;
                       MaybeRelease(st);
                     });
  s.write_flow = *flow;
}

void StageSimulator::CountSsdWrite(const Storage& s) {
  result_.ssd_bytes_written += s.bytes;
  const int drives = ArrayFor(hw_, options_.gpu).drives;
  if (drives < 2) return;
  std::vector<int64_t>& per = result_.ssd_bytes_written_per_drive;
  per.resize(static_cast<size_t>(drives), 0);
  const int64_t stripe = StripeBytesFor(plan_, hw_);
  for (int d = 0; d < drives; ++d) {
    per[static_cast<size_t>(d)] += traces::StripedBytes(s.bytes, stripe, drives, s.device, d);
  }
}

void StageSimulator::OnReadDone(size_t sid) {
  storages_[sid].read = ReadState::kDone;
  TryIssue();
}

void StageSimulator::StartRead(size_t sid, bool after_running_op) {
  Storage& s = storages_[sid];
  if (s.read == ReadState::kMoving || s.resident) return;
  s.read = ReadState::kMoving;
  // Host-resident data (offload-host, or a bounce copy still staged in pinned
  // memory) needs only the host-to-device copy.
  s.read_from_host = s.action == TensorAction::kOffloadHost || s.write == WriteState::kStaged;
  s.read_host_ready = s.read_from_host;
  s.read_start_ns = Now();
  if (s.read_from_host && s.action == TensorAction::kOffloadHost)
    result_.host_bytes_read += s.bytes;
  if (after_running_op) {
    // Fired by the run-ahead for a later op: the destination buffer and the
    // copy into it wait for the running op to end (ReleaseReadsAfterOp).
    s.read_waits_for_op = true;
    reads_after_op_.push_back(sid);
  } else {
    Allocate(s);  // the destination buffer
  }
  if (s.read_from_host) {
    MaybeStartHostToDevice(sid);
    return;
  }
  io_bytes_unpaid_ += s.bytes;  // an SSD read: its CPU cost (gpu.io_overhead_us_per_MiB)
  if (hw_.storage.gds) {
    if (!after_running_op) StartGdsRead(sid);
    return;
  }
  // SSD to pinned host memory now; the host-to-device copy follows.
  const int64_t bytes = s.bytes;
  const TensorId t = s.root;
  auto flow = std::make_shared<FluidNetwork::FlowId>(-1);
  *flow = net_.Start(Bytes{bytes}, {{ssd_, ssd_read_rate_, kSsdReadQueue}, {host_mem_, host_rate_}},
                     ssd_read_latency_, [this, sid, flow, bytes, t] {
                       result_.ssd_bytes_read += bytes;
                       Storage& st = storages_[sid];
                       st.read_start_ns = net_.BeginTime(*flow).ns();
                       st.read_host_ready = true;
                       AddSpan(traces::Lane::kSsdRead, st.read_start_ns, Now(), traces::kNoOp, t,
                               trace_.tensor(t).name);
                       MaybeStartHostToDevice(sid);
                     });
}

void StageSimulator::StartGdsRead(size_t sid) {
  const int64_t bytes = storages_[sid].bytes;
  const TensorId t = storages_[sid].root;
  auto flow = std::make_shared<FluidNetwork::FlowId>(-1);
  *flow = net_.Start(
      Bytes{bytes}, {{ssd_, ssd_read_rate_, kSsdReadQueue}, {h2d_, h2d_rate_}}, ssd_read_latency_,
      [this, sid, flow, bytes, t] {
        result_.ssd_bytes_read += bytes;
        const int64_t begin = net_.BeginTime(*flow).ns();
        AddSpan(traces::Lane::kHostToDevice, begin, Now(), traces::kNoOp, t, trace_.tensor(t).name);
        AddSpan(traces::Lane::kSsdRead, begin, Now(), traces::kNoOp, t, trace_.tensor(t).name);
        OnReadDone(sid);
      });
}

void StageSimulator::MaybeStartHostToDevice(size_t sid) {
  Storage& s = storages_[sid];
  if (!s.read_host_ready || s.read_waits_for_op) return;
  const int64_t bytes = s.bytes;
  const TensorId t = s.root;
  auto flow = std::make_shared<FluidNetwork::FlowId>(-1);
  *flow = net_.Start(Bytes{bytes}, {{h2d_, h2d_rate_}, {host_mem_, host_rate_}}, pcie_latency_,
                     [this, sid, flow, t] {
                       AddSpan(traces::Lane::kHostToDevice, net_.BeginTime(*flow).ns(), Now(),
                               traces::kNoOp, t, trace_.tensor(t).name);
                       OnReadDone(sid);
                     });
}

void StageSimulator::ReleaseReadsAfterOp() {
  if (reads_after_op_.empty()) return;  // the usual case: this runs after every op
  std::vector<size_t> reads;
  reads.swap(reads_after_op_);
  for (size_t sid : reads) {
    Storage& s = storages_[sid];
    s.read_waits_for_op = false;
    Allocate(s);
    if (hw_.storage.gds && !s.read_from_host) {
      StartGdsRead(sid);
    } else {
      MaybeStartHostToDevice(sid);
    }
  }
}

}  // namespace ssdtrain::sim::detail

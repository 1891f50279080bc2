// Replayer: pipeline stages on separate ranks (exec/step_sync.h). A send op
// copies its input to its place in pinned host memory once the op that
// produced it has run, appends a trailer (CRC32C of the payload, the
// verification seed) and posts the message; a recv op blocks for the next
// message from its neighbour, checks that it is the one expected (micro-batch,
// activation or gradient, index, size, CRC32C) and copies it into its output
// before any later op runs. See exec/detail/replayer.h.
// What they wait for: a send's copy out goes on the send stream and waits
// (an event) for the send op, so for its input's producer, never behind the
// offload copies queued on the device-to-host stream; the issue thread waits
// for that copy alone, then posts the message. A recv's copy in goes on the
// receive stream after the compute work issued before it (whose memory its
// output may reuse) and before the ops after it (events), not behind the
// prefetches on the host-to-device stream; the issue thread does not wait for
// it. As the simulator's pipeline (sim/pipeline.h): a send leaves when its
// micro-batch's pass ends, and the next pass starts when its input arrived
// and the stage is free. exec/README.md says more.
#include <cstring>
#include <map>
#include <string>
#include <tuple>

#include "exec/checksum.h"
#include "exec/detail/format_bytes.h"
#include "exec/detail/rank_message.h"
#include "exec/detail/replayer.h"

namespace ssdtrain::exec::detail {
namespace {

constexpr int64_t kMessageAlignment = 64;  // each message on its own cache lines

}  // namespace

// Interleaved: the chunk whose message a recv of chunk `chunk` takes. Chunk c
// of stage s is virtual stage c·p + s (traces/chunks.h): an activation comes
// from virtual stage c·p + s − 1, a gradient from c·p + s + 1.
int64_t Replayer::SendingChunk(int64_t chunk, bool gradient) const {
  const int64_t p = trace_.header.pp, from = chunk * p + trace_.header.stage + (gradient ? 1 : -1);
  return from / p;
}

Status Replayer::InitPipeline() {
  received_seed_.assign(trace_.tensors.size(), std::nullopt);
  transfers_.assign(trace_.ops.size(), Transfer{});
  if (!pipelined()) return Status::Ok();
  // The index of each send (recv) among its micro-batch's pass (of its chunk).
  std::map<std::tuple<int64_t, bool, bool, int64_t>, int64_t> count;
  int64_t at = 0;
  for (const traces::Op& op : trace_.ops) {
    if (!Transfers(op)) continue;
    const bool send = op.kind == traces::OpKind::kSend;
    const std::vector<TensorId>& tensors = send ? op.inputs : op.outputs;
    if (tensors.size() != 1) {
      return Status::InvalidArgument(
          RankOpName(op) + ": a pipeline " + std::string(send ? "send" : "recv") +
          " op moves one tensor, this one lists " + std::to_string(tensors.size()));
    }
    const bool gradient = op.phase == traces::Phase::kBackward;
    // Activations go forward (to the next stage), gradients back.
    const int peer = (send != gradient) ? next_rank_ : previous_rank_;
    if (peer < 0) {
      return Status::InvalidArgument(RankOpName(op) + ": stage " +
                                     std::to_string(trace_.header.stage) + " of " +
                                     std::to_string(trace_.header.pp) + " has no " +
                                     (send != gradient ? "next" : "previous") + " stage");
    }
    Transfer& x = transfers_[static_cast<size_t>(op.id)];
    x.tag.micro_batch = op.micro_batch;
    x.tag.gradient = gradient;
    const int64_t chunk = chunk_.empty() ? -1 : chunk_[static_cast<size_t>(op.id)];
    x.tag.index = count[{op.micro_batch, gradient, send, chunk}]++;
    x.tag.chunk = chunk < 0 || send ? chunk : SendingChunk(chunk, gradient);
    x.bytes = trace_.tensor(tensors[0]).bytes;
    x.offset = at;
    at += (x.bytes + static_cast<int64_t>(sizeof(MessageTrailer)) + kMessageAlignment - 1) /
          kMessageAlignment * kMessageAlignment;
  }
  if (at == 0) return Status::Ok();
  for (auto* e : {&compute_before_receive_, &received_}) {
    SSDTRAIN_ASSIGN_OR_RETURN(*e, device_.CreateEvent());
  }
  auto host = HostStaging::Create(device_, at);
  if (!host.ok()) {
    return host.status().WithPrefix("host memory for the pipeline's messages (" + FormatBytes(at) +
                                    ")");
  }
  pipeline_host_ = std::move(*host);
  return Status::Ok();
}

Status Replayer::SendFor(const traces::Op& op, const DeviceBuffer& input) {
  const Transfer& x = transfers_[static_cast<size_t>(op.id)];
  uint8_t* host = static_cast<uint8_t*>(pipeline_host_->base()) + x.offset;
  // After the op (and so the input's producer) has run on the compute stream.
  SSDTRAIN_RETURN_IF_ERROR(device_.Wait(Stream::kSend, *op_end_[static_cast<size_t>(op.id)]));
  SSDTRAIN_RETURN_IF_ERROR(device_.CopyToHostAsync(host, input, 0, x.bytes, Stream::kSend));
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kSend));
  MessageTrailer t;
  t.crc = Crc32c(host, static_cast<size_t>(x.bytes));
  t.seed = SeedOf(trace_.StorageOf(op.inputs[0]));
  std::memcpy(host + x.bytes, &t, sizeof(t));
  const int to = x.tag.gradient ? previous_rank_ : next_rank_;
  Status st = agreement_.sync()->SendAsync(to, x.tag, host,
                                           x.bytes + static_cast<int64_t>(sizeof(MessageTrailer)));
  if (!st.ok()) return st.WithPrefix(RankOpName(op) + ": sending " + x.tag.Describe());
  ++traffic_.messages_sent;
  traffic_.bytes_sent += x.bytes;
  return Status::Ok();
}

Status Replayer::ReceiveFor(const traces::Op& op, const DeviceBuffer& output) {
  const Transfer& x = transfers_[static_cast<size_t>(op.id)];
  uint8_t* host = static_cast<uint8_t*>(pipeline_host_->base()) + x.offset;
  const int from = x.tag.gradient ? next_rank_ : previous_rank_;
  const int64_t expected = x.bytes + static_cast<int64_t>(sizeof(MessageTrailer));
  PipelineTag got;
  int64_t bytes = 0;
  Status st = agreement_.sync()->Receive(from, host, expected, &got, &bytes);
  if (st.code() == Status::Code::kUnavailable) {
    agreement_.PeerFailed(st);
    return st;
  }
  if (!st.ok()) return st.WithPrefix(RankOpName(op) + ": receiving " + x.tag.Describe());
  if (!(got == x.tag) || bytes != expected) {
    return Status::FailedPrecondition(
        RankOpName(op) + ": expected " + x.tag.Describe() + " (" + std::to_string(x.bytes) +
        " bytes) from rank " + std::to_string(from) + ", but its next message is " +
        got.Describe() + " (" +
        std::to_string(bytes - static_cast<int64_t>(sizeof(MessageTrailer))) +
        " bytes): the stages' orders disagree");
  }
  MessageTrailer t;
  std::memcpy(&t, host + x.bytes, sizeof(t));
  const uint32_t crc = Crc32c(host, static_cast<size_t>(x.bytes));
  if (crc != t.crc) {
    return Status::Corruption(RankOpName(op) + ": " + x.tag.Describe() + " from rank " +
                              std::to_string(from) + " arrived with CRC32C " + std::to_string(crc) +
                              ", sent with " + std::to_string(t.crc));
  }
  const TensorId s = trace_.StorageOf(op.outputs[0]);
  received_seed_[static_cast<size_t>(s)] = t.seed;
  SSDTRAIN_RETURN_IF_ERROR(CopyInReceived(output, host, x.bytes));
  if (options_.verify) {
    // The sender filled it with its pattern: the bytes arrived as sent.
    Status ok = device_.CheckPattern(output, t.seed, Stream::kReceive);
    if (!ok.ok()) return ok.WithPrefix("verify: " + RankOpName(op) + ": " + x.tag.Describe());
  }
  ++traffic_.messages_received;
  traffic_.bytes_received += x.bytes;
  return Status::Ok();
}

Status Replayer::RestoreReceived(TensorId s, const traces::Op& recv) {
  const Transfer& x = transfers_[static_cast<size_t>(recv.id)];
  const uint8_t* host = static_cast<const uint8_t*>(pipeline_host_->base()) + x.offset;
  return CopyInReceived(slot(s).buffer, host, x.bytes);
}

Status Replayer::CopyInReceived(const DeviceBuffer& dst, const uint8_t* host, int64_t bytes) {
  // The host bytes stay until the step ends (each message has its own place),
  // and the step's end waits for compute, which waits for this copy.
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*compute_before_receive_, Stream::kCompute));
  SSDTRAIN_RETURN_IF_ERROR(device_.Wait(Stream::kReceive, *compute_before_receive_));
  SSDTRAIN_RETURN_IF_ERROR(device_.CopyToDeviceAsync(dst, 0, host, bytes, Stream::kReceive));
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*received_, Stream::kReceive));
  return device_.Wait(Stream::kCompute, *received_);
}

Status Replayer::WaitSends() {
  if (!pipelined()) return Status::Ok();
  Status st = agreement_.sync()->WaitSends();
  if (st.code() == Status::Code::kUnavailable) agreement_.PeerFailed(st);
  return st;
}

}  // namespace ssdtrain::exec::detail

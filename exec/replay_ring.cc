// Replayer: context parallelism's ring steps between the cp ranks
// (models/detail/ring_attention.h; traces/collective_kind.h, kSendRecv). A
// ...cp_ring op sends this rank's buffer to the next rank of its cp group and
// receives the previous one's, for real, with the payload the simulator
// prices (traces::CollectivePayloadBytes: the larger of its inputs and its
// outputs). Its inputs, back to back, are what it sends; where the trace's
// message is larger than they are (a backward step carries K/V and the dK/dV
// accumulated so far, while the trace names only the local K/V as its input,
// exec's recompute then re-running each exchange once), the rest is zeros.
// What arrives fills its outputs, back to back. The message carries the
// trailer every collective piece does (CRC32C, the sender's seed), checked
// on arrival; under --verify what arrives must be the previous rank's inputs'
// patterns (as it seeds them: RankGroups::PeerSeed, which differs by expert index at
// ep > 1) followed by the zeros,
// and the outputs then get their own patterns, as any op's do. Every rank
// sends before it receives: a ring of blocking receives after asynchronous
// sends cannot wait on itself. On the message streams, as the other
// collectives (exec/replay_tensor_parallel.cc).
#include <cstring>
#include <string>
#include <vector>

#include "exec/checksum.h"
#include "exec/detail/rank_message.h"
#include "exec/detail/replayer.h"

namespace ssdtrain::exec::detail {

Status Replayer::RingStepFor(const traces::Op& op, const std::vector<DeviceBuffer>& inputs,
                             const std::vector<DeviceBuffer>& outputs) {
  const auto n = static_cast<int64_t>(groups_.Of(op).ranks.size());
  const int64_t me = groups_.Of(op).index;
  const int64_t next = (me + 1) % n, previous = (me + n - 1) % n;
  const int64_t payload = traces::CollectivePayloadBytes(op);
  uint8_t* in = static_cast<uint8_t*>(collective_host_->base());
  uint8_t* out = in + payload;
  scratch_ = out + payload;
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kCompute));
  const int64_t started = NowNs();
  int64_t at = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t bytes = trace_.tensor(op.inputs[k]).bytes;
    SSDTRAIN_RETURN_IF_ERROR(device_.CopyToHostAsync(in + at, inputs[k], 0, bytes, Stream::kSend));
    at += bytes;
  }
  const int64_t sent_bytes = at;
  if (sent_bytes > payload) {
    return Status::Internal(RankOpName(op) + ": its inputs exceed its payload");
  }
  std::memset(in + sent_bytes, 0, static_cast<size_t>(payload - sent_bytes));
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kSend));
  // Under --verify: what the inputs hold, each from its storage's pattern
  // (an activation; a persistent or weight-gradient input holds sums).
  std::vector<uint8_t> want;
  bool check = options_.verify;
  for (TensorId t : op.inputs) {
    const TensorId s = trace_.StorageOf(t);
    check = check && !life(s).persistent() && life(s).role != traces::StorageRole::kWeightGradient;
  }
  const uint64_t seed = SeedOf(trace_.StorageOf(op.inputs[0]));
  // The inputs' patterns as member `member` of the cp group seeds them (this
  // rank: -1), then zeros.
  auto patterns = [&](int64_t member) {
    want.assign(static_cast<size_t>(payload), 0);
    int64_t offset = 0;
    for (TensorId t : op.inputs) {
      const int64_t bytes = trace_.tensor(t).bytes;
      const uint64_t mine = SeedOf(trace_.StorageOf(t));
      FillPattern(want.data() + offset, bytes,
                  member < 0 ? mine : groups_.PeerSeed(op, mine, member), 0);
      offset += bytes;
    }
  };
  if (check) {
    patterns(-1);
    if (std::memcmp(want.data(), in, static_cast<size_t>(payload)) != 0) {
      return Status::Corruption("verify: " + RankOpName(op) +
                                ": its inputs differ from their patterns before the send");
    }
  }
  SSDTRAIN_RETURN_IF_ERROR(SendPiece(op, 0, next, in, payload, seed));
  uint64_t theirs = 0;
  SSDTRAIN_RETURN_IF_ERROR(ReceivePiece(op, 0, previous, out, payload, &theirs));
  if (check) {
    const std::string what = "verify: " + RankOpName(op) + ": the ring's message from rank " +
                             std::to_string(groups_.Of(op).ranks[static_cast<size_t>(previous)]);
    if (theirs != groups_.PeerSeed(op, seed, previous)) {
      return Status::Corruption(what + " has seed " + std::to_string(theirs) + ", expected " +
                                std::to_string(groups_.PeerSeed(op, seed, previous)));
    }
    patterns(previous);
    if (std::memcmp(want.data(), out, static_cast<size_t>(payload)) != 0) {
      return Status::Corruption(what + " is not its K/V's patterns");
    }
  }
  at = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const int64_t bytes = trace_.tensor(op.outputs[k]).bytes;
    if (at + bytes > payload)
      return Status::Internal(RankOpName(op) + ": outputs past its payload");
    SSDTRAIN_RETURN_IF_ERROR(
        device_.CopyToDeviceAsync(outputs[k], 0, out + at, bytes, Stream::kReceive));
    at += bytes;
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kReceive));
  CollectiveTraffic::Time& time =
      collectives_.by_kind[static_cast<size_t>(traces::CollectiveKind::kSendRecv)];
  ++time.count;
  time.ns += NowNs() - started;
  return Status::Ok();
}

}  // namespace ssdtrain::exec::detail

// Replayer: the tensor-parallel ranks' collectives (exec/step_sync.h), and
// ZeRO-2/3's over the shard group. A kCollective op of the trace
// (traces/collective_kind.h: all-reduce, or all-gather and reduce-scatter
// under sequence parallelism; ZeRO's gathers and reduce-scatters, a list of
// (input, output) pairs, one after another) runs for real between the ranks
// of its group (RankGroups::Of), with the trace's bytes: its input is
// copied to pinned host memory once the ops before it have run, exchanged
// with the group's other ranks as point-to-point messages (each piece
// followed by a trailer: CRC32C of the payload, the sender's verification
// seed; checked on arrival), reduced on the host in rank order (so that every
// rank gets the same bits) and copied into the op's output.
//   all-gather      each rank sends its shard to every other; the full tensor
//                   is the shards in rank order (the sequence dimension is
//                   the outermost; a ZeRO shard is the full tensor's elements
//                   over n rounded up, FSDP's padding, the last cut short)
//   reduce-scatter  rank j receives chunk j of every rank's full input and
//                   sums them: its shard
//   all-reduce      a reduce-scatter, then an all-gather of the summed chunks
//                   (each rank moves 2·(n−1)/n of the tensor, as the ring of
//                   sim/collective.h does, in n−1 messages a phase)
// Under --verify every rank's input holds its own pattern (the seeds differ
// by tensor-parallel index: SeedOf), so what arrives is known: each received
// contribution must be its sender's pattern, and each summed chunk the sum of
// the group's patterns, computed here by the same SumInto in the same order.
// The output then gets its own pattern, as any op's does. A recompute of a
// collective exchanges again (every rank of the group runs the same plan).
// What it waits for, as a pipeline send does (exec/replay_pipeline.cc): its
// copy out goes on the send stream and its copy in on the receive stream
// (Stream::kSend, kReceive; exec/README.md, "Messages and the streams"), so it
// waits for no offload copy, as the simulator assumes. See exec/detail/replayer.h.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "exec/checksum.h"
#include "exec/detail/format_bytes.h"
#include "exec/detail/rank_message.h"
#include "exec/detail/replayer.h"
#include "exec/detail/test_points.h"
#include "exec/host_sum.h"

namespace ssdtrain::exec::detail {
namespace {

constexpr int64_t kTrailerBytes = sizeof(MessageTrailer);

}  // namespace

Status Replayer::InitTensorParallel() {
  int64_t most = 0;
  for (const traces::Op& op : trace_.ops) {
    if (!groups_.Exchanges(op)) continue;
    const auto n = static_cast<int64_t>(groups_.Of(op).ranks.size());
    const traces::CollectiveKind kind = Kind(op);
    if (kind == traces::CollectiveKind::kAllToAll) {
      SSDTRAIN_ASSIGN_OR_RETURN(const int64_t bytes, AllToAllHostBytes(op));
      most = std::max(most, bytes);
      continue;
    }
    if (kind == traces::CollectiveKind::kSendRecv) {
      // What is sent, what arrives, and the message (exec/replay_ring.cc).
      const int64_t payload = traces::CollectivePayloadBytes(op);
      most = std::max(most, 3 * payload + kTrailerBytes);
      continue;
    }
    const traces::CollectiveGroup over = traces::GroupOfCollective(op);
    const bool listed =
        over == traces::CollectiveGroup::kShard || over == traces::CollectiveGroup::kExpertShard;
    if (op.inputs.size() != op.outputs.size() || op.inputs.empty() ||
        (!listed && op.inputs.size() != 1)) {
      return Status::InvalidArgument(RankOpName(op) + ": a collective op reads " +
                                     (listed ? "as many tensors as it writes" : "one tensor") +
                                     " and writes " + (listed ? "them" : "one") +
                                     ", this one lists " + std::to_string(op.inputs.size()) +
                                     " and " + std::to_string(op.outputs.size()));
    }
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const traces::Tensor& in = trace_.tensor(op.inputs[k]);
      const traces::Tensor& out = trace_.tensor(op.outputs[k]);
      const int64_t full = std::max(in.bytes, out.bytes);
      const int64_t shard = std::min(in.bytes, out.bytes);
      const int64_t element = traces::DTypeSize(in.dtype);
      const bool sharded = in.bytes != out.bytes;
      // A shard is the full tensor's elements over n, rounded up (ZeRO pads
      // the last, FSDP's flat shards; sequence parallelism's divide).
      const int64_t elements = full / element;
      if (in.dtype != out.dtype || full % element != 0 ||
          (sharded && shard != (elements + n - 1) / n * element)) {
        return Status::InvalidArgument(
            RankOpName(op) + ": a collective over " + std::to_string(n) + " ranks of " +
            std::to_string(in.bytes) + " bytes in, " + std::to_string(out.bytes) + " bytes out (" +
            in.name +
            "): expected one dtype, whole elements and, for a gather "
            "or scatter, the shard the full tensor's elements over n, rounded up");
      }
      // The input, the output, and one received piece per rank (a piece is
      // at most the shard or one chunk of the full tensor, plus its trailer).
      const int64_t piece = sharded ? shard : (elements + n - 1) / n * element;
      most = std::max(most, in.bytes + out.bytes + n * (piece + kTrailerBytes));
    }
  }
  if (most == 0) return Status::Ok();
  auto host = HostStaging::Create(device_, most);
  if (!host.ok()) {
    return host.status().WithPrefix("host memory for the collectives (" + FormatBytes(most) + ")");
  }
  collective_host_ = std::move(*host);
  return Status::Ok();
}

Status Replayer::SendPiece(const traces::Op& op, int phase, int64_t to, const uint8_t* data,
                           int64_t bytes, uint64_t seed) {
  uint8_t* message = scratch_;
  std::memcpy(message, data, static_cast<size_t>(bytes));
  // Tests: a byte flipped before its checksum (a wrong contribution) or after
  // it (a payload corrupted on the wire).
  const int flip = bytes > 0 ? HitTestPoint(TestPoint::kCollectiveSend, op.id) : 0;
  if (flip == kFlipBeforeChecksum) message[0] ^= 0xff;
  MessageTrailer t;
  t.crc = Crc32c(message, static_cast<size_t>(bytes));
  t.seed = seed;
  std::memcpy(message + bytes, &t, sizeof(t));
  if (flip == kFlipAfterChecksum) message[0] ^= 0xff;
  const int rank = groups_.Of(op).ranks[static_cast<size_t>(to)];
  Status st =
      agreement_.sync()->SendAsync(rank, PieceTag(op, phase), message, bytes + kTrailerBytes);
  if (!st.ok()) {
    return st.WithPrefix(RankOpName(op) + ": sending its " +
                         std::string(traces::ToString(Kind(op))) + " piece to rank " +
                         std::to_string(rank));
  }
  ++collectives_.pieces_sent;
  collectives_.bytes_sent += bytes;
  return Status::Ok();
}

Status Replayer::ReceivePiece(const traces::Op& op, int phase, int64_t from, uint8_t* into,
                              int64_t bytes, uint64_t* seed) {
  const int rank = groups_.Of(op).ranks[static_cast<size_t>(from)];
  uint8_t* message = scratch_;
  PipelineTag got;
  int64_t received = 0;
  const PipelineTag expected = PieceTag(op, phase);
  Status st = agreement_.sync()->Receive(rank, message, bytes + kTrailerBytes, &got, &received);
  if (st.code() == Status::Code::kUnavailable) {
    agreement_.PeerFailed(st);
    return st;
  }
  const std::string what = RankOpName(op) + ": the " + std::string(traces::ToString(Kind(op))) +
                           " piece from rank " + std::to_string(rank);
  if (!st.ok()) return st.WithPrefix(what);
  if (!(got == expected) || received != bytes + kTrailerBytes) {
    return Status::FailedPrecondition(
        what + ": expected " + expected.Describe() + " (" + std::to_string(bytes) +
        " bytes), but its next message is " + got.Describe() + " (" +
        std::to_string(received - kTrailerBytes) + " bytes): the group's orders disagree");
  }
  MessageTrailer t;
  std::memcpy(&t, message + bytes, sizeof(t));
  const uint32_t crc = Crc32c(message, static_cast<size_t>(bytes));
  if (crc != t.crc) {
    return Status::Corruption(what + " arrived with CRC32C " + std::to_string(crc) +
                              ", sent with " + std::to_string(t.crc));
  }
  std::memcpy(into, message, static_cast<size_t>(bytes));
  *seed = t.seed;
  ++collectives_.pieces_received;
  collectives_.bytes_received += bytes;
  return Status::Ok();
}

// `what` received from peer `from` under --verify: the pattern of the seed
// that rank's input has (`expected_seed`) from byte `offset` of it.
Status Replayer::CheckContribution(const traces::Op& op, int64_t from, const uint8_t* p,
                                   int64_t bytes, uint64_t seed, uint64_t expected_seed,
                                   int64_t offset) {
  const std::string what = "verify: " + RankOpName(op) + ": the contribution of rank " +
                           std::to_string(groups_.Of(op).ranks[static_cast<size_t>(from)]);
  if (seed != expected_seed) {
    return Status::Corruption(what + " has seed " + std::to_string(seed) + ", expected " +
                              std::to_string(expected_seed));
  }
  const int64_t bad = PatternMismatch(p, bytes, seed, offset);
  if (bad < 0) return Status::Ok();
  return Status::Corruption(what + " differs from its pattern at byte " +
                            std::to_string(offset + bad));
}

// The sum of every rank's pattern over bytes [offset, offset + bytes) of the
// full tensor, in rank order, as the chunk's owner sums the contributions.
std::vector<uint8_t> Replayer::ExpectedSum(const traces::Op& op, uint64_t my_seed,
                                           traces::DType dtype, int64_t offset,
                                           int64_t bytes) const {
  std::vector<uint8_t> sum(static_cast<size_t>(bytes)), next(static_cast<size_t>(bytes));
  const int64_t count = bytes / traces::DTypeSize(dtype);
  for (size_t r = 0; r < groups_.Of(op).ranks.size(); ++r) {
    uint8_t* into = r == 0 ? sum.data() : next.data();
    FillPattern(into, bytes, groups_.PeerSeed(op, my_seed, static_cast<int64_t>(r)), offset);
    if (r > 0) SumInto(dtype, next.data(), sum.data(), count);
  }
  return sum;
}

// Reduce-scatter of `in` (the full tensor): this rank's chunk, the sum over
// the group in rank order, written at `out`. `chunks[j]`: chunk j's first
// byte; chunks[n] the tensor's bytes.
Status Replayer::ReduceScatterPhase(const traces::Op& op, int phase, const uint8_t* in,
                                    uint8_t* out, const std::vector<int64_t>& chunks,
                                    traces::DType dtype, uint64_t seed, bool check) {
  const auto n = static_cast<int64_t>(groups_.Of(op).ranks.size());
  const int64_t me = groups_.Of(op).index;
  for (int64_t j = 0; j < n; ++j) {
    if (j == me) continue;
    const int64_t lo = chunks[static_cast<size_t>(j)], hi = chunks[static_cast<size_t>(j) + 1];
    SSDTRAIN_RETURN_IF_ERROR(SendPiece(op, phase, j, in + lo, hi - lo, seed));
  }
  const int64_t lo = chunks[static_cast<size_t>(me)], hi = chunks[static_cast<size_t>(me) + 1];
  const int64_t bytes = hi - lo;
  uint8_t* piece = scratch_ + bytes + kTrailerBytes;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* contribution = in + lo;
    if (r != me) {
      uint64_t theirs = 0;
      SSDTRAIN_RETURN_IF_ERROR(ReceivePiece(op, phase, r, piece, bytes, &theirs));
      if (check) {
        SSDTRAIN_RETURN_IF_ERROR(
            CheckContribution(op, r, piece, bytes, theirs, groups_.PeerSeed(op, seed, r), lo));
      }
      contribution = piece;
    }
    if (r == 0) {
      std::memmove(out, contribution, static_cast<size_t>(bytes));
    } else {
      SumInto(dtype, contribution, out, bytes / traces::DTypeSize(dtype));
    }
  }
  return Status::Ok();
}

// All-gather: this rank's `bytes` at `mine` to every other, and theirs into
// `out` at chunks[j]. `expected(j)`: what rank j's piece must be under
// --verify (empty: not checked).
Status Replayer::AllGatherPhase(const traces::Op& op, int phase, const uint8_t* mine, uint8_t* out,
                                const std::vector<int64_t>& chunks, uint64_t seed,
                                const PieceCheck& expected) {
  const auto n = static_cast<int64_t>(groups_.Of(op).ranks.size());
  const int64_t me = groups_.Of(op).index;
  const int64_t my_lo = chunks[static_cast<size_t>(me)];
  const int64_t my_bytes = chunks[static_cast<size_t>(me) + 1] - my_lo;
  for (int64_t j = 0; j < n; ++j) {
    if (j != me) SSDTRAIN_RETURN_IF_ERROR(SendPiece(op, phase, j, mine, my_bytes, seed));
  }
  if (out + my_lo != mine) std::memmove(out + my_lo, mine, static_cast<size_t>(my_bytes));
  for (int64_t j = 0; j < n; ++j) {
    if (j == me) continue;
    const int64_t lo = chunks[static_cast<size_t>(j)], hi = chunks[static_cast<size_t>(j) + 1];
    uint64_t theirs = 0;
    SSDTRAIN_RETURN_IF_ERROR(ReceivePiece(op, phase, j, out + lo, hi - lo, &theirs));
    if (!expected) continue;
    const std::vector<uint8_t> want = expected(j);
    if (std::memcmp(want.data(), out + lo, static_cast<size_t>(hi - lo)) != 0) {
      return Status::Corruption("verify: " + RankOpName(op) + ": the piece of rank " +
                                std::to_string(groups_.Of(op).ranks[static_cast<size_t>(j)]) +
                                " is not the group's sum of their patterns");
    }
  }
  return Status::Ok();
}

Status Replayer::CollectiveFor(const traces::Op& op, const std::vector<DeviceBuffer>& inputs,
                               const std::vector<DeviceBuffer>& outputs) {
  const traces::CollectiveKind kind = Kind(op);
  if (kind == traces::CollectiveKind::kAllToAll) return AllToAllFor(op, inputs, outputs);
  if (kind == traces::CollectiveKind::kSendRecv) return RingStepFor(op, inputs, outputs);
  // After every op before it (its inputs' producers among them); its time
  // starts there.
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kCompute));
  return ExchangePairs(op, inputs, outputs);
}

Status Replayer::ExchangePairs(const traces::Op& op, const std::vector<DeviceBuffer>& inputs,
                               const std::vector<DeviceBuffer>& outputs) {
  const traces::CollectiveKind kind = Kind(op);
  const int64_t started = NowNs();
  for (size_t k = 0; k < inputs.size(); ++k) {
    SSDTRAIN_RETURN_IF_ERROR(CollectivePair(op, k, inputs[k], outputs[k]));
  }
  CollectiveTraffic::Time& time = collectives_.by_kind[static_cast<size_t>(kind)];
  ++time.count;
  time.ns += NowNs() - started;
  return Status::Ok();
}

Status Replayer::CollectivePair(const traces::Op& op, size_t pair, const DeviceBuffer& input,
                                const DeviceBuffer& output) {
  const traces::CollectiveKind kind = Kind(op);
  const traces::Tensor& in_t = trace_.tensor(op.inputs[pair]);
  const traces::Tensor& out_t = trace_.tensor(op.outputs[pair]);
  const auto n = static_cast<int64_t>(groups_.Of(op).ranks.size());
  const int64_t me = groups_.Of(op).index;
  const TensorId in_storage = trace_.StorageOf(op.inputs[pair]);
  const uint64_t seed = SeedOf(in_storage);
  // Under --verify a persistent input (a weight's gradient, set_to_none ones
  // too) holds sums of earlier writes, not a pattern: only its checksums are checked.
  const bool check = options_.verify && !life(in_storage).persistent() &&
                     life(in_storage).role != traces::StorageRole::kWeightGradient;
  uint8_t* in = static_cast<uint8_t*>(collective_host_->base());
  uint8_t* out = in + in_t.bytes;
  scratch_ = out + out_t.bytes;  // a message, then a received piece
  // Pieces of pair k: phases 2k (the all-reduce's gather 2k + 1).
  const int phase = static_cast<int>(2 * pair);
  // On the message streams, not behind the offload's queued copies.
  SSDTRAIN_RETURN_IF_ERROR(device_.CopyToHostAsync(in, input, 0, in_t.bytes, Stream::kSend));
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kSend));
  if (check) {
    const int64_t bad = PatternMismatch(in, in_t.bytes, seed, 0);
    if (bad >= 0) {
      return Status::Corruption("verify: " + RankOpName(op) + ": its input " + in_t.name +
                                " differs from its pattern at byte " + std::to_string(bad));
    }
  }
  const int64_t full = std::max(in_t.bytes, out_t.bytes);
  const int64_t element = traces::DTypeSize(in_t.dtype);
  // Element-aligned chunks in rank order: a gather's or scatter's shard each
  // (the last short where ZeRO padded it), an all-reduce's even split.
  std::vector<int64_t> chunks;
  const int64_t shard = in_t.bytes != out_t.bytes ? std::min(in_t.bytes, out_t.bytes) : 0;
  for (int64_t j = 0; j <= n; ++j) {
    chunks.push_back(shard > 0 ? std::min(j * shard, full) : full / element * j / n * element);
  }
  const int64_t lo = chunks[static_cast<size_t>(me)];
  const int64_t mine = chunks[static_cast<size_t>(me) + 1] - lo;
  switch (kind) {
    case traces::CollectiveKind::kAllGather: {
      auto expected = [&](int64_t j) {
        std::vector<uint8_t> p(static_cast<size_t>(in_t.bytes));
        FillPattern(p.data(), in_t.bytes, groups_.PeerSeed(op, seed, j), 0);
        return p;
      };
      SSDTRAIN_RETURN_IF_ERROR(AllGatherPhase(op, phase, in, out, chunks, seed,
                                              check ? PieceCheck(expected) : PieceCheck()));
      break;
    }
    case traces::CollectiveKind::kReduceScatter:
      SSDTRAIN_RETURN_IF_ERROR(
          ReduceScatterPhase(op, phase, in, out, chunks, in_t.dtype, seed, check));
      // ZeRO's padding past the tensor's last element.
      std::memset(out + mine, 0, static_cast<size_t>(out_t.bytes - mine));
      if (check) {
        const std::vector<uint8_t> want = ExpectedSum(op, seed, in_t.dtype, lo, mine);
        if (std::memcmp(want.data(), out, static_cast<size_t>(mine)) != 0) {
          return Status::Corruption("verify: " + RankOpName(op) +
                                    ": the summed shard is not the group's sum of its patterns");
        }
      }
      break;
    case traces::CollectiveKind::kAllToAll:
    case traces::CollectiveKind::kSendRecv:
      break;  // AllToAllFor, RingStepFor
    case traces::CollectiveKind::kAllReduce: {
      SSDTRAIN_RETURN_IF_ERROR(
          ReduceScatterPhase(op, phase, in, out + lo, chunks, in_t.dtype, seed, check));
      auto expected = [&](int64_t j) {
        const int64_t at = chunks[static_cast<size_t>(j)];
        return ExpectedSum(op, seed, in_t.dtype, at, chunks[static_cast<size_t>(j) + 1] - at);
      };
      SSDTRAIN_RETURN_IF_ERROR(AllGatherPhase(op, phase + 1, out + lo, out, chunks, seed,
                                              check ? PieceCheck(expected) : PieceCheck()));
      if (check) {
        const std::vector<uint8_t> want = expected(me);
        if (std::memcmp(want.data(), out + lo, want.size()) != 0) {
          return Status::Corruption("verify: " + RankOpName(op) +
                                    ": this rank's summed chunk is not the group's sum");
        }
      }
      break;
    }
  }
  SSDTRAIN_RETURN_IF_ERROR(
      device_.CopyToDeviceAsync(output, 0, out, out_t.bytes, Stream::kReceive));
  return device_.Synchronize(Stream::kReceive);
}

}  // namespace ssdtrain::exec::detail

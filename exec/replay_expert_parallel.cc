// Replayer: the expert-parallel ranks' all-to-alls (ep > 1, exec/step_sync.h).
// The MoE dispatch and combine of a trace built at ep > 1
// (models/detail/moe.cc: kCollective ops named ...all_to_all, forward and
// backward) run for real between the ranks of the ep group
// (traces::Layout::EpGroup), with the trace's bytes, through the same machinery
// as the tensor-parallel collectives (exec/replay_tensor_parallel.cc): the op's
// input tensors are copied back to back into pinned host memory on the send
// stream once the ops before it have run; the buffer is cut into n equal
// pieces and piece j goes to the group's rank j as one point-to-point message
// (SendPiece: a CRC32C and the sender's seed after the payload, the piece's
// tag PieceTag, the one rule for every collective's messages), rank j's own
// piece staying; piece r of the received buffer is what rank r sent, checked
// by CRC32C on arrival (ReceivePiece), and the buffer is copied into the op's
// output tensors on the receive stream. So each rank sends (n − 1)/n of the
// payload S, one piece to each peer: what sim/collective.h prices.
//
// The op's tensors: an all-to-all reads or writes several (the dispatch
// writes the received rows and the experts' views of them; the combine reads
// each local expert's output); a view of another listed tensor is left out
// (AllToAllMembers), and each one left must be a storage of its own. Bytes in
// and bytes out must be equal and cut into n whole-element pieces (balanced
// routing: every rank sends and receives the same rows); anything else is
// refused before the replay starts.
//
// Under --verify every rank's inputs hold its own patterns (the seeds differ
// by ep index: RankGroups::EpSeedSalt), checked before sending; each piece received must
// carry its sender's seed and be its sender's patterns at those bytes. The
// outputs then get their own patterns, as any op's do.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "exec/detail/rank_message.h"
#include "exec/detail/replayer.h"

namespace ssdtrain::exec::detail {

std::vector<size_t> Replayer::AllToAllMembers(const std::vector<TensorId>& tensors) const {
  std::vector<size_t> members;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorId t = tensors[i];
    const TensorId s = trace_.StorageOf(t);
    const bool repeated = std::find(tensors.begin(), tensors.begin() + static_cast<long>(i), t) !=
                          tensors.begin() + static_cast<long>(i);
    const bool view_of_listed =
        s != t && std::find(tensors.begin(), tensors.end(), s) != tensors.end();
    if (!repeated && !view_of_listed) members.push_back(i);
  }
  return members;
}

Result<int64_t> Replayer::AllToAllHostBytes(const traces::Op& op) const {
  const auto n = static_cast<int64_t>(groups_.ep.ranks.size());
  int64_t in = 0, out = 0;
  for (const auto* list : {&op.inputs, &op.outputs}) {
    for (size_t i : AllToAllMembers(*list)) {
      const TensorId t = (*list)[i];
      if (trace_.StorageOf(t) != t) {
        return Status::InvalidArgument(RankOpName(op) + ": its tensor " + trace_.tensor(t).name +
                                       " is a view of a tensor the all-to-all does not list");
      }
      (list == &op.inputs ? in : out) += trace_.tensor(t).bytes;
    }
  }
  const int64_t element =
      op.inputs.empty() ? 1 : traces::DTypeSize(trace_.tensor(op.inputs[0]).dtype);
  if (in != out || in % (n * element) != 0) {
    return Status::InvalidArgument(
        RankOpName(op) + ": an all-to-all over " + std::to_string(n) +
        " expert-parallel ranks of " + std::to_string(in) + " bytes in, " + std::to_string(out) +
        " bytes out: expected equal bytes in and out (balanced routing), cut into " +
        std::to_string(n) + " pieces of whole " + std::to_string(element) + "-byte elements");
  }
  // The input, the output, and a message (one piece and its trailer) per rank.
  return in + out + n * (in / n + static_cast<int64_t>(sizeof(MessageTrailer)));
}

std::vector<uint8_t> Replayer::ExpectedSent(const std::vector<TensorId>& tensors,
                                            const std::vector<size_t>& members, int64_t peer,
                                            int64_t lo, int64_t hi) const {
  std::vector<uint8_t> want(static_cast<size_t>(hi - lo));
  int64_t at = 0;  // the member's first byte in the buffer
  for (size_t i : members) {
    const TensorId s = trace_.StorageOf(tensors[i]);
    const int64_t bytes = trace_.tensor(tensors[i]).bytes;
    const int64_t from = std::max(lo, at), to = std::min(hi, at + bytes);
    if (from < to) {
      FillPattern(want.data() + (from - lo), to - from, groups_.EpPeerSeed(SeedOf(s), peer),
                  from - at);
    }
    at += bytes;
  }
  return want;
}

Status Replayer::AllToAllFor(const traces::Op& op, const std::vector<DeviceBuffer>& inputs,
                             const std::vector<DeviceBuffer>& outputs) {
  const auto n = static_cast<int64_t>(groups_.ep.ranks.size());
  const int64_t me = groups_.ep.index;
  const std::vector<size_t> ins = AllToAllMembers(op.inputs);
  const std::vector<size_t> outs = AllToAllMembers(op.outputs);
  int64_t total = 0;
  for (size_t i : ins) total += trace_.tensor(op.inputs[i]).bytes;
  const int64_t piece = total / n;
  uint8_t* in = static_cast<uint8_t*>(collective_host_->base());
  uint8_t* out = in + total;
  scratch_ = out + total;  // a message
  // Under --verify a persistent input holds no pattern (none is expected here).
  bool check = options_.verify;
  for (size_t i : ins) check = check && !life(trace_.StorageOf(op.inputs[i])).persistent();
  // After every op before it (its inputs' producers among them); its time
  // starts there. On the message streams, not behind the offload's copies.
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kCompute));
  const int64_t started = NowNs();
  int64_t at = 0;
  for (size_t i : ins) {
    const int64_t bytes = trace_.tensor(op.inputs[i]).bytes;
    SSDTRAIN_RETURN_IF_ERROR(device_.CopyToHostAsync(in + at, inputs[i], 0, bytes, Stream::kSend));
    at += bytes;
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kSend));
  if (check) {
    const std::vector<uint8_t> mine = ExpectedSent(op.inputs, ins, me, 0, total);
    if (std::memcmp(mine.data(), in, static_cast<size_t>(total)) != 0) {
      return Status::Corruption("verify: " + RankOpName(op) +
                                ": its inputs differ from their patterns");
    }
  }
  // The trailer's seed: the first input's (each piece is checked in full).
  const uint64_t seed = ins.empty() ? 0 : SeedOf(trace_.StorageOf(op.inputs[ins[0]]));
  for (int64_t j = 0; j < n; ++j) {
    if (j != me) SSDTRAIN_RETURN_IF_ERROR(SendPiece(op, 0, j, in + j * piece, piece, seed));
  }
  std::memcpy(out + me * piece, in + me * piece, static_cast<size_t>(piece));
  for (int64_t r = 0; r < n; ++r) {
    if (r == me) continue;
    uint64_t theirs = 0;
    SSDTRAIN_RETURN_IF_ERROR(ReceivePiece(op, 0, r, out + r * piece, piece, &theirs));
    if (!check) continue;
    const std::string what = "verify: " + RankOpName(op) + ": the piece of rank " +
                             std::to_string(groups_.ep.ranks[static_cast<size_t>(r)]);
    if (theirs != groups_.EpPeerSeed(seed, r)) {
      return Status::Corruption(what + " has seed " + std::to_string(theirs) + ", expected " +
                                std::to_string(groups_.EpPeerSeed(seed, r)));
    }
    const std::vector<uint8_t> want = ExpectedSent(op.inputs, ins, r, me * piece, (me + 1) * piece);
    const auto bad = std::mismatch(want.begin(), want.end(), out + r * piece);
    if (bad.first != want.end()) {
      return Status::Corruption(what + " differs from its sender's pattern at byte " +
                                std::to_string(me * piece + (bad.first - want.begin())) +
                                " of its buffer");
    }
  }
  at = 0;
  for (size_t i : outs) {
    const int64_t bytes = trace_.tensor(op.outputs[i]).bytes;
    SSDTRAIN_RETURN_IF_ERROR(
        device_.CopyToDeviceAsync(outputs[i], 0, out + at, bytes, Stream::kReceive));
    at += bytes;
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kReceive));
  CollectiveTraffic::Time& time =
      collectives_.by_kind[static_cast<size_t>(traces::CollectiveKind::kAllToAll)];
  ++time.count;
  time.ns += NowNs() - started;
  return Status::Ok();
}

}  // namespace ssdtrain::exec::detail

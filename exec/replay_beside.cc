// Replayer: collectives exchanged while later ops run (exec/README.md,
// `replay_beside.cc`), as the frameworks launch them on a stream of their own
// and the simulator prices them. The exchange is the host's (pinned copies and
// messages on the issue thread), so "beside" means: the later ops are issued
// first (their kernels queued on the compute stream), then the collective's
// pieces are exchanged while they run.
// - An `async` tp collective (traces::AsyncOverlapGemm): Megatron's
//   column-parallel backward launches its input's all-gather before the data
//   gradient and the data gradient's reduce-scatter (all-reduce) before the
//   weight gradient, through NCCL, and waits for each after that GEMM. Once
//   the compute stream has run every op before the collective (its inputs are
//   ready), the ops after it up to that GEMM are issued, the GEMM up to its
//   kernel; after the exchange the GEMM's op ends (what it read released).
//   The collective's inputs stay until the GEMM has run: the storage plan
//   lists them among its inputs, as the simulator holds them, so memory is
//   the same either way.
// - A ZeRO weight gather (the shard group's all-gather of persistent shards;
//   FSDP's prefetch: the trace places each layer's gather a layer ahead,
//   models/README.md, "ZeRO-2 and 3"): the ops after it up to the op before
//   its first reader are issued whole, then its pieces are exchanged. Its
//   output is allocated where the trace has it, as the simulator's side
//   stream allocates it, and its inputs are weights: memory is the same.
// Either is taken so only where the ops it runs beside exchange nothing (no
// collective, no send or receive between ranks: every rank of a group takes
// its exchanges in one order) and neither read nor write what it writes, nor
// write what it reads, and at least one op runs beside it; else in order.
// ZeRO's reduce-scatters (their full gradients freed when the scatter ends,
// which the simulator times) and the cp ring's steps run in order.
// The collective's start and end events are recorded on the send and receive
// streams around the exchange, so its span is the exchange, not the ops'; the
// measured timeline puts it on the network lane, out of the compute lane's
// busy time (exec/replay_timeline.cc).
#include <algorithm>
#include <utility>
#include <vector>

#include "exec/detail/replayer.h"
#include "traces/collective_kind.h"

namespace ssdtrain::exec::detail {
namespace {

bool Among(const std::vector<TensorId>& set, TensorId s) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

}  // namespace

void Replayer::InitBeside() {
  beside_.assign(trace_.ops.size(), Beside{});
  for (size_t i = 0; i < trace_.ops.size(); ++i) {
    const traces::Op& c = trace_.ops[i];
    if (c.kind != traces::OpKind::kCollective || !groups_.Exchanges(c)) continue;
    const traces::CollectiveKind kind = Kind(c);
    const traces::OpId gemm = traces::AsyncOverlapGemm(trace_, static_cast<traces::OpId>(i));
    const bool async = gemm != traces::kNoOp && kind != traces::CollectiveKind::kAllToAll &&
                       kind != traces::CollectiveKind::kSendRecv;
    std::vector<TensorId> reads, writes;
    bool weights = !c.inputs.empty();
    for (TensorId t : c.inputs) {
      reads.push_back(trace_.StorageOf(t));
      weights = weights && life(reads.back()).persistent();
    }
    for (TensorId t : c.outputs) writes.push_back(trace_.StorageOf(t));
    const traces::CollectiveGroup group = traces::GroupOfCollective(c);
    const bool gather = kind == traces::CollectiveKind::kAllGather && weights &&
                        (group == traces::CollectiveGroup::kShard ||
                         group == traces::CollectiveGroup::kExpertShard);
    if (!async && !gather) continue;
    // The ops it can run beside: up to the GEMM, or up to the first that
    // touches its tensors or exchanges.
    const size_t bound = async ? static_cast<size_t>(gemm) : trace_.ops.size() - 1;
    size_t last = i;
    for (size_t j = i + 1; j <= bound; ++j) {
      const traces::Op& op = trace_.ops[j];
      bool apart = !groups_.Exchanges(op) && !Transfers(op);
      for (TensorId t : op.inputs) apart = apart && !Among(writes, trace_.StorageOf(t));
      for (TensorId t : op.outputs) {
        const TensorId s = trace_.StorageOf(t);
        apart = apart && !Among(writes, s) && !Among(reads, s);
      }
      if (!apart) break;
      last = j;
    }
    if (async && last == static_cast<size_t>(gemm)) {
      beside_[i] = Beside{last, /*gemm=*/true};
    } else if (gather && last > i) {
      beside_[i] = Beside{last, /*gemm=*/false};
    }
  }
}

Status Replayer::IssueBeside(const traces::Op& c, const Beside& b) {
  Prepared pc;
  SSDTRAIN_RETURN_IF_ERROR(PrepareOp(c, &pc));
  // Beside a GEMM: its inputs' producers have run before the ops after it go.
  if (b.gemm) SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kCompute));
  samples_.push_back({issues_.size(), device_.used_bytes(), activation_now_});
  const size_t whole = b.gemm ? b.last : b.last + 1;  // the ops issued whole
  for (size_t j = static_cast<size_t>(c.id) + 1; j < whole; ++j) {
    SSDTRAIN_RETURN_IF_ERROR(StepOp(trace_.ops[j]));
  }
  Prepared pg;
  if (b.gemm) {
    SSDTRAIN_RETURN_IF_ERROR(PrepareOp(trace_.ops[b.last], &pg));
    SSDTRAIN_RETURN_IF_ERROR(RunIssued(trace_.ops[b.last], pg.io_dependent));
  }
  // The exchange, beside what was issued.
  Event* start = op_start_[static_cast<size_t>(c.id)].get();
  Event* end = op_end_[static_cast<size_t>(c.id)].get();
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*start, Stream::kSend));
  std::vector<DeviceBuffer> ins, outs;
  for (TensorId t : c.inputs) ins.push_back(View(t));
  for (TensorId t : c.outputs) outs.push_back(View(t));
  SSDTRAIN_RETURN_IF_ERROR(ExchangePairs(c, ins, outs));
  ++(b.gemm ? collectives_.beside_gemm : collectives_.prefetched);
  if (options_.verify) {  // its outputs' patterns, as Run gives any op's
    std::vector<TensorId> filled;
    for (TensorId t : c.outputs) {
      const TensorId s = trace_.StorageOf(t);
      if (life(s).persistent() || !slot(s).buffer.valid() || Among(filled, s)) continue;
      filled.push_back(s);
      SSDTRAIN_RETURN_IF_ERROR(
          device_.FillPatternAsync(slot(s).buffer, SeedOf(s), Stream::kCompute));
    }
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*end, Stream::kReceive));
  issues_.push_back({c.id, start, end, pc.io_dependent, /*recompute=*/false, /*beside=*/true});
  SSDTRAIN_RETURN_IF_ERROR(FinishOp(c, std::move(pc)));
  SSDTRAIN_RETURN_IF_ERROR(CopyBucketsOut(c));
  SSDTRAIN_RETURN_IF_ERROR(PostBuckets(/*wait=*/false));
  if (!b.gemm) return Status::Ok();
  const traces::Op& g = trace_.ops[b.last];
  SSDTRAIN_RETURN_IF_ERROR(FinishOp(g, std::move(pg)));
  SSDTRAIN_RETURN_IF_ERROR(CopyBucketsOut(g));
  return PostBuckets(/*wait=*/false);
}

}  // namespace ssdtrain::exec::detail

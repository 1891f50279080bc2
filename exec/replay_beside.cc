// Replayer: asynchronous tensor-parallel collectives (exec/README.md,
// "Asynchronous tp collectives"). Megatron's column-parallel backward
// launches its input's all-gather before the data gradient and the data
// gradient's reduce-scatter (all-reduce) before the weight gradient, through
// NCCL, and waits for each after that GEMM; the trace marks them `async`
// (traces::TpOverlapMethod::kAsync) and the simulator prices them beside the
// GEMM. The replay does the same with its host-side exchange: once the
// compute stream has run every op before the collective (its inputs are
// ready), the ops after it up to that GEMM (traces::AsyncOverlapGemm) are
// issued, the GEMM's kernel on the compute stream, and the collective's
// messages are exchanged while they run; then the GEMM's op and the
// collective's end as IssueOp ends any op. The collective's inputs stay
// until the GEMM has run (the storage plan lists them among its inputs), as
// the simulator holds them, so memory is the same either way.
// Taken so only where the ops up to the GEMM exchange nothing (no collective,
// no send or receive between ranks) and neither read nor write what the
// collective writes, nor write what it reads; elsewhere it runs in order.
// The collective's end event is recorded on the receive stream, where its
// last copy lands, so its span is its exchange, not the GEMM's.
#include <algorithm>
#include <utility>
#include <vector>

#include "exec/detail/replayer.h"

namespace ssdtrain::exec::detail {

void Replayer::InitBeside() {
  beside_.assign(trace_.ops.size(), 0);
  for (size_t i = 0; i < trace_.ops.size(); ++i) {
    const traces::OpId gemm = traces::AsyncOverlapGemm(trace_, static_cast<traces::OpId>(i));
    if (gemm == traces::kNoOp) continue;
    const traces::Op& c = trace_.ops[i];
    const traces::CollectiveKind kind = Kind(c);
    if (!groups_.Exchanges(c) || kind == traces::CollectiveKind::kAllToAll ||
        kind == traces::CollectiveKind::kSendRecv) {
      continue;
    }
    std::vector<TensorId> reads, writes;
    for (TensorId t : c.inputs) reads.push_back(trace_.StorageOf(t));
    for (TensorId t : c.outputs) writes.push_back(trace_.StorageOf(t));
    const auto among = [](const std::vector<TensorId>& set, TensorId s) {
      return std::find(set.begin(), set.end(), s) != set.end();
    };
    bool apart = true;
    for (size_t j = i + 1; j <= static_cast<size_t>(gemm) && apart; ++j) {
      const traces::Op& op = trace_.ops[j];
      apart = !groups_.Exchanges(op) && !Transfers(op);
      for (TensorId t : op.inputs) apart = apart && !among(writes, trace_.StorageOf(t));
      for (TensorId t : op.outputs) {
        const TensorId s = trace_.StorageOf(t);
        apart = apart && !among(writes, s) && !among(reads, s);
      }
    }
    if (apart) beside_[i] = static_cast<size_t>(gemm);
  }
}

Status Replayer::IssueBeside(const traces::Op& c, size_t gemm) {
  Prepared pc;
  SSDTRAIN_RETURN_IF_ERROR(PrepareOp(c, &pc));
  Event* start = op_start_[static_cast<size_t>(c.id)].get();
  Event* end = op_end_[static_cast<size_t>(c.id)].get();
  // Its inputs' producers have run.
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*start, Stream::kCompute));
  SSDTRAIN_RETURN_IF_ERROR(device_.Synchronize(Stream::kCompute));
  samples_.push_back({issues_.size(), device_.used_bytes(), activation_now_});
  for (size_t j = static_cast<size_t>(c.id) + 1; j < gemm; ++j) {
    SSDTRAIN_RETURN_IF_ERROR(StepOp(trace_.ops[j]));
  }
  const traces::Op& g = trace_.ops[gemm];
  Prepared pg;
  SSDTRAIN_RETURN_IF_ERROR(PrepareOp(g, &pg));
  SSDTRAIN_RETURN_IF_ERROR(RunIssued(g, pg.io_dependent));
  // The exchange, beside the GEMM's kernel.
  std::vector<DeviceBuffer> ins, outs;
  for (TensorId t : c.inputs) ins.push_back(View(t));
  for (TensorId t : c.outputs) outs.push_back(View(t));
  SSDTRAIN_RETURN_IF_ERROR(ExchangePairs(c, ins, outs));
  ++collectives_.beside_gemm;
  if (options_.verify) {  // its outputs' patterns, as Run gives any op's
    for (TensorId t : c.outputs) {
      const TensorId s = trace_.StorageOf(t);
      if (life(s).persistent() || !slot(s).buffer.valid()) continue;
      SSDTRAIN_RETURN_IF_ERROR(
          device_.FillPatternAsync(slot(s).buffer, SeedOf(s), Stream::kCompute));
    }
  }
  SSDTRAIN_RETURN_IF_ERROR(device_.Record(*end, Stream::kReceive));
  issues_.push_back({c.id, start, end, pc.io_dependent, /*recompute=*/false});
  SSDTRAIN_RETURN_IF_ERROR(FinishOp(c, std::move(pc)));
  SSDTRAIN_RETURN_IF_ERROR(CopyBucketsOut(c));
  SSDTRAIN_RETURN_IF_ERROR(PostBuckets(/*wait=*/false));
  SSDTRAIN_RETURN_IF_ERROR(FinishOp(g, std::move(pg)));
  SSDTRAIN_RETURN_IF_ERROR(CopyBucketsOut(g));
  return PostBuckets(/*wait=*/false);
}

}  // namespace ssdtrain::exec::detail

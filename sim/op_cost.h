// How long one op of a trace takes on the hardware model, in nanoseconds.
// In order of preference: the op's own measured_ns (when the options allow it),
// an entry of the hardware's measured op-time table, then a roofline estimate:
//   gemm, attention:  max(flops / (peak[dtype] · clock_scale · eff(flops) · q),
//                     an FP8 GEMM (GemmDims::fp8) at the fp8 peak (mxfp8's under
//                     that recipe) on the gemm_fp8 curve (or the gemm curve),
//                         bytes / (memory_bw · eff_memory(bytes)))
//                     q = GemmShapeEfficiency(dims, sm_count) for a gemm with
//                     dims on a GPU with sm_count > 0, else 1
//   a fused attention kernel's call (Op::attention) where the trace names a
//   kernel the hardware has curves for (Header::attention_kernel,
//   gpu.attention_kernels): max(c · flops / (peak[dtype] · clock_scale ·
//                     eff_kernel(seq_len)), bytes / (memory_bw · eff_memory))
//                     c the share of the counted pairs it computes: 1 without
//                     a mask, ½ for a cp ring's half step, ½ under a causal
//                     mask on the kernel's causal curve (without one: 1 on the
//                     unmasked curve, an upper bound); eff_kernel the
//                     backward curves for a backward op where given
//   memory-bound kinds: bytes / (memory_bw · eff(bytes))
//   collective:  over the tensor-parallel group (the all-to-all over the
//                expert-parallel group, ZeRO's over the shard group, a cp
//                ring step over the cp group: one message to the neighbour,
//                on the network once the ring leaves a domain), priced by its
//                kind where the group's
//                ranks sit (sim/topology.h; inside one NVLink domain the ring
//                all-reduce 2·(t−1)/t · S / scale_up.GBps, all-gather and
//                reduce-scatter (t−1)/t · S / scale_up.GBps, plus one latency per
//                ring step; S the payload; 0 when t = 1)
//   a collective with Op::tp_overlap (TE's userbuffers; C its time above,
//   G the GEMM's it overlaps, t the tp ranks):
//     ring_exchange  (t − 1) · max(0, C/(t − 1) − G/t): the GEMM in t chunks,
//                    each on the shard at hand while the next one arrives
//     pipeline       g + (n − 1) · max(g, C/n) + C/n − G, g = G·s/n: the GEMM
//                    in n = kTpOverlapSplits chunks on the SMs the
//                    reduce-scatter leaves (s = sm_count / (sm_count −
//                    kTpOverlapCommSms); 1 where sm_count is 0), each chunk's
//                    reduce-scatter beside the next chunk
//     bulk           max(0, C − G): beside the whole GEMM
//     async          max(C − G, C · (1 − G / G')): NCCL's collective beside
//                    the whole GEMM (Megatron's asynchronous tp backward, no
//                    userbuffers), the GEMM at G' on the SMs its channels
//                    leave while it runs (OpTimeBesideNs), at G after
//   send, recv:  0 here (the pipeline schedule models activation sends)
// plus op_overhead_us for every op that does work. Durations round up to whole ns.
//
// Thread-safety: const methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "sim/hardware.h"
#include "traces/collective_kind.h"
#include "traces/layout.h"
#include "traces/trace.h"

namespace ssdtrain::sim {

// Transformer Engine's defaults for its pipelined reduce-scatter overlap
// (pytorch/module/base.py, initialize_ub: num_splits 4, num_sm 16,
// set_sm_margin for every method but ring_exchange).
inline constexpr int64_t kTpOverlapSplits = 4;
inline constexpr int64_t kTpOverlapCommSms = 16;

class OpCostModel {
 public:
  // `tp` is the tensor-parallel degree collectives run over, `ep` the
  // expert-parallel degree of the all-to-all; `dtype` the trace's compute
  // dtype ("fp16", "bf16", "fp32").
  // `zero_shards` the ranks of ZeRO's shard group (traces/collective_kind.h,
  // CollectiveGroup::kShard), `cp` the context-parallel ring's.
  // `fp8` the trace's FP8 recipe (traces/fp8.h; "" none): its FP8 GEMMs run
  // at the FP8 peak (mxfp8: the MXFP8 peak) on the gemm_fp8 curve.
  // `attention_kernel` the fused attention kernel (hw.gpu.attention_kernels;
  // "" or one the hardware lacks: the attention curve, CheckAttentionKernel
  // refusing the latter first).
  OpCostModel(const HardwareOptions& hw, int64_t tp, const std::string& dtype,
              bool use_trace_measurements = true, int64_t ep = 1, int64_t zero_shards = 1,
              int64_t cp = 1, const std::string& fp8 = "",
              const std::string& attention_kernel = "");
  // The groups, dtype, FP8 recipe and attention kernel of `header`.
  OpCostModel(const HardwareOptions& hw, const traces::Header& header,
              bool use_trace_measurements = true);

  // A measured time (the trace's measured_ns, or the hardware's measured op
  // table) plus the per-op overhead, else the roofline estimate.
  int64_t OpTimeNs(const traces::Op& op) const;
  // The roofline estimate alone (no measurements).
  int64_t RooflineNs(const traces::Op& op) const;
  // The op's time while NCCL collectives beside it hold `sms_held` of the
  // GPU's SMs (each its CollectiveSms): a GEMM or an attention kernel runs on
  // the sm_count − sms_held left (a GEMM's tiles in waves of those); other
  // kinds, and any op where either count is 0, as OpTimeNs. A measured time
  // is scaled by the roofline's ratio.
  int64_t OpTimeBesideNs(const traces::Op& op, int sms_held) const;
  // The SMs collective `op` holds while it runs: the collective_sms of the
  // tier its group's ranks sit on (sim/topology.h); 0 for a cp ring step
  // (NCCL's send/recv kernel, a single block: NVIDIA/nccl issue 1433), an op
  // of another kind, or a group of one rank.
  int CollectiveSms(const traces::Op& op) const;
  // A GEMM of `dims` alone, no per-op overhead (measured by dims, else the roofline).
  int64_t GemmNs(const traces::GemmDims& dims) const;
  // What a collective of `comm_ns` over `ranks`, holding `sms_held` SMs while
  // it runs (CollectiveSms; `async` only), leaves exposed beside the GEMM it
  // overlaps (traces::TpOverlap; the file comment has the rules).
  int64_t ExposedNs(const traces::TpOverlap& overlap, int64_t comm_ns, int64_t ranks,
                    int sms_held = 0) const;

 private:
  // RooflineNs on `sms` of the GPU's sm_count SMs (0 where it has none).
  int64_t RooflineOnNs(const traces::Op& op, int sms) const;
  // An op of the GEMM `dims`, its operands in FP8 or the trace's dtype.
  traces::Op GemmOp(const traces::GemmDims& dims) const;
  // The measured duration of `op`, or -1 when none matches.
  int64_t MeasuredNs(const traces::Op& op) const;
  // A fused attention kernel's call (op.attention) on attention_kernel_'s
  // curves: the pairs it computes at its rate for its length and mask.
  double AttentionKernelSeconds(const traces::Op& op) const;
  using GemmKey = std::tuple<int64_t, int64_t, int64_t, int64_t>;
  const HardwareOptions& hw_;
  // Where the tp group (ranks 0 .. tp − 1) and the ep group (strided by tp)
  // sit under the rank order (traces/layout.h).
  // Where the ranks of each group of a collective sit (traces::GroupOfCollective).
  const traces::GroupPlacement& GroupOf(traces::CollectiveGroup over) const;
  traces::GroupPlacement tp_group_, ep_group_, shard_group_, expert_shard_group_, cp_group_;
  double peak_flops_;      // FLOP/s at the configured clock
  int64_t act_bytes_ = 2;  // bytes of an element of the trace's dtype (GemmNs's operands)
  // FP8 GEMMs' FLOP/s at the configured clock (0: none; such a GEMM then
  // runs at peak_flops_, CheckPrecision having refused the pairing first).
  double peak_fp8_flops_ = 0;
  bool use_trace_measurements_;
  const AttentionKernelCurves* attention_kernel_ = nullptr;  // none: the attention curve
  std::map<GemmKey, int64_t> gemm_times_, gemm_fp8_times_;   // measured, by dims
  std::map<traces::OpKind, std::vector<std::pair<int64_t, int64_t>>> bytes_times_;  // sorted
};

// Efficiency at `size` on `curve` (log-linear interpolation, clamped; 1 when empty).
double Efficiency(const std::vector<EfficiencyPoint>& curve, double size);

// The share of a GEMM's tile slots that compute its output (NVIDIA, "Matrix
// Multiplication Background User's Guide", ch. 3, tile and wave quantization):
// cuBLAS cuts the batch × m × n output into tiles of kGemmTileRows ×
// kGemmTileCols (either way round: the one that wastes less), one tile per SM
// at a time, so the tiles run in waves of sm_count and a partial tile at an
// edge, or a last wave with SMs idle, takes as long as a full one:
//   tiles = batch · ⌈m / tm⌉ · ⌈n / tn⌉,  waves = ⌈tiles / sm_count⌉,
//   q = batch · m · n / (waves · sm_count · tm · tn)   in (0, 1].
// 1 when sm_count ≤ 0 or a dim is not positive.
inline constexpr int64_t kGemmTileRows = 256;
inline constexpr int64_t kGemmTileCols = 128;
double GemmShapeEfficiency(const traces::GemmDims& dims, int sm_count);

}  // namespace ssdtrain::sim

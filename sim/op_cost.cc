#include "sim/op_cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "sim/collective.h"
#include "sim/topology.h"
#include "traces/duration.h"

namespace ssdtrain::sim {
namespace {

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;

using traces::CeilSecondsToNs;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// q for tiles of tm × tn (rows of the output by columns).
double TileShare(const traces::GemmDims& d, int64_t sms, int64_t tm, int64_t tn) {
  const int64_t tiles = d.batch * CeilDiv(d.m, tm) * CeilDiv(d.n, tn);
  const int64_t waves = CeilDiv(tiles, sms);
  const double slots = static_cast<double>(waves) * static_cast<double>(sms) *
                       static_cast<double>(tm) * static_cast<double>(tn);
  return static_cast<double>(d.batch) * static_cast<double>(d.m) * static_cast<double>(d.n) / slots;
}

}  // namespace

double Efficiency(const std::vector<EfficiencyPoint>& curve, double size) {
  if (curve.empty()) return 1.0;
  if (size <= curve.front().size) return curve.front().efficiency;
  if (size >= curve.back().size) return curve.back().efficiency;
  for (size_t i = 1; i < curve.size(); ++i) {
    if (size <= curve[i].size) {
      const double x0 = std::log(curve[i - 1].size), x1 = std::log(curve[i].size);
      const double f = (std::log(size) - x0) / (x1 - x0);
      return curve[i - 1].efficiency + f * (curve[i].efficiency - curve[i - 1].efficiency);
    }
  }
  return curve.back().efficiency;
}

double GemmShapeEfficiency(const traces::GemmDims& dims, int sm_count) {
  if (sm_count <= 0 || dims.m <= 0 || dims.n <= 0 || dims.batch <= 0) return 1.0;
  return std::max(TileShare(dims, sm_count, kGemmTileRows, kGemmTileCols),
                  TileShare(dims, sm_count, kGemmTileCols, kGemmTileRows));
}

namespace {

// Where the groups an op's collectives run over sit, by the trace's own
// degrees (a stage's trace knows its tp, ep, ZeRO shards and cp, not its
// ranks: rank 0's groups).
struct OpGroups {
  traces::GroupPlacement tp, ep, shard, expert_shard, cp;
};

OpGroups ComputeOpGroups(int64_t tp, int64_t ep, int64_t zero_shards, int64_t cp, int64_t domain) {
  OpGroups out;
  traces::Layout groups;
  groups.tp = std::max<int64_t>(1, tp);
  groups.ep = groups.dp = std::max<int64_t>(1, ep);
  out.tp = traces::PlaceGroup(groups.TpGroup(0), domain);
  out.ep = traces::PlaceGroup(groups.EpGroup(0), domain);
  // The shard group: dp ranks strided by tp (its cp ranks among them).
  traces::Layout shard;
  shard.tp = groups.tp;
  shard.dp = std::max<int64_t>(1, zero_shards);
  shard.zero_stage = 3;
  out.shard = traces::PlaceGroup(shard.ShardGroup(0), domain);
  // The routed experts' shard group: the ranks of the shard group with this
  // rank's expert index (every ep-th, strided by tp).
  shard.ep = std::max<int64_t>(1, ep);
  out.expert_shard =
      shard.dp % shard.ep == 0 ? traces::PlaceGroup(shard.ExpertDpGroup(0), domain) : out.shard;
  // The cp ring: cp ranks strided by tp.
  traces::Layout context;
  context.tp = groups.tp;
  context.cp = std::max<int64_t>(1, cp);
  out.cp = traces::PlaceGroup(context.CpGroup(0), domain);
  return out;
}

// Group placements kept per thread before the memo starts over.
constexpr size_t kMaxMemoizedGroups = 4096;

// Memoized per thread (a model is built for every simulation; a shard group
// of thousands of ranks takes as many to enumerate and sort).
const OpGroups& PlaceOpGroups(int64_t tp, int64_t ep, int64_t zero_shards, int64_t cp,
                              int64_t domain) {
  const std::array<int64_t, 5> key{tp, ep, zero_shards, cp, domain};
  thread_local std::map<std::array<int64_t, 5>, OpGroups> memo;
  if (const auto it = memo.find(key); it != memo.end()) return it->second;
  if (memo.size() >= kMaxMemoizedGroups) memo.clear();
  return memo.emplace(key, ComputeOpGroups(tp, ep, zero_shards, cp, domain)).first->second;
}

}  // namespace

OpCostModel::OpCostModel(const HardwareOptions& hw, const traces::Header& header,
                         bool use_trace_measurements)
    : OpCostModel(hw, std::max<int64_t>(1, header.tp), header.dtype, use_trace_measurements,
                  std::max<int64_t>(1, header.ep), std::max<int64_t>(1, header.zero_shards),
                  std::max<int64_t>(1, header.cp), header.fp8, header.attention_kernel) {}

OpCostModel::OpCostModel(const HardwareOptions& hw, int64_t tp, const std::string& dtype,
                         bool use_trace_measurements, int64_t ep, int64_t zero_shards, int64_t cp,
                         const std::string& fp8, const std::string& attention_kernel)
    : hw_(hw), use_trace_measurements_(use_trace_measurements) {
  if (const auto it = hw.gpu.attention_kernels.find(attention_kernel);
      !attention_kernel.empty() && it != hw.gpu.attention_kernels.end()) {
    attention_kernel_ = &it->second;
  }
  const OpGroups& g = PlaceOpGroups(tp, ep, zero_shards, cp, DomainGpus(hw));
  tp_group_ = g.tp;
  ep_group_ = g.ep;
  shard_group_ = g.shard;
  expert_shard_group_ = g.expert_shard;
  cp_group_ = g.cp;
  double tflops = hw.gpu.peak_tflops_fp16;
  if (dtype == "bf16") tflops = hw.gpu.peak_tflops_bf16;
  if (dtype == "fp32") tflops = hw.gpu.peak_tflops_fp32;
  peak_flops_ = tflops * kTera * hw.gpu.clock_scale;
  act_bytes_ = dtype == "fp32" ? 4 : 2;
  peak_fp8_flops_ =
      Fp8PeakTflops(hw.gpu, traces::ParseFp8Recipe(fp8).value_or(traces::Fp8Recipe::kOff)) * kTera *
      hw.gpu.clock_scale;
  for (const MeasuredOpTime& m : hw.measured_op_times) {
    if (m.gemm) {
      const GemmKey key{m.gemm->m, m.gemm->n, m.gemm->k, m.gemm->batch};
      if (m.dtype == "fp8") {
        gemm_fp8_times_[key] = m.ns;
        continue;
      }
      if (!m.dtype.empty() && m.dtype != dtype) continue;
      gemm_times_[key] = m.ns;
    } else {
      bytes_times_[m.kind].emplace_back(m.bytes, m.ns);
    }
  }
  for (auto& [kind, v] : bytes_times_) std::sort(v.begin(), v.end());
}

const traces::GroupPlacement& OpCostModel::GroupOf(traces::CollectiveGroup over) const {
  switch (over) {
    case traces::CollectiveGroup::kExpertParallel:
      return ep_group_;
    case traces::CollectiveGroup::kShard:
      return shard_group_;
    case traces::CollectiveGroup::kExpertShard:
      return expert_shard_group_;
    case traces::CollectiveGroup::kContext:
      return cp_group_;
    case traces::CollectiveGroup::kTensorParallel:
      break;
  }
  return tp_group_;
}

int64_t OpCostModel::RooflineNs(const traces::Op& op) const {
  return RooflineOnNs(op, hw_.gpu.sm_count);
}

int64_t OpCostModel::OpTimeBesideNs(const traces::Op& op, int sms_held) const {
  const int sms = hw_.gpu.sm_count - sms_held;
  const bool compute = op.kind == traces::OpKind::kGemm || op.kind == traces::OpKind::kAttention;
  if (sms_held <= 0 || hw_.gpu.sm_count <= 0 || !compute || sms <= 0) return OpTimeNs(op);
  const int64_t overhead = CeilSecondsToNs(hw_.gpu.op_overhead_us * 1e-6);
  const int64_t measured = MeasuredNs(op);
  if (measured < 0) return RooflineOnNs(op, sms);
  const auto full = static_cast<double>(RooflineOnNs(op, hw_.gpu.sm_count) - overhead);
  const auto fewer = static_cast<double>(RooflineOnNs(op, sms) - overhead);
  return (full > 0 ? static_cast<int64_t>(std::ceil(static_cast<double>(measured) * fewer / full))
                   : measured) +
         overhead;
}

int OpCostModel::CollectiveSms(const traces::Op& op) const {
  if (op.kind != traces::OpKind::kCollective) return 0;
  const traces::CollectiveGroup over = traces::GroupOfCollective(op);
  if (over == traces::CollectiveGroup::kContext) return 0;
  return GroupCollectiveSms(GroupOf(over), hw_.interconnect);
}

int64_t OpCostModel::RooflineOnNs(const traces::Op& op, int sms) const {
  using traces::OpKind;
  // The share of the GPU's SMs the op runs on (1 without an SM count).
  const double share = hw_.gpu.sm_count > 0 && sms > 0
                           ? static_cast<double>(sms) / static_cast<double>(hw_.gpu.sm_count)
                           : 1.0;
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  const double mem_bw = hw_.gpu.memory_GBps * kGiga;
  const int64_t overhead = CeilSecondsToNs(hw_.gpu.op_overhead_us * 1e-6);
  switch (op.kind) {
    case OpKind::kSend:
    case OpKind::kRecv:
      return 0;
    case OpKind::kCollective: {
      const CollectiveKind kind = ClassifyCollective(op);
      const traces::CollectiveGroup over = traces::GroupOfCollective(op);
      const traces::GroupPlacement& group = GroupOf(over);
      if (group.ranks <= 1) return 0;
      const int64_t comm =
          GroupCollectiveNs(kind, CollectivePayloadBytes(op), group, hw_.interconnect);
      if (op.tp_overlap) {
        return ExposedNs(*op.tp_overlap, comm, group.ranks, CollectiveSms(op)) + overhead;
      }
      return comm + overhead;
    }
    case OpKind::kAttention:
      if (attention_kernel_ != nullptr && op.attention) {
        const double memory = bytes / (mem_bw * Efficiency(hw_.gpu.memory_efficiency, bytes));
        return CeilSecondsToNs(std::max(AttentionKernelSeconds(op) / share, memory)) + overhead;
      }
      [[fallthrough]];
    case OpKind::kGemm: {
      const bool fp8 = op.kind == OpKind::kGemm && op.gemm && op.gemm->fp8 && peak_fp8_flops_ > 0;
      const auto& curve = op.kind != OpKind::kGemm ? hw_.gpu.attention_efficiency
                          : fp8 && !hw_.gpu.gemm_fp8_efficiency.empty()
                              ? hw_.gpu.gemm_fp8_efficiency
                              : hw_.gpu.gemm_efficiency;
      const double peak = fp8 ? peak_fp8_flops_ : peak_flops_;
      const double flops = static_cast<double>(op.flops);
      // The curve is the full-wave figure; a gemm's shape takes its share.
      const double shape =
          op.kind == OpKind::kGemm && op.gemm ? GemmShapeEfficiency(*op.gemm, sms) : 1.0;
      const double compute = flops / (peak * share * Efficiency(curve, flops) * shape);
      // A GEMM of low arithmetic intensity (attention's batched QK^T and AV
      // with a head-sized k or n) is bound by the bandwidth kernels reach,
      // not the datasheet's: the memory curve, as for elementwise kinds.
      const double memory = bytes / (mem_bw * Efficiency(hw_.gpu.memory_efficiency, bytes));
      return CeilSecondsToNs(std::max(compute, memory)) + overhead;
    }
    default: {
      const double eff = Efficiency(hw_.gpu.memory_efficiency, bytes);
      const double compute = static_cast<double>(op.flops) / peak_flops_;
      return CeilSecondsToNs(std::max(compute, bytes / (mem_bw * eff))) + overhead;
    }
  }
}

double OpCostModel::AttentionKernelSeconds(const traces::Op& op) const {
  const AttentionKernelCurves& k = *attention_kernel_;
  // The backward kernel on its own curves where the hardware gives them, else
  // the forward's stand for both.
  const bool backward = op.phase == traces::Phase::kBackward && !k.backward.empty();
  const std::vector<EfficiencyPoint>& full = backward ? k.backward : k.forward;
  const std::vector<EfficiencyPoint>& causal = backward ? k.backward_causal : k.forward_causal;
  double flops = static_cast<double>(op.flops);  // every (query, key) pair
  const std::vector<EfficiencyPoint>* curve = &full;
  switch (op.attention->mask) {
    case traces::AttentionMask::kFull:
      break;
    case traces::AttentionMask::kHalf:
      flops /= 2;
      break;
    case traces::AttentionMask::kCausal:
      // Without a causal curve: every pair at the unmasked rate, an upper bound.
      if (!causal.empty()) {
        flops /= 2;
        curve = &causal;
      }
      break;
  }
  return flops / (peak_flops_ * Efficiency(*curve, static_cast<double>(op.attention->seq_len)));
}

traces::Op OpCostModel::GemmOp(const traces::GemmDims& dims) const {
  traces::Op gemm;
  gemm.kind = traces::OpKind::kGemm;
  gemm.gemm = dims;
  gemm.flops = 2 * dims.m * dims.n * dims.k * dims.batch;
  // Operands in FP8 or the trace's dtype, the output in the trace's dtype
  // (an FP8 GEMM's is 16-bit: FP8 needs a 16-bit trace).
  const int64_t in_bytes = dims.fp8 ? 1 : act_bytes_;
  gemm.bytes_read = (dims.m * dims.k + dims.k * dims.n) * dims.batch * in_bytes;
  gemm.bytes_written = dims.m * dims.n * dims.batch * act_bytes_;
  return gemm;
}

int64_t OpCostModel::GemmNs(const traces::GemmDims& dims) const {
  const int64_t overhead = CeilSecondsToNs(hw_.gpu.op_overhead_us * 1e-6);
  return OpTimeNs(GemmOp(dims)) - overhead;
}

int64_t OpCostModel::ExposedNs(const traces::TpOverlap& overlap, int64_t comm_ns, int64_t ranks,
                               int sms_held) const {
  const double comm = static_cast<double>(comm_ns);
  const double gemm = static_cast<double>(GemmNs(overlap.gemm));
  double exposed = comm;
  switch (overlap.method) {
    case traces::TpOverlapMethod::kRingExchange: {
      // ranks GEMM chunks, each on the shard at hand while the next arrives
      // over one of the ring's ranks - 1 steps (on the copy engines: TE's
      // use_ce, no SMs taken).
      const double steps = static_cast<double>(ranks - 1);
      const double step = comm / steps;
      const double chunk = gemm / static_cast<double>(ranks);
      exposed = steps * std::max(0.0, step - chunk);
      break;
    }
    case traces::TpOverlapMethod::kPipeline: {
      // kTpOverlapSplits GEMM chunks on the SMs the reduce-scatter leaves
      // (set_sm_margin), each chunk's reduce-scatter beside the next chunk:
      // the last one's is exposed, and any that outlast a chunk.
      const int64_t sms = hw_.gpu.sm_count;
      const double slow = sms > kTpOverlapCommSms ? static_cast<double>(sms) /
                                                        static_cast<double>(sms - kTpOverlapCommSms)
                                                  : 1.0;
      const double n = static_cast<double>(kTpOverlapSplits);
      const double chunk = gemm * slow / n;
      const double rs = comm / n;
      const double total = chunk + (n - 1) * std::max(chunk, rs) + rs;
      exposed = total - gemm;
      break;
    }
    case traces::TpOverlapMethod::kBulk:
      // The whole collective beside the whole GEMM.
      exposed = std::max(0.0, comm - gemm);
      break;
    case traces::TpOverlapMethod::kAsync: {
      // NCCL's collective beside the whole GEMM, which runs on the SMs its
      // channels leave while it runs (gemm_beside), at full speed after: the
      // GEMM outlasts it by gemm − comm · gemm / gemm_beside, and is exposed
      // comm · (1 − gemm / gemm_beside); else the collective is, comm − gemm.
      const int64_t overhead = CeilSecondsToNs(hw_.gpu.op_overhead_us * 1e-6);
      const double gemm_beside =
          static_cast<double>(OpTimeBesideNs(GemmOp(overlap.gemm), sms_held) - overhead);
      const double slowed = gemm_beside > 0 ? comm * (1.0 - gemm / gemm_beside) : 0.0;
      exposed = std::max(comm - gemm, slowed);
      break;
    }
  }
  return CeilSecondsToNs(std::max(0.0, exposed) * 1e-9);
}

int64_t OpCostModel::OpTimeNs(const traces::Op& op) const {
  // Measured times are the ops' own durations; the per-op issue overhead comes on top.
  const int64_t overhead = CeilSecondsToNs(hw_.gpu.op_overhead_us * 1e-6);
  const int64_t measured = MeasuredNs(op);
  return measured >= 0 ? measured + overhead : RooflineNs(op);
}

int64_t OpCostModel::MeasuredNs(const traces::Op& op) const {
  if (use_trace_measurements_ && op.measured_ns) return *op.measured_ns;
  if (op.kind == traces::OpKind::kGemm && op.gemm) {
    const auto& table = op.gemm->fp8 ? gemm_fp8_times_ : gemm_times_;
    auto it = table.find({op.gemm->m, op.gemm->n, op.gemm->k, op.gemm->batch});
    if (it != table.end()) return it->second;
  } else if (auto it = bytes_times_.find(op.kind); it != bytes_times_.end()) {
    const auto& v = it->second;
    const int64_t b = op.bytes_read + op.bytes_written;
    if (b <= v.front().first) return v.front().second;
    if (b >= v.back().first) {
      // Beyond the largest measurement, scale with bytes (memory-bound).
      return v.back().first > 0 ? static_cast<int64_t>(std::ceil(
                                      static_cast<double>(v.back().second) *
                                      static_cast<double>(b) / static_cast<double>(v.back().first)))
                                : v.back().second;
    }
    auto hi = std::lower_bound(v.begin(), v.end(), std::make_pair(b, int64_t{0}));
    auto lo = hi - 1;
    const double f =
        static_cast<double>(b - lo->first) / static_cast<double>(hi->first - lo->first);
    return static_cast<int64_t>(std::ceil(static_cast<double>(lo->second) +
                                          f * static_cast<double>(hi->second - lo->second)));
  }
  return -1;
}

}  // namespace ssdtrain::sim

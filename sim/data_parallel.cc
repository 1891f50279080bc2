#include "sim/data_parallel.h"

#include <algorithm>
#include <map>
#include <utility>

#include "sim/op_cost.h"
#include "sim/topology.h"
#include "traces/dp_buckets.h"

namespace ssdtrain::sim {
namespace {

// When each of the stage's buckets (traces/dp_buckets.h) is ready, from the
// start of its simulated micro-batch's backward: the end of the op after
// which it is complete, within that backward.
std::vector<BucketReady> BucketsReady(const traces::BucketTable& table, const StageResult& r,
                                      const LayoutLinks& links) {
  const int64_t backward_ns =
      std::max<int64_t>(0, r.compute_end_ns - r.backward_start_ns - r.optimizer_ns);
  std::vector<BucketReady> out;
  for (const traces::GradientBucket& b : table.buckets) {
    int64_t ready = backward_ns;
    if (b.complete_after != traces::kNoOp &&
        r.ops[static_cast<size_t>(b.complete_after)].end_ns >= 0) {
      ready = std::clamp<int64_t>(
          r.ops[static_cast<size_t>(b.complete_after)].end_ns - r.backward_start_ns, 0,
          backward_ns);
    }
    const bool experts = b.group == traces::BucketGroup::kExpertDataParallel;
    out.push_back(
        BucketReady{ready, b.bytes, experts ? links.expert_buckets : links.dense_buckets});
  }
  return out;
}

// What the SMs of the buckets' collectives (GroupCollectiveSms of each
// bucket's group) cost the compute of the stage's last backward beside them,
// first order: each of its compute ops, placed from `begin` as the simulated
// micro-batch ran it, slowed while a bucket's span runs by OpTimeBesideNs /
// OpTimeNs. Per op: (when it ended, what it lost). The compute stream's ops
// run in trace order and the link's spans one after another, so one pass
// over both.
std::vector<std::pair<int64_t, int64_t>> LostToBuckets(const StageRun& run, int64_t begin,
                                                       const std::vector<BucketReady>& ready,
                                                       const std::vector<BucketSpan>& spans,
                                                       const HardwareOptions& hw) {
  std::vector<std::pair<int64_t, int64_t>> lost;
  std::vector<int> sms(spans.size(), 0);
  bool any = false;
  for (size_t j = 0; j < spans.size() && j < ready.size(); ++j) {
    if (spans[j].end_ns > spans[j].start_ns) {
      sms[j] = GroupCollectiveSms(ready[j].group, hw.interconnect);
    }
    any = any || sms[j] > 0;
  }
  if (!any) return lost;
  const traces::Trace& trace = *run.trace;
  const StageResult& r = *run.result;
  const OpCostModel cost(hw, trace.header);
  size_t first = 0;  // the first span not over before the op starts
  for (const traces::Op& op : trace.ops) {
    const auto i = static_cast<size_t>(op.id);
    if (op.stream != 0 || op.phase != traces::Phase::kBackward || i >= r.ops.size() ||
        r.ops[i].start_ns < r.backward_start_ns) {
      continue;
    }
    const int64_t from = begin + r.ops[i].start_ns - r.backward_start_ns;
    const int64_t to = begin + r.ops[i].end_ns - r.backward_start_ns;
    while (first < spans.size() && spans[first].end_ns <= from) ++first;
    double ns = 0, plain = -1;  // its time at full speed, once it overlaps a span
    for (size_t j = first; j < spans.size(); ++j) {
      if (sms[j] <= 0) continue;           // an empty span, at its bucket's readiness
      if (spans[j].start_ns >= to) break;  // the link's spans run in order
      const int64_t overlap = std::min(to, spans[j].end_ns) - std::max(from, spans[j].start_ns);
      if (overlap <= 0) continue;
      if (plain < 0) plain = static_cast<double>(cost.OpTimeNs(op));
      if (plain <= 0) break;
      ns += static_cast<double>(overlap) *
            (static_cast<double>(cost.OpTimeBesideNs(op, sms[j])) / plain - 1.0);
    }
    if (ns >= 1) lost.emplace_back(to, static_cast<int64_t>(ns));
  }
  return lost;
}

}  // namespace

int64_t ParameterBytes(const traces::Trace& trace) {
  int64_t bytes = 0;
  for (const traces::Tensor& t : trace.tensors) {
    if (!t.alias_of && t.kind == traces::TensorKind::kWeight) bytes += t.bytes;
  }
  return bytes;
}

int64_t ExpertParameterBytes(const traces::Trace& trace) {
  int64_t bytes = 0;
  for (const traces::Tensor& t : trace.tensors) {
    if (!t.alias_of && t.kind == traces::TensorKind::kWeight && traces::IsRoutedExpert(t)) {
      bytes += t.bytes;
    }
  }
  return bytes;
}

int64_t StageParamAllGatherNs(const traces::Trace& trace, const traces::Layout& layout,
                              const LayoutLinks& links, const InterconnectOptions& ic) {
  const int64_t zero = layout.zero_stage;
  if (zero != 1 && zero != 2) return 0;
  const int64_t experts = layout.ep > 1 ? ExpertParameterBytes(trace) : 0;
  return ParamAllGatherNs(zero, ParameterBytes(trace) - experts, ParamGatherGroup(zero, links),
                          ic) +
         (experts == 0 ? 0
                       : ParamAllGatherNs(zero, experts, ExpertParamGatherGroup(zero, links), ic));
}

DataParallelStep SimulateDataParallel(const std::vector<StageRun>& stages,
                                      const PipelineResult& pipe, const traces::Layout& layout,
                                      traces::DdpImpl ddp, const HardwareOptions& hw) {
  const int64_t dp = layout.dp, zero_stage = layout.zero_stage;
  const CollectiveKind kind = GradientCollective(zero_stage);
  DataParallelStep out;
  out.gradients_done_ns = pipe.makespan_ns;
  out.buckets.resize(stages.size());
  // The bucket readiness of each distinct stage result (alone or sharing the SSD).
  std::map<const traces::Trace*, traces::BucketTable> table_of;
  std::map<std::pair<const StageResult*, int64_t>, std::vector<BucketReady>> ready_of;
  for (size_t s = 0; s < stages.size(); ++s) {
    const StageRun& run = stages[s];
    auto table = table_of.find(run.trace);
    if (table == table_of.end()) {
      table = table_of.emplace(run.trace, traces::GradientBuckets(*run.trace, dp)).first;
    }
    const LayoutLinks links = PlaceLayout(layout, hw, static_cast<int64_t>(s));
    // Stages placed alike share their readiness (keyed by the stage's first
    // rank's domain offset, which decides the placement).
    const int64_t placement_key =
        layout.RankOf({0, 0, 0, static_cast<int64_t>(s)}) % DomainGpus(hw);
    auto it = ready_of.find({run.result, placement_key});
    if (it == ready_of.end()) {
      it = ready_of
               .emplace(std::pair{run.result, placement_key},
                        BucketsReady(table->second, *run.result, links))
               .first;
    }
    const int64_t begin = pipe.last_backward_start_ns[s];
    const int64_t end = pipe.stage_end_ns[s];
    const bool after_backward = traces::BucketsWaitForBackward(ddp);
    std::vector<BucketReady> ready;
    for (const BucketReady& x : it->second) {
      ready.push_back(
          BucketReady{after_backward ? end : std::min(end, begin + x.ready_ns), x.bytes, x.group});
    }
    std::vector<BucketSpan>& spans = out.buckets[s];
    // Over dp × cp ranks (cp's ranks hold the same weights: their gradients
    // are summed too, Megatron's dp-cp group).
    spans = dp * layout.cp > 1 ? BucketCollectives(ready, kind, hw.interconnect)
                               : std::vector<BucketSpan>{};
    // The backward beside them runs on the SMs they leave: it ends later by
    // what that costs, and each bucket is ready later by what the ops before
    // its readiness lost (first order: the spans they are priced against are
    // the unslowed ones).
    int64_t stage_end = end;
    if (!after_backward && !spans.empty()) {
      const auto lost = LostToBuckets(run, begin, ready, spans, hw);
      int64_t total = 0;
      for (const auto& [at, ns] : lost) total += ns;
      if (total > 0) {
        for (BucketReady& x : ready) {
          int64_t before = 0;
          for (const auto& [at, ns] : lost) before += at <= x.ready_ns ? ns : 0;
          x.ready_ns += before;
        }
        spans = BucketCollectives(ready, kind, hw.interconnect);
        stage_end = end + total;
        out.bucket_sm_ns = std::max(out.bucket_sm_ns, total);
      }
    }
    out.gradients_done_ns = std::max(out.gradients_done_ns, stage_end);
    int64_t busy = 0;
    for (const BucketSpan& b : spans) {
      busy += b.end_ns - b.start_ns;
      out.gradients_done_ns = std::max(out.gradients_done_ns, b.end_ns);
    }
    out.busy_ns = std::max(out.busy_ns, busy);
    const int64_t gather = StageParamAllGatherNs(*run.trace, layout, links, hw.interconnect);
    out.stage_all_gather_ns.push_back(gather);
    out.param_all_gather_ns = std::max(out.param_all_gather_ns, gather);
  }
  return out;
}

}  // namespace ssdtrain::sim

#include "sim/detail/planner_layouts.h"

#include <algorithm>
#include <set>

#include "sim/collective.h"
#include "sim/data_parallel.h"
#include "sim/op_cost.h"
#include "sim/pipeline.h"
#include "sim/topology.h"
#include "traces/collective_kind.h"
#include "traces/dp_buckets.h"
#include "traces/layout.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim {

TraceShape TraceShape::Of(const traces::Plan& plan, int64_t stage) {
  return TraceShape{plan.micro_batch,   plan.tp, plan.pp,       stage,   plan.dp,
                    plan.zero_stage,    plan.ep, plan.dp_shard, plan.cp, plan.pp_first_layers,
                    plan.pp_last_layers};
}

}  // namespace ssdtrain::sim

namespace ssdtrain::sim::detail {

Result<TraceCache::Entry*> TraceCache::Find(const TraceShape& shape) {
  auto it = cache_.find(shape);
  if (it == cache_.end()) {
    SSDTRAIN_ASSIGN_OR_RETURN(traces::Trace t, provider_(shape));
    it = cache_.emplace(shape, Entry{std::make_unique<traces::Trace>(std::move(t)), 0, {}}).first;
  }
  return &it->second;
}

Result<const traces::Trace*> TraceCache::Get(const TraceShape& shape) {
  SSDTRAIN_ASSIGN_OR_RETURN(Entry * e, Find(shape));
  return static_cast<const traces::Trace*>(e->trace.get());
}

Result<StageTrace> TraceCache::GetStage(const TraceShape& shape) {
  SSDTRAIN_ASSIGN_OR_RETURN(Entry * e, Find(shape));
  if (!e->storages) {
    SSDTRAIN_ASSIGN_OR_RETURN(traces::StoragePlan storages,
                              traces::ResolveStorages(*e->trace, "plan"));
    e->fingerprint = traces::Fingerprint(*e->trace);
    e->storages = std::make_unique<traces::StoragePlan>(std::move(storages));
  }
  return StageTrace{e->trace.get(), e->fingerprint, e->storages.get()};
}

namespace {

// The ZeRO stages a layout of `dp` ranks over which the state can be sharded
// (dp × cp) is tried with: the pin, else 0 and (more than one, where sharding
// changes anything) 1, 2 and 3.
std::vector<int64_t> ZeroStages(const PlannerOptions& o, int64_t dp) {
  if (o.zero_stage) return {*o.zero_stage};
  if (dp > 1) return {0, 1, 2, 3};
  return {0};
}

// The expert-parallel degrees a layout of `ranks` = cp · dp ranks per stage
// and tp index is tried with (the expert grid regroups them, traces/layout.h):
// the pin, else (a MoE model) every power of two dividing the experts and
// those ranks; 1 for a dense model.
std::vector<int64_t> ExpertDegrees(const PlannerOptions& o, int64_t ranks) {
  if (o.ep) return ranks % *o.ep == 0 ? std::vector<int64_t>{*o.ep} : std::vector<int64_t>{};
  std::vector<int64_t> eps;
  for (int64_t ep = 1; ep <= std::max<int64_t>(o.experts, 1); ep *= 2) {
    if (ranks % ep == 0 && (o.experts == 0 || o.experts % ep == 0)) eps.push_back(ep);
  }
  return eps;
}

// The context-parallel degrees a layout of tensor-parallel degree `tp` is
// tried with (PlannerOptions::cp).
std::vector<int64_t> ContextDegrees(const PlannerOptions& o, int64_t tp) {
  auto splits = [&](int64_t cp) {
    traces::Layout l;
    l.tp = tp;
    l.cp = cp;
    return traces::SequenceSplitError(l, o.seq_len, o.sequence_parallel).empty();
  };
  if (o.cp) return splits(*o.cp) ? std::vector<int64_t>{*o.cp} : std::vector<int64_t>{};
  std::vector<int64_t> cps = {1};
  if (!o.cp_refusal.empty() || o.seq_len <= 0) return cps;
  for (int64_t cp = 2; cp <= kMaxContextParallel && o.seq_len / cp >= kMinContextTokens; cp *= 2) {
    if (splits(cp)) cps.push_back(cp);
  }
  return cps;
}

// Unset: 1F1B and interleaved (GPipe is never faster than 1F1B here).
std::vector<traces::Schedule> SchedulesToTry(const PlannerOptions& o) {
  if (!o.schedule) return {traces::Schedule::kOneFOneB, traces::Schedule::kInterleaved};
  Result<traces::Schedule> s = traces::ParseSchedule(*o.schedule);
  return {s.ok() ? *s : traces::Schedule::kOneFOneB};
}

}  // namespace

std::vector<int64_t> VirtualStagesToTry(const PlannerOptions& o, int64_t pp, int64_t m) {
  std::vector<int64_t> vs;
  if (o.virtual_stages) {
    vs.push_back(*o.virtual_stages);
  } else if (pp >= 2) {
    for (int64_t v = 2; v <= kMaxVirtualStages && v <= o.layers / pp; ++v) vs.push_back(v);
  }
  std::erase_if(vs,
                [&](int64_t v) { return !traces::InterleavedError(pp, m, v, o.layers).empty(); });
  return vs;
}

std::optional<std::pair<int64_t, int64_t>> SplitFor(const PlannerOptions& o, int64_t pp) {
  if (o.pp_first_layers || o.pp_last_layers) {
    return std::pair{o.pp_first_layers.value_or(0), o.pp_last_layers.value_or(0)};
  }
  if (pp >= 1 && o.layers % pp == 0) return std::pair<int64_t, int64_t>{0, 0};
  return traces::DefaultUnevenSplit(o.layers, pp);
}

namespace {

// `l` under each schedule the search tries.
void AddSchedules(const PlannerOptions& o, const Layout& l, std::vector<Layout>& layouts) {
  // Its middle stages differ (PlannerOptions::pp_refusal): stage 1 cannot
  // stand for them.
  auto refused = [&](const Layout& x) {
    return o.pp_refusal && x.pp > 1 && !o.pp_refusal(x.Ranks()).empty();
  };
  for (traces::Schedule s : SchedulesToTry(o)) {
    if (s != traces::Schedule::kInterleaved) {
      if (refused(l)) continue;
      layouts.push_back(l);
      layouts.back().schedule = s;
      continue;
    }
    // Not with an uneven split (traces::PipelineSplitError).
    if (l.pp_first_layers != 0 || l.pp_last_layers != 0) continue;
    // The most chunks: the least bubble and memory (the winner tries the rest).
    const std::vector<int64_t> vs = VirtualStagesToTry(o, l.pp, l.m);
    if (vs.empty()) continue;
    Layout x = l;
    x.schedule = s;
    x.virtual_stages = vs.back();
    if (refused(x)) continue;
    layouts.push_back(x);
  }
}

}  // namespace

std::vector<Layout> EnumerateLayouts(const PlannerOptions& o, const HardwareOptions& hw) {
  std::vector<Layout> layouts;
  const int64_t max_tp = o.tp ? *o.tp : std::min<int64_t>(hw.gpus_per_node, o.gpus);
  for (int64_t tp = o.tp.value_or(1); tp <= max_tp; tp *= 2) {
    if (o.heads > 0 && o.heads % tp != 0) continue;
    if (o.tp_refusal && !o.tp_refusal(tp).empty()) continue;
    for (int64_t cp : ContextDegrees(o, tp)) {
      for (int64_t pp = o.pp.value_or(1); pp <= o.pp.value_or(o.layers); ++pp) {
        const std::optional<std::pair<int64_t, int64_t>> split = SplitFor(o, pp);
        if (!split || o.gpus % (tp * cp * pp) != 0) continue;
        const int64_t dp = o.gpus / (tp * cp * pp);
        if (o.dp && dp != *o.dp) continue;
        std::vector<int64_t> mbs;
        if (o.micro_batch) {
          mbs.push_back(*o.micro_batch);
        } else {
          for (int64_t mb = 1; mb <= 16; mb *= 2) mbs.push_back(mb);
        }
        for (int64_t mb : mbs) {
          int64_t m = o.num_micro_batches.value_or(2 * pp);
          if (o.global_batch > 0) {
            if (o.global_batch % (mb * dp) != 0) continue;
            if (o.num_micro_batches && o.global_batch != mb * dp * m) continue;
            m = o.global_batch / (mb * dp);
          }
          for (int64_t ep : ExpertDegrees(o, cp * dp)) {
            for (int64_t zero : ZeroStages(o, dp * cp)) {
              if (!o.zero_stage && zero == 3 && pp > 1) continue;  // PlannerOptions::zero_stage
              if (traces::Unmodelled(traces::Layout{.cp = cp,
                                                    .dp = dp,
                                                    .ep = ep,
                                                    .zero_stage = zero,
                                                    .dp_shard = o.dp_shard.value_or(0)},
                                     !o.fp8.empty())) {
                continue;  // unpinned: CheckUnmodelledPins refused such pins
              }
              if (o.dp_shard && (dp % *o.dp_shard != 0 || zero == 0)) continue;
              // HSDP: an ep group inside each shard group (traces::ValidateLayout).
              if (o.dp_shard && *o.dp_shard != dp && (cp * *o.dp_shard) % ep != 0) continue;
              Layout l{mb, tp, pp, dp, m, cp, zero};
              l.ep = ep;
              l.dp_shard = o.dp_shard.value_or(0);
              l.pp_first_layers = split->first;
              l.pp_last_layers = split->second;
              AddSchedules(o, l, layouts);
            }
          }
        }
      }
    }
  }
  return layouts;
}

int64_t StaticBytes(const traces::Trace& t) {
  int64_t bytes = 0;
  for (const traces::Tensor& x : t.tensors) {
    if (x.alias_of) continue;
    if (x.kind == traces::TensorKind::kWeight || x.kind == traces::TensorKind::kOptimizerState ||
        traces::IsWeightGradient(t, x)) {
      bytes += x.bytes;
    }
  }
  return bytes;
}

Result<BoundedLayouts> BoundLayouts(std::vector<Layout> layouts, TraceCache& cache,
                                    const HardwareOptions& hw, int64_t budget,
                                    traces::DdpImpl ddp) {
  std::vector<Layout> feasible;
  int64_t min_static = INT64_MAX;
  // A stage's static bytes do not depend on its micro-batch (StaticBytes): a
  // shape over the budget at one micro-batch is over it at every other, and
  // those traces are not built (most of a large model's layouts are such).
  std::set<TraceShape> over_budget;  // shapes at micro-batch 0
  auto any_micro_batch = [](const Layout& l) {
    TraceShape s = l.Shape(0);
    s.micro_batch = 0;
    return s;
  };
  for (Layout& l : layouts) {
    if (over_budget.count(any_micro_batch(l)) != 0) continue;
    SSDTRAIN_ASSIGN_OR_RETURN(const traces::Trace* t, cache.Get(l.Shape(0)));
    OpCostModel cost(hw, t->header);
    int64_t compute = 0, backward = 0, side = 0, ring = 0, grads = 0, expert_grads = 0;
    for (const traces::Op& op : t->ops) {
      if (op.phase == traces::Phase::kOptimizer) continue;
      const int64_t ns = cost.OpTimeNs(op);
      if (op.stream != 0) {  // beside compute, one at a time on their link
        (traces::GroupOfCollective(op) == traces::CollectiveGroup::kContext ? ring : side) += ns;
        continue;
      }
      compute += ns;
      if (op.phase == traces::Phase::kBackward) backward += ns;
    }
    for (const traces::Tensor& x : t->tensors) {
      if (!x.alias_of && traces::IsWeightGradient(*t, x)) {
        (traces::IsRoutedExpert(x) ? expert_grads : grads) += x.bytes;
      }
    }
    const int64_t static_bytes = StaticBytes(*t);
    min_static = std::min(min_static, static_bytes);
    if (static_bytes > budget) {
      over_budget.insert(any_micro_batch(l));
      continue;
    }
    // The gradient exchange starts with the last micro-batch's backward at the
    // earliest (Simulate buckets it under that backward): only what outlasts
    // that backward is certain to add to the step, all of it under local DDP
    // (it waits for that backward); ZeRO-1's parameter all-gather follows the
    // optimizer, all of it.
    // Each over its group where its ranks sit (sim/topology.h): the routed
    // experts' over the expert-data-parallel group (traces/dp_buckets.h).
    const LayoutLinks links = PlaceLayout(l.Ranks(), hw);
    const CollectiveKind kind = GradientCollective(l.zero_stage);
    const int64_t exchange =
        GroupCollectiveNs(kind, grads, links.dense_buckets, hw.interconnect) +
        (expert_grads == 0
             ? 0
             : GroupCollectiveNs(kind, expert_grads, links.expert_buckets, hw.interconnect));
    const int64_t gather = StageParamAllGatherNs(*t, l.Ranks(), links, hw.interconnect);
    // Interleaved: (m·v + pp − 1) chunks of compute / v each (sim/pipeline.h).
    const int64_t v = l.virtual_stages;
    const int64_t hidden = traces::BucketsWaitForBackward(ddp) ? 0 : backward;
    // The stage's side-stream collectives, m micro-batches' worth, one at a
    // time on its link: the step lasts at least as long as they do.
    const int64_t pipeline = std::max({(l.m * v + l.pp - 1) * compute / v, l.m * side, l.m * ring});
    const int64_t step = pipeline + std::max<int64_t>(0, exchange - hidden) + gather;
    const double tokens = static_cast<double>(l.micro_batch * l.m * l.dp * t->header.seq_len);
    l.bound_tokens_per_s = step > 0 ? tokens / (static_cast<double>(step) * 1e-9) : 0;
    feasible.push_back(l);
  }
  std::stable_sort(feasible.begin(), feasible.end(), [](const Layout& a, const Layout& b) {
    return a.bound_tokens_per_s > b.bound_tokens_per_s;
  });
  return BoundedLayouts{std::move(feasible), min_static};
}

}  // namespace ssdtrain::sim::detail

#include "sim/detail/planner_layouts.h"

#include <algorithm>

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

Result<const traces::Trace*> TraceCache::Get(const TraceShape& shape) {
  auto it = cache_.find(shape);
  if (it == cache_.end()) {
    SSDTRAIN_ASSIGN_OR_RETURN(traces::Trace t, provider_(shape));
    it = cache_.emplace(shape, std::make_unique<traces::Trace>(std::move(t))).first;
  }
  return static_cast<const traces::Trace*>(it->second.get());
}

namespace {

std::string Flag(const char* name, int64_t v) {
  return std::string(name) + " " + std::to_string(v);
}

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

// --virtual-stages and an interleaved --schedule against the other pins.
Status CheckInterleavedPins(const PlannerOptions& o) {
  const bool interleaved = o.schedule && *o.schedule == "interleaved";
  if (o.virtual_stages && !interleaved) {
    return Status::InvalidArgument(Flag("--virtual-stages", *o.virtual_stages) +
                                   ": needs --schedule interleaved" +
                                   (o.schedule ? ", got --schedule " + *o.schedule : ""));
  }
  if (!interleaved) return Status::Ok();
  std::string what = "--schedule interleaved";
  if (o.virtual_stages) what.append(1, ' ').append(Flag("--virtual-stages", *o.virtual_stages));
  if (o.virtual_stages && *o.virtual_stages < 2) {
    return Status::InvalidArgument(what + ": needs at least 2 model chunks per stage (" +
                                   "--virtual-stages 1 is --schedule 1f1b)");
  }
  if (o.pp && *o.pp < 2) {
    return Status::InvalidArgument(what + ": needs --pp 2 or more, got " + Flag("--pp", *o.pp));
  }
  if (o.pp && o.virtual_stages && o.layers % (*o.pp * *o.virtual_stages) != 0) {
    return Status::InvalidArgument(
        what + ": the model's " + std::to_string(o.layers) + " layers do not divide by " +
        Flag("--pp", *o.pp) + " x " + Flag("--virtual-stages", *o.virtual_stages) + " = " +
        std::to_string(*o.pp * *o.virtual_stages) +
        " (Megatron's --num-layers-per-virtual-pipeline-stage is layers / (pp x v))");
  }
  if (o.pp && o.num_micro_batches && *o.num_micro_batches % *o.pp != 0) {
    return Status::InvalidArgument(what + ": " + Flag("--num-micro-batches", *o.num_micro_batches) +
                                   " is not a multiple of " + Flag("--pp", *o.pp) +
                                   ", as Megatron-LM's interleaved schedule requires");
  }
  return Status::Ok();
}

// --ep against the model and the other pins.
Status CheckExpertPins(const PlannerOptions& o) {
  if (!o.ep || *o.ep == 1) return Status::Ok();
  const std::string ep = Flag("--ep", *o.ep);
  if (o.experts == 0) {
    return Status::InvalidArgument(ep + ": the model is dense (no routed experts to spread)");
  }
  if (o.experts % *o.ep != 0) {
    return Status::InvalidArgument(ep + ": does not divide the model's " +
                                   std::to_string(o.experts) + " experts");
  }
  const int64_t cp = o.cp.value_or(1);
  if (o.dp && (cp * *o.dp) % *o.ep != 0) {
    const std::string ranks =
        cp > 1 ? Flag("--cp", cp) + " x " + Flag("--dp", *o.dp) : Flag("--dp", *o.dp);
    return Status::InvalidArgument(ep + " x tp: does not divide " + ranks +
                                   " x tp (Megatron-Core's expert ranks; the experts are split "
                                   "over tp, so ep must divide " +
                                   (cp > 1 ? "cp x dp)" : "dp)"));
  }
  if (o.gpus % *o.ep != 0) {
    return Status::InvalidArgument(ep + ": does not divide " + Flag("--gpus", o.gpus));
  }
  if (o.dp_shard && (cp * *o.dp_shard) % *o.ep != 0 && (!o.dp || *o.dp_shard != *o.dp)) {
    return Status::InvalidArgument(
        ep + ": does not divide " + (cp > 1 ? Flag("--cp", cp) + " x " : std::string()) +
        Flag("--dp-shard", *o.dp_shard) +
        " (with HSDP the expert-parallel group is taken from one shard group's ranks)");
  }
  return Status::Ok();
}

// Pinned degrees the traces do not model together (traces::Unmodelled).
Status CheckUnmodelledPins(const PlannerOptions& o) {
  if (!o.zero_stage) return Status::Ok();
  traces::Layout l;
  l.ep = o.ep.value_or(1);
  l.zero_stage = *o.zero_stage;
  // HSDP where both are pinned (else the search passes over the layouts).
  l.dp = o.dp.value_or(o.dp_shard.value_or(1));
  l.dp_shard = o.dp_shard.value_or(0);
  const auto u = traces::Unmodelled(l, !o.fp8.empty());
  if (!u) return Status::Ok();
  const std::string other = u->field == "ep" ? Flag("--ep", l.ep) : "--fp8 " + o.fp8;
  return Status::InvalidArgument(other + " with " + Flag("--zero-stage", l.zero_stage) + ": " +
                                 u->why);
}

}  // namespace

// " (pinned: --tp 2 --pp 4)" for the pins that are set, else "".
std::string PinsText(const PlannerOptions& o) {
  std::string pins;
  auto add = [&](const char* name, const std::optional<int64_t>& v) {
    if (!v) return;
    pins.append(1, ' ');
    pins.append(Flag(name, *v));
  };
  add("--tp", o.tp);
  add("--cp", o.cp);
  add("--pp", o.pp);
  add("--dp", o.dp);
  add("--micro-batch", o.micro_batch);
  add("--num-micro-batches", o.num_micro_batches);
  add("--zero-stage", o.zero_stage);
  add("--dp-shard", o.dp_shard);
  add("--ep", o.ep);
  if (o.global_batch > 0) add("--global-batch", o.global_batch);
  if (o.schedule) pins.append(" --schedule ").append(*o.schedule);
  add("--virtual-stages", o.virtual_stages);
  if (pins.empty()) return pins;
  return std::string(" (pinned:").append(pins).append(")");
}

// Pins that no layout can satisfy, named by flag with the reason.
Status CheckPins(const PlannerOptions& o) {
  auto positive = [](const char* name, const std::optional<int64_t>& v) -> Status {
    if (v && *v < 1) return Status::InvalidArgument(Flag(name, *v) + ": must be >= 1");
    return Status::Ok();
  };
  SSDTRAIN_RETURN_IF_ERROR(positive("--tp", o.tp));
  SSDTRAIN_RETURN_IF_ERROR(positive("--pp", o.pp));
  SSDTRAIN_RETURN_IF_ERROR(positive("--dp", o.dp));
  SSDTRAIN_RETURN_IF_ERROR(positive("--micro-batch", o.micro_batch));
  SSDTRAIN_RETURN_IF_ERROR(positive("--num-micro-batches", o.num_micro_batches));
  SSDTRAIN_RETURN_IF_ERROR(positive("--ep", o.ep));
  SSDTRAIN_RETURN_IF_ERROR(CheckExpertPins(o));
  SSDTRAIN_RETURN_IF_ERROR(CheckUnmodelledPins(o));
  SSDTRAIN_RETURN_IF_ERROR(positive("--dp-shard", o.dp_shard));
  SSDTRAIN_RETURN_IF_ERROR(positive("--cp", o.cp));
  if (o.cp && *o.cp > 1) {
    if (!o.cp_refusal.empty()) {
      return Status::InvalidArgument(Flag("--cp", *o.cp) + ": " + o.cp_refusal);
    }
    traces::Layout split;
    split.tp = o.tp.value_or(1);
    split.cp = *o.cp;
    const std::string why = traces::SequenceSplitError(split, o.seq_len, o.sequence_parallel);
    if (!why.empty()) return Status::InvalidArgument(Flag("--cp", *o.cp) + ": " + why);
  }
  if (o.zero_stage && (*o.zero_stage < 0 || *o.zero_stage > 3)) {
    return Status::InvalidArgument(Flag("--zero-stage", *o.zero_stage) +
                                   ": expected 0, 1, 2 or 3 (1: the optimizer state sharded over "
                                   "dp; 2: the gradients too; 3: the weights too)");
  }
  if (o.dp_shard && o.zero_stage && *o.zero_stage == 0) {
    return Status::InvalidArgument(Flag("--dp-shard", *o.dp_shard) +
                                   ": needs --zero-stage 1, 2 or 3 (at 0 nothing is sharded)");
  }
  if (o.dp_shard && o.dp && *o.dp % *o.dp_shard != 0) {
    return Status::InvalidArgument(Flag("--dp-shard", *o.dp_shard) + ": does not divide " +
                                   Flag("--dp", *o.dp));
  }
  if (Result<traces::DdpImpl> d = traces::ParseDdpImpl(o.ddp, "--ddp"); !d.ok()) return d.status();
  if (o.schedule) {
    Result<PipelineSchedule> s = ParseSchedule(*o.schedule);
    if (!s.ok()) return s.status().WithPrefix("--schedule");
  }
  SSDTRAIN_RETURN_IF_ERROR(CheckInterleavedPins(o));
  const std::string gpus = Flag("--gpus", o.gpus);
  if (o.tp && o.tp_refusal) {
    if (const std::string why = o.tp_refusal(*o.tp); !why.empty()) {
      return Status::InvalidArgument(Flag("--tp", *o.tp) + ": " + why);
    }
  }
  if (o.tp && o.heads > 0 && o.heads % *o.tp != 0) {
    return Status::InvalidArgument(Flag("--tp", *o.tp) + ": does not divide the model's " +
                                   std::to_string(o.heads) + " attention heads");
  }
  if ((o.pp_first_layers || o.pp_last_layers) && !o.pp) {
    return Status::InvalidArgument(
        Flag(o.pp_first_layers ? "--pp-first-layers" : "--pp-last-layers",
             o.pp_first_layers ? *o.pp_first_layers : *o.pp_last_layers) +
        ": needs --pp (the split of the layers over a pinned pipeline)");
  }
  if ((o.pp_first_layers || o.pp_last_layers) && o.schedule && *o.schedule == "interleaved") {
    return Status::InvalidArgument(
        "--schedule interleaved: not modelled with an uneven pipeline split (--pp-first-layers, "
        "--pp-last-layers); use --schedule 1f1b or gpipe");
  }
  if (o.pp && (o.pp_first_layers || o.pp_last_layers)) {
    traces::Layout split;
    split.pp = *o.pp;
    split.pp_first_layers = o.pp_first_layers.value_or(0);
    split.pp_last_layers = o.pp_last_layers.value_or(0);
    if (o.virtual_stages) split.vp = *o.virtual_stages;
    if (const auto why = traces::PipelineSplitError(split, o.layers)) {
      const std::string field = why->field == "virtual_stages"    ? "--virtual-stages"
                                : why->field == "pp"              ? "--pp"
                                : why->field == "pp_first_layers" ? "--pp-first-layers"
                                                                  : "--pp-last-layers";
      return Status::InvalidArgument(field + ": " + why->why);
    }
  }
  if (o.pp && o.pp_refusal) {
    if (const auto split = SplitFor(o, *o.pp)) {
      traces::Layout l;
      l.pp = *o.pp;
      l.pp_first_layers = split->first;
      l.pp_last_layers = split->second;
      if (o.virtual_stages) l.vp = *o.virtual_stages;
      if (const std::string why = o.pp_refusal(l); !why.empty()) {
        return Status::InvalidArgument(Flag("--pp", *o.pp) + ": " + why);
      }
    }
  }
  if (o.pp && !(o.pp_first_layers || o.pp_last_layers) && !SplitFor(o, *o.pp)) {
    return Status::InvalidArgument(
        Flag("--pp", *o.pp) + ": does not divide the model's " + std::to_string(o.layers) +
        " layers, and no split with fewer blocks on the first and last stages gives each stage "
        "one (pin one with --pp-first-layers and --pp-last-layers)");
  }
  // The pinned degrees multiply to a divisor of the GPU count (all three: to it).
  int64_t product = 1;
  std::string named;
  for (auto [name, v] : {std::pair{"--tp", o.tp}, {"--cp", o.cp}, {"--pp", o.pp}, {"--dp", o.dp}}) {
    if (!v) continue;
    product *= *v;
    if (!named.empty()) named += " x ";
    named += Flag(name, *v);
  }
  // An unpinned cp may make up the rest where the model can run context-parallel.
  const bool cp_free = !o.cp && o.cp_refusal.empty() && o.seq_len > 0;
  if (o.tp && o.pp && o.dp && product != o.gpus && !cp_free) {
    return Status::InvalidArgument(named + " = " + std::to_string(product) + " GPUs, but " + gpus +
                                   ": tp x cp x pp x dp must equal the GPUs");
  }
  if (!named.empty() && o.gpus % product != 0) {
    std::string what = named;
    if (named.find(" x ") != std::string::npos) what += " = " + std::to_string(product);
    return Status::InvalidArgument(what + ": does not divide " + gpus);
  }
  if (o.global_batch > 0 && o.micro_batch && o.num_micro_batches) {
    const int64_t per_replica = *o.micro_batch * *o.num_micro_batches;
    if (o.global_batch % per_replica != 0 || (o.dp && o.global_batch != per_replica * *o.dp)) {
      return Status::InvalidArgument(
          Flag("--global-batch", o.global_batch) +
          ": must be --micro-batch x --num-micro-batches "
          "x dp = " +
          std::to_string(per_replica) + " x dp" +
          (o.dp ? " = " + std::to_string(per_replica * *o.dp) : std::string()));
    }
  }
  return Status::Ok();
}

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
    return o.pp_refusal && x.pp >= 4 && !o.pp_refusal(x.Ranks()).empty();
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

Result<BoundedLayouts> BoundLayouts(std::vector<Layout> layouts, TraceCache& cache,
                                    const HardwareOptions& hw, int64_t budget,
                                    traces::DdpImpl ddp) {
  std::vector<Layout> feasible;
  int64_t min_static = INT64_MAX;
  for (Layout& l : layouts) {
    SSDTRAIN_ASSIGN_OR_RETURN(const traces::Trace* t, cache.Get(l.Shape(0)));
    OpCostModel cost(hw, t->header);
    int64_t compute = 0, backward = 0, side = 0, ring = 0, static_bytes = 0, grads = 0,
            expert_grads = 0;
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
      if (x.alias_of) continue;
      if (x.kind == traces::TensorKind::kWeight || x.kind == traces::TensorKind::kOptimizerState ||
          traces::IsWeightGradient(*t, x)) {
        static_bytes += x.bytes;
      }
      if (traces::IsWeightGradient(*t, x)) {
        (traces::IsRoutedExpert(x) ? expert_grads : grads) += x.bytes;
      }
    }
    min_static = std::min(min_static, static_bytes);
    if (static_bytes > budget) continue;
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

#include "sim/planner.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "sim/op_cost.h"
#include "sim/optimal_policy.h"
#include "sim/pipeline.h"
#include "sim/policy.h"
#include "traces/storage_plan.h"

namespace ssdtrain::sim {
namespace {

struct Layout {
  int64_t micro_batch = 1, tp = 1, pp = 1, dp = 1, m = 1;
  double bound_tokens_per_s = 0;
};

class TraceCache {
 public:
  explicit TraceCache(const TraceProvider& provider) : provider_(provider) {}
  Result<const traces::Trace*> Get(int64_t mb, int64_t tp, int64_t pp, int64_t stage) {
    const auto key = std::make_tuple(mb, tp, pp, stage);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      SSDTRAIN_ASSIGN_OR_RETURN(traces::Trace t, provider_(mb, tp, pp, stage));
      it = cache_.emplace(key, std::make_unique<traces::Trace>(std::move(t))).first;
    }
    return static_cast<const traces::Trace*>(it->second.get());
  }

 private:
  const TraceProvider& provider_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<traces::Trace>> cache_;
};

void Say(const PlannerOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

std::string Flag(const char* name, int64_t v) {
  return std::string(name) + " " + std::to_string(v);
}

// " (pinned: --tp 2 --pp 4)" for the pins that are set, else "".
std::string PinsText(const PlannerOptions& o) {
  std::string pins;
  auto add = [&](const char* name, const std::optional<int64_t>& v) {
    if (!v) return;
    pins.append(1, ' ');
    pins.append(Flag(name, *v));
  };
  add("--tp", o.tp);
  add("--pp", o.pp);
  add("--dp", o.dp);
  add("--micro-batch", o.micro_batch);
  add("--num-micro-batches", o.num_micro_batches);
  if (o.global_batch > 0) add("--global-batch", o.global_batch);
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
  if (o.schedule) {
    Result<PipelineSchedule> s = ParseSchedule(*o.schedule);
    if (!s.ok()) return s.status().WithPrefix("--schedule");
  }
  const std::string gpus = Flag("--gpus", o.gpus);
  if (o.tp && o.heads > 0 && o.heads % *o.tp != 0) {
    return Status::InvalidArgument(Flag("--tp", *o.tp) + ": does not divide the model's " +
                                   std::to_string(o.heads) + " attention heads");
  }
  if (o.pp && o.layers % *o.pp != 0) {
    return Status::InvalidArgument(Flag("--pp", *o.pp) + ": does not divide the model's " +
                                   std::to_string(o.layers) + " layers");
  }
  // The pinned degrees multiply to a divisor of the GPU count (all three: to it).
  int64_t product = 1;
  std::string named;
  for (auto [name, v] : {std::pair{"--tp", o.tp}, {"--pp", o.pp}, {"--dp", o.dp}}) {
    if (!v) continue;
    product *= *v;
    if (!named.empty()) named += " x ";
    named += Flag(name, *v);
  }
  if (o.tp && o.pp && o.dp && product != o.gpus) {
    return Status::InvalidArgument(named + " = " + std::to_string(product) + " GPUs, but " + gpus +
                                   ": dp x tp x pp must equal the GPUs");
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

}  // namespace

Result<PlannerResult> SearchPlan(const TraceProvider& provider, const HardwareOptions& hw,
                                 const PlannerOptions& options) {
  if (options.gpus < 1) return Status::InvalidArgument("--gpus: must be >= 1");
  if (options.layers < 1) return Status::InvalidArgument("model: layers must be >= 1");
  const int64_t budget =
      options.memory_budget_bytes > 0 ? options.memory_budget_bytes : GpuMemoryBytes(hw);
  std::vector<std::string> policies;
  if (!options.allow_host_offload && options.policy == "offload-host") {
    return Status::InvalidArgument(
        "--policy offload-host: host offload is excluded (--no-host-offload)");
  }
  PolicyOptions policy_options;
  policy_options.allow_host_offload = options.allow_host_offload;
  if (options.policy == "auto") {
    for (std::string_view p : kFixedPolicies) {
      if (p != "offload-host" || options.allow_host_offload) policies.emplace_back(p);
    }
    policies.emplace_back("optimal");
  } else {
    policies.push_back(options.policy);
  }
  SSDTRAIN_RETURN_IF_ERROR(CheckPins(options));
  const std::string schedule = options.schedule.value_or("1f1b");
  TraceCache cache(provider);
  std::vector<Layout> layouts;
  const int64_t max_tp =
      options.tp ? *options.tp : std::min<int64_t>(hw.gpus_per_node, options.gpus);
  for (int64_t tp = options.tp.value_or(1); tp <= max_tp; tp *= 2) {
    if (options.heads > 0 && options.heads % tp != 0) continue;
    for (int64_t pp = options.pp.value_or(1); pp <= options.pp.value_or(options.layers); ++pp) {
      if (options.layers % pp != 0 || options.gpus % (tp * pp) != 0) continue;
      const int64_t dp = options.gpus / (tp * pp);
      if (options.dp && dp != *options.dp) continue;
      std::vector<int64_t> mbs;
      if (options.micro_batch) {
        mbs.push_back(*options.micro_batch);
      } else {
        for (int64_t mb = 1; mb <= 16; mb *= 2) mbs.push_back(mb);
      }
      for (int64_t mb : mbs) {
        int64_t m = options.num_micro_batches.value_or(2 * pp);
        if (options.global_batch > 0) {
          if (options.global_batch % (mb * dp) != 0) continue;
          if (options.num_micro_batches && options.global_batch != mb * dp * m) continue;
          m = options.global_batch / (mb * dp);
        }
        layouts.push_back(Layout{mb, tp, pp, dp, m, 0});
      }
    }
  }
  if (layouts.empty()) {
    return Status::InvalidArgument(
        "no layout: no tensor-parallel degree and pipeline depth divide " +
        std::to_string(options.gpus) + " GPUs, " + std::to_string(options.layers) +
        " layers and the batch" + PinsText(options));
  }
  PlannerResult out;
  out.layouts = static_cast<int64_t>(layouts.size());
  // Analytic bound: compute-only, closed-form pipeline, all-reduce; prune on static memory.
  std::vector<Layout> feasible;
  int64_t min_static = INT64_MAX;
  for (Layout& l : layouts) {
    SSDTRAIN_ASSIGN_OR_RETURN(const traces::Trace* t, cache.Get(l.micro_batch, l.tp, l.pp, 0));
    OpCostModel cost(hw, l.tp, t->header.dtype);
    int64_t compute = 0, backward = 0, static_bytes = 0, grads = 0;
    for (const traces::Op& op : t->ops) {
      if (op.phase == traces::Phase::kOptimizer) continue;
      const int64_t ns = cost.OpTimeNs(op);
      compute += ns;
      if (op.phase == traces::Phase::kBackward) backward += ns;
    }
    for (const traces::Tensor& x : t->tensors) {
      if (x.alias_of) continue;
      if (x.kind == traces::TensorKind::kWeight || x.kind == traces::TensorKind::kOptimizerState ||
          traces::IsWeightGradient(*t, x)) {
        static_bytes += x.bytes;
      }
      if (traces::IsWeightGradient(*t, x)) grads += x.bytes;
    }
    min_static = std::min(min_static, static_bytes);
    if (static_bytes > budget) continue;
    // The gradient all-reduce starts with the last micro-batch's backward at the
    // earliest (Simulate buckets it under that backward): only what outlasts
    // that backward is certain to add to the step.
    const int64_t allreduce =
        RingAllReduceNs(grads, l.dp, hw.interconnect.dp_GBps, hw.interconnect.latency_us);
    const int64_t step = (l.m + l.pp - 1) * compute + std::max<int64_t>(0, allreduce - backward);
    const double tokens = static_cast<double>(l.micro_batch * l.m * l.dp * t->header.seq_len);
    l.bound_tokens_per_s = step > 0 ? tokens / (static_cast<double>(step) * 1e-9) : 0;
    feasible.push_back(l);
  }
  Say(options, "plan: " + std::to_string(layouts.size()) + " layouts, " +
                   std::to_string(feasible.size()) + " whose weights and optimizer state fit");
  if (feasible.empty()) {
    out.fits = false;
    out.over_budget_bytes = min_static - budget;
    return out;
  }
  std::stable_sort(feasible.begin(), feasible.end(), [](const Layout& a, const Layout& b) {
    return a.bound_tokens_per_s > b.bound_tokens_per_s;
  });
  std::optional<PlannerResult> best_fit, best_any;
  for (const Layout& l : feasible) {
    if (best_fit && l.bound_tokens_per_s <= best_fit->prediction.metrics.tokens_per_s) break;
    ++out.simulated_layouts;
    SSDTRAIN_ASSIGN_OR_RETURN(const traces::Trace* first, cache.Get(l.micro_batch, l.tp, l.pp, 0));
    const traces::Trace* last = first;
    const traces::Trace* middle = nullptr;  // stands for stages 1 .. pp − 2
    if (l.pp > 1) {
      SSDTRAIN_ASSIGN_OR_RETURN(last, cache.Get(l.micro_batch, l.tp, l.pp, l.pp - 1));
    }
    if (l.pp > 2) {
      SSDTRAIN_ASSIGN_OR_RETURN(middle, cache.Get(l.micro_batch, l.tp, l.pp, 1));
    }
    traces::Plan base = BasePlan(*first);
    base.micro_batch = l.micro_batch;
    base.tp = l.tp;
    base.pp = l.pp;
    base.dp = l.dp;
    base.num_micro_batches = l.m;
    base.schedule = schedule;
    base.memory_budget_bytes = budget;
    nlohmann::json rok = nlohmann::json::array();
    for (const std::string& policy : policies) {
      traces::Plan plan, last_plan, middle_plan;
      // The other stages take the fixed policy (optimal: the best one it started from).
      std::string others = policy;
      if (policy == "optimal") {
        SSDTRAIN_ASSIGN_OR_RETURN(OptimalResult opt,
                                  MakeOptimalPlan(*first, hw, base, budget, policy_options));
        out.simulations += opt.simulations;
        plan = std::move(opt.plan);
        others = opt.best_fixed_policy;
      } else {
        SSDTRAIN_ASSIGN_OR_RETURN(plan, MakeFixedPlan(policy, *first, hw, base, policy_options));
      }
      std::vector<StageInput> stages{{first, &plan}};
      if (middle) {
        SSDTRAIN_ASSIGN_OR_RETURN(middle_plan,
                                  MakeFixedPlan(others, *middle, hw, base, policy_options));
        stages.push_back({middle, &middle_plan});
      }
      if (l.pp > 1) {
        SSDTRAIN_ASSIGN_OR_RETURN(last_plan,
                                  MakeFixedPlan(others, *last, hw, base, policy_options));
        stages.push_back({last, &last_plan});
      }
      SimulateOptions so;
      so.record_timeline = false;
      SSDTRAIN_ASSIGN_OR_RETURN(Prediction p, Simulate(stages, hw, so));
      ++out.simulations;
      rok.push_back({{"policy", policy},
                     {"peak_gpu_bytes", p.metrics.peak_gpu_bytes},
                     {"peak_activation_bytes", p.metrics.peak_activation_bytes},
                     {"step_time_ns", p.metrics.step_time_ns}});
      const bool fits = p.metrics.peak_gpu_bytes <= budget;
      PlannerResult cand;
      cand.fits = fits;
      cand.plan = plan;
      if (middle) cand.stage_plans.emplace_back(1, middle_plan);
      if (l.pp > 1) cand.stage_plans.emplace_back(l.pp - 1, last_plan);
      cand.prediction = p;
      cand.over_budget_bytes = std::max<int64_t>(0, p.metrics.peak_gpu_bytes - budget);
      if (fits &&
          (!best_fit || p.metrics.tokens_per_s > best_fit->prediction.metrics.tokens_per_s)) {
        best_fit = cand;
        best_fit->rok = rok;
      }
      if (!best_any || p.metrics.peak_gpu_bytes < best_any->prediction.metrics.peak_gpu_bytes) {
        best_any = cand;
      }
    }
    if (best_fit && best_fit->plan.micro_batch == l.micro_batch && best_fit->plan.tp == l.tp &&
        best_fit->plan.pp == l.pp) {
      best_fit->rok = rok;
    }
    Say(options,
        "plan: simulated mb=" + std::to_string(l.micro_batch) + " tp=" + std::to_string(l.tp) +
            " pp=" + std::to_string(l.pp) + " dp=" + std::to_string(l.dp) +
            (best_fit ? " (best so far " +
                            std::to_string(
                                static_cast<int64_t>(best_fit->prediction.metrics.tokens_per_s)) +
                            " tokens/s)"
                      : ""));
  }
  PlannerResult chosen = best_fit ? std::move(*best_fit) : std::move(*best_any);
  {
    // The chosen plans get their eviction points where the prediction has each
    // write landed (PlaceEvictions): the same memory at every op, now held by
    // any run whatever its SSD does. The prediction is of the plans as written.
    traces::Plan& c = chosen.plan;
    SSDTRAIN_ASSIGN_OR_RETURN(const traces::Trace* first, cache.Get(c.micro_batch, c.tp, c.pp, 0));
    SSDTRAIN_ASSIGN_OR_RETURN(c, PlaceEvictions(*first, std::move(c), hw));
    std::vector<StageInput> stages{{first, &c}};
    for (auto& [stage, stage_plan] : chosen.stage_plans) {
      SSDTRAIN_ASSIGN_OR_RETURN(const traces::Trace* t,
                                cache.Get(c.micro_batch, c.tp, c.pp, stage));
      SSDTRAIN_ASSIGN_OR_RETURN(stage_plan, PlaceEvictions(*t, std::move(stage_plan), hw));
      stages.push_back({t, &stage_plan});
    }
    SimulateOptions so;
    so.record_timeline = options.record_timeline;
    SSDTRAIN_ASSIGN_OR_RETURN(chosen.prediction, Simulate(stages, hw, so));
    out.simulations += 2;  // PlaceEvictions and the prediction
  }
  chosen.layouts = out.layouts;
  chosen.simulated_layouts = out.simulated_layouts;
  chosen.simulations = out.simulations;
  chosen.plan.prediction = chosen.prediction.metrics;
  chosen.plan.memory_budget_bytes = budget;
  return chosen;
}

}  // namespace ssdtrain::sim

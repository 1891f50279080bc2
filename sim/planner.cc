#include "sim/planner.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "traces/storage_plan.h"
#include "sim/op_cost.h"
#include "sim/optimal_policy.h"
#include "sim/pipeline.h"
#include "sim/policy.h"

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
  TraceCache cache(provider);
  std::vector<Layout> layouts;
  const int64_t max_tp = std::min<int64_t>(hw.gpus_per_node, options.gpus);
  for (int64_t tp = 1; tp <= max_tp; tp *= 2) {
    if (options.heads > 0 && options.heads % tp != 0) continue;
    for (int64_t pp = 1; pp <= options.layers; ++pp) {
      if (options.layers % pp != 0 || options.gpus % (tp * pp) != 0) continue;
      const int64_t dp = options.gpus / (tp * pp);
      std::vector<int64_t> mbs;
      if (options.micro_batch) {
        mbs.push_back(*options.micro_batch);
      } else {
        for (int64_t mb = 1; mb <= 16; mb *= 2) mbs.push_back(mb);
      }
      for (int64_t mb : mbs) {
        int64_t m = 2 * pp;
        if (options.global_batch > 0) {
          if (options.global_batch % (mb * dp) != 0) continue;
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
        " layers and the batch");
  }
  PlannerResult out;
  out.layouts = static_cast<int64_t>(layouts.size());
  // Analytic bound: compute-only, closed-form pipeline, all-reduce; prune on static memory.
  std::vector<Layout> feasible;
  int64_t min_static = INT64_MAX;
  for (Layout& l : layouts) {
    SSDTRAIN_ASSIGN_OR_RETURN(const traces::Trace* t, cache.Get(l.micro_batch, l.tp, l.pp, 0));
    OpCostModel cost(hw, l.tp, t->header.dtype);
    int64_t compute = 0, static_bytes = 0, grads = 0;
    for (const traces::Op& op : t->ops) {
      if (op.phase != traces::Phase::kOptimizer) compute += cost.OpTimeNs(op);
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
    const int64_t step =
        (l.m + l.pp - 1) * compute +
        RingAllReduceNs(grads, l.dp, hw.interconnect.dp_GBps, hw.interconnect.latency_us);
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
    if (l.pp > 1) {
      SSDTRAIN_ASSIGN_OR_RETURN(last, cache.Get(l.micro_batch, l.tp, l.pp, l.pp - 1));
    }
    traces::Plan base = BasePlan(*first);
    base.micro_batch = l.micro_batch;
    base.tp = l.tp;
    base.pp = l.pp;
    base.dp = l.dp;
    base.num_micro_batches = l.m;
    base.memory_budget_bytes = budget;
    nlohmann::json rok = nlohmann::json::array();
    for (const std::string& policy : policies) {
      traces::Plan plan, last_plan;
      if (policy == "optimal") {
        SSDTRAIN_ASSIGN_OR_RETURN(OptimalResult opt,
                                  MakeOptimalPlan(*first, hw, base, budget, policy_options));
        out.simulations += opt.simulations;
        plan = std::move(opt.plan);
        SSDTRAIN_ASSIGN_OR_RETURN(
            last_plan, MakeFixedPlan(opt.best_fixed_policy, *last, hw, base, policy_options));
      } else {
        SSDTRAIN_ASSIGN_OR_RETURN(plan, MakeFixedPlan(policy, *first, hw, base, policy_options));
        SSDTRAIN_ASSIGN_OR_RETURN(last_plan,
                                  MakeFixedPlan(policy, *last, hw, base, policy_options));
      }
      std::vector<StageInput> stages{{first, &plan}};
      if (l.pp > 1) stages.push_back({last, &last_plan});
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
  chosen.layouts = out.layouts;
  chosen.simulated_layouts = out.simulated_layouts;
  chosen.simulations = out.simulations;
  chosen.plan.prediction = chosen.prediction.metrics;
  chosen.plan.memory_budget_bytes = budget;
  return chosen;
}

}  // namespace ssdtrain::sim

// The search as a pipeline: layouts (EnumerateLayouts), their bound and static
// fit (BoundLayouts), then for each layout in bound order, each policy's
// per-stage plans (PlanStages) judged by their whole-step prediction
// (FitsBudget), until no remaining bound can beat the best plan that fits.
// Interleaved candidates are ranked by the closed form of their stage peaks;
// the winner is checked by its unrolled steps' (the printed ones), and a
// winner that does not fit by them is judged by them in a search again.
#include "sim/planner.h"

#include <map>
#include <optional>

#include "sim/detail/planner_layouts.h"
#include "sim/detail/planner_search.h"
#include "sim/fit.h"
#include "sim/policy.h"
#include "sim/stage_plans.h"

namespace ssdtrain::sim {
namespace {

using detail::Candidate;
using detail::Layout;
using detail::Search;

void Say(const PlannerOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

Result<std::vector<std::string>> PoliciesToTry(const PlannerOptions& options) {
  if (!options.allow_host_offload &&
      (options.policy == "offload-host" || options.policy == "megatron-offload")) {
    return Status::InvalidArgument("--policy " + options.policy +
                                   ": host offload is excluded (--no-host-offload)");
  }
  std::vector<std::string> policies;
  if (options.policy != "auto") {
    policies.push_back(options.policy);
    return policies;
  }
  for (std::string_view p : kFixedPolicies) {
    if (p != "offload-host" || options.allow_host_offload) policies.emplace_back(p);
  }
  if (options.separate_projections) policies.emplace_back("recompute-sac");
  // Megatron-Core's fine-grained offload of the --offload-modules: the peer a
  // user weighs SSD offload against, so auto weighs it too.
  if (options.allow_host_offload) policies.emplace_back("megatron-offload");
  policies.emplace_back("optimal");
  return policies;
}

nlohmann::json RokPoint(const std::string& policy, const Candidate& c) {
  const Prediction::StagePeak& worst = WorstStage(c.prediction);
  return {{"policy", policy},
          {"peak_gpu_bytes", c.prediction.metrics.peak_gpu_bytes},
          {"peak_activation_bytes", c.prediction.metrics.peak_activation_bytes},
          {"step_time_ns", c.prediction.metrics.step_time_ns},
          {"fits", c.fits},
          {"over_budget_bytes", c.over_budget_bytes},
          {"worst_stage", worst.stage}};
}

// A candidate's place in the search: its layout's index among the feasible
// ones and its policy's among those tried.
using CandidateKey = std::pair<size_t, size_t>;

struct Best {
  Layout layout;
  std::string policy;
  Candidate candidate;
  nlohmann::json rok;
  CandidateKey key;
};

// Winners by the closed form of their interleaved stage peaks that did not fit
// by their unrolled steps' (Search::Exact), with those predictions.
using Refuted = std::map<CandidateKey, Candidate>;

struct Pass {
  std::optional<Best> best_fit, best_any;  // the fastest plan that fits; the least memory
  int64_t simulated_layouts = 0;
};

PlannerResult ResultOf(Best best, int64_t budget) {
  PlannerResult out;
  out.fits = best.candidate.fits;
  out.over_budget_bytes = best.candidate.over_budget_bytes;
  out.shortfall = best.candidate.shortfall;
  out.prediction = std::move(best.candidate.prediction);
  out.rok = std::move(best.rok);
  std::vector<StagePlan>& stages = best.candidate.plans.stages;
  out.plan = std::move(stages.front().plan);
  for (size_t i = 1; i < stages.size(); ++i) {
    out.stage_plans.emplace_back(stages[i].stage, std::move(stages[i].plan));
  }
  out.plan.prediction = out.prediction.metrics;
  out.plan.memory_budget_bytes = budget;
  return out;
}

std::string Progress(const Layout& l, const std::optional<Best>& best_fit) {
  std::string line =
      "plan: simulated mb=" + std::to_string(l.micro_batch) + " tp=" + std::to_string(l.tp) +
      (l.cp > 1 ? " cp=" + std::to_string(l.cp) : std::string()) + " pp=" + std::to_string(l.pp) +
      (l.pp_first_layers != 0 || l.pp_last_layers != 0
           ? " split=" + std::to_string(l.pp_first_layers) + "/" + std::to_string(l.pp_last_layers)
           : std::string()) +
      " dp=" + std::to_string(l.dp) +
      (l.zero_stage != 0 ? " zero=" + std::to_string(l.zero_stage) : "") +
      (l.dp_shard != 0 ? " dp_shard=" + std::to_string(l.dp_shard) : "") +
      (l.ep > 1 ? " ep=" + std::to_string(l.ep) : std::string()) +
      (l.schedule == traces::Schedule::kInterleaved
           ? " interleaved v=" + std::to_string(l.virtual_stages)
           : std::string());
  if (best_fit) {
    line +=
        " (best so far " +
        std::to_string(static_cast<int64_t>(best_fit->candidate.prediction.metrics.tokens_per_s)) +
        " tokens/s)";
  }
  return line;
}

// Layouts are searched interleaved with their most chunks per stage (the least
// bubble and memory); at the winner, whether 1F1B or interleaved, every other
// v the options allow is tried with its policy (fewer chunks, fewer sends).
Status TryOtherChunkCounts(Search& search, const PlannerOptions& o, Best& best) {
  if (o.virtual_stages || (o.schedule && *o.schedule != "interleaved")) return Status::Ok();
  const Layout at = best.layout;
  // An uneven split does not interleave (traces::PipelineSplitError).
  if (at.pp_first_layers != 0 || at.pp_last_layers != 0) return Status::Ok();
  for (int64_t v : detail::VirtualStagesToTry(o, at.pp, at.m)) {
    if (at.schedule == traces::Schedule::kInterleaved && v == at.virtual_stages) continue;
    Layout l = at;
    l.schedule = traces::Schedule::kInterleaved;
    l.virtual_stages = v;
    // Its middle stages must be alike (PlannerOptions::pp_refusal).
    if (o.pp_refusal && l.pp > 1 && !o.pp_refusal(l.Ranks()).empty()) continue;
    SSDTRAIN_ASSIGN_OR_RETURN(Candidate c, search.Evaluate(l, best.policy, false));
    if (!c.fits ||
        c.prediction.metrics.tokens_per_s <= best.candidate.prediction.metrics.tokens_per_s) {
      continue;
    }
    SSDTRAIN_RETURN_IF_ERROR(search.Exact(c));  // judged by the printed peaks
    if (c.fits) best = Best{l, best.policy, std::move(c), best.rok, best.key};
  }
  return Status::Ok();
}

// Nothing at a layout is faster than keeping everything (sim/stage_plans.h):
// after keep, when keep cannot beat `best` (the best plan that fits so far)
// and no candidate of this layout has, no other policy here can. The rule of
// both the window's search and the order its candidates are taken in.
bool NoPolicyHereCanWin(const std::string& policy, double tokens, std::optional<double> best,
                        bool beaten_here) {
  return policy == "keep" && best && !beaten_here && tokens <= *best;
}

// Auto simulates megatron-offload only at a layout where offload-host fits.
// Both send activations to the same pinned host pool in forward order, and
// megatron-offload's tensors are a subset of offload-host's (its modules'
// backward inputs of >= 1 Mi elements, against every candidate of >= 1 MiB):
// where moving all of them is over the budget, moving some is too (but where
// the pool fills up in another order, or fewer writes free memory sooner).
// Its simulation is saved there; its rok row says why it has none.
// `so_far`: this layout's candidates in `policies`' order up to `policy`.
bool SkippedHere(const std::string& policy, const std::vector<std::string>& policies,
                 const std::vector<Result<Candidate>>& so_far) {
  if (policy != "megatron-offload") return false;
  for (size_t k = 0; k < so_far.size(); ++k) {
    if (policies[k] == "offload-host") return so_far[k].ok() && !so_far[k]->fits;
  }
  return false;
}

// The candidates of layouts [first, end) of `layouts`, each layout a task of
// the search's pool (its stages tasks of their own), each in `policies`' order up
// to where one thread searching them in turn could stop: after keep, when
// keep cannot beat `bar` (the best plan that fits before the window) and no
// candidate of the layout beat it either (by its closed-form fit: judged
// exactly, a refuted one only fits less). That thread's running best is at
// least `bar`, so it stops at the same place or earlier, never later: the
// window holds every candidate it would take, and the caller takes them in
// its order (and counts only those). Trace shapes must be cached already.
std::vector<std::vector<Result<Candidate>>> EvaluateWindow(Search& search,
                                                           const std::vector<Layout>& layouts,
                                                           size_t first, size_t end,
                                                           const std::vector<std::string>& policies,
                                                           std::optional<double> bar) {
  std::vector<std::vector<Result<Candidate>>> out(end - first);
  auto layout = [&](size_t k) {
    const size_t i = first + k;
    bool beat = false;
    for (const std::string& policy : policies) {
      if (SkippedHere(policy, policies, out[k])) {
        Candidate skipped;
        skipped.skipped = true;
        out[k].push_back(std::move(skipped));
        continue;
      }
      out[k].push_back(search.EvaluateUncounted(layouts[i], policy, false));
      const Result<Candidate>& r = out[k].back();
      if (!r.ok()) return;
      const double tokens = r->prediction.metrics.tokens_per_s;
      if (r->fits && (!bar || tokens > *bar)) beat = true;
      if (NoPolicyHereCanWin(policy, tokens, bar, beat)) return;
    }
  };
  search.pool().ForEach(end - first, layout);
  return out;
}

// The chosen interleaved plan against its layout and policy under 1F1B.
Result<PlannerResult::ScheduleComparison> AgainstOneFOneB(Search& search, const Best& chosen) {
  Layout one_f_one_b = chosen.layout;
  one_f_one_b.schedule = traces::Schedule::kOneFOneB;
  one_f_one_b.virtual_stages = 1;
  SSDTRAIN_ASSIGN_OR_RETURN(const Candidate c, search.Evaluate(one_f_one_b, chosen.policy, false));
  PlannerResult::ScheduleComparison out;
  out.virtual_stages = chosen.layout.virtual_stages;
  out.tokens_per_s = chosen.candidate.prediction.metrics.tokens_per_s;
  out.bubble_fraction = chosen.candidate.prediction.bubble_fraction;
  out.one_f_one_b_tokens_per_s = c.prediction.metrics.tokens_per_s;
  out.one_f_one_b_bubble_fraction = c.prediction.bubble_fraction;
  out.one_f_one_b_fits = c.fits;
  return out;
}

}  // namespace

// One pass of the search over `feasible` in bound order; a candidate in
// `refuted` is judged by its exact prediction there.
// `keep_bounds`: policies[0] is keep, simulated only as the layout's bound
// (a one-policy search's): never a candidate, it only skips the layout.
Result<Pass> SearchLayouts(Search& search, const PlannerOptions& options,
                           const std::vector<Layout>& feasible,
                           const std::vector<std::string>& policies, const Refuted& refuted,
                           bool keep_bounds) {
  Pass pass;
  std::optional<Best>& best_fit = pass.best_fit;
  std::optional<Best>& best_any = pass.best_any;
  auto best_tokens = [&] {
    return best_fit ? std::optional<double>(best_fit->candidate.prediction.metrics.tokens_per_s)
                    : std::nullopt;
  };
  bool done = false;
  for (size_t first = 0; first < feasible.size() && !done;) {
    // The next window of layouts the bound still lets win, searched at once.
    const std::optional<double> bar = best_tokens();
    size_t end = first;
    while (end < feasible.size() && end - first < static_cast<size_t>(search.threads()) &&
           !(bar && feasible[end].bound_tokens_per_s <= *bar)) {
      SSDTRAIN_RETURN_IF_ERROR(search.StageTraces(feasible[end]).status());
      ++end;
    }
    if (end == first) break;
    std::vector<std::vector<Result<Candidate>>> found =
        EvaluateWindow(search, feasible, first, end, policies, bar);
    // Taken in order, as one thread would take them.
    for (size_t i = first; i < end; ++i) {
      const Layout& l = feasible[i];
      // The bound is never below a plan's throughput: no later layout can win.
      if (best_fit && l.bound_tokens_per_s <= *best_tokens()) {
        done = true;
        break;
      }
      ++pass.simulated_layouts;
      nlohmann::json rok = nlohmann::json::array();
      bool best_here = false, lowest_here = false;
      for (size_t k = 0; k < found[i - first].size(); ++k) {
        const std::string& policy = policies[k];
        Result<Candidate>& r = found[i - first][k];
        if (!r.ok()) return r.status();
        Candidate& c = *r;
        if (c.skipped) {
          rok.push_back({{"policy", policy},
                         {"simulated", false},
                         {"why", "offload-host does not fit at this layout, and " + policy +
                                     " moves a subset of its tensors to the same pinned pool"}});
          continue;
        }
        search.Count(c);
        if (keep_bounds && k == 0) {
          if (NoPolicyHereCanWin(policy, c.prediction.metrics.tokens_per_s, best_tokens(), false)) {
            break;
          }
          continue;
        }
        if (auto it = refuted.find({i, k}); it != refuted.end()) c = it->second;
        rok.push_back(RokPoint(policy, c));
        const double tokens = c.prediction.metrics.tokens_per_s;
        if (c.fits && (!best_fit || tokens > *best_tokens())) {
          best_fit = Best{l, policy, c, {}, {i, k}};
          best_here = true;
        }
        if (!best_any || c.prediction.metrics.peak_gpu_bytes <
                             best_any->candidate.prediction.metrics.peak_gpu_bytes) {
          best_any = Best{l, policy, std::move(c), {}, {i, k}};
          lowest_here = true;
        }
        if (NoPolicyHereCanWin(policy, tokens, best_tokens(), best_here)) break;
      }
      if (best_here) best_fit->rok = rok;
      if (lowest_here) best_any->rok = rok;
      Say(options, Progress(l, best_fit));
    }
    first = end;
  }
  return pass;
}

Result<PlannerResult> SearchPlan(const TraceProvider& provider, const HardwareOptions& hw,
                                 const PlannerOptions& options) {
  if (options.gpus < 1) return Status::InvalidArgument("--gpus: must be >= 1");
  if (options.layers < 1) return Status::InvalidArgument("model: layers must be >= 1");
  const int64_t budget =
      options.memory_budget_bytes > 0 ? options.memory_budget_bytes : GpuMemoryBytes(hw);
  SSDTRAIN_ASSIGN_OR_RETURN(std::vector<std::string> policies, PoliciesToTry(options));
  // Optimal alone: keep is simulated first at each layout all the same, as
  // auto's search does, but only as the layout's bound (nothing there is
  // faster than keeping everything): when it cannot beat the best plan so far,
  // optimal is not simulated there. Keep's simulation is one a stage,
  // optimal's dozens (for a fixed policy, one against one: no gain).
  const bool keep_bounds = policies.size() == 1 && policies.front() == "optimal";
  if (keep_bounds) policies.insert(policies.begin(), "keep");
  SSDTRAIN_RETURN_IF_ERROR(detail::CheckPins(options));
  std::vector<Layout> layouts = detail::EnumerateLayouts(options, hw);
  if (layouts.empty()) {
    return Status::InvalidArgument(
        "no layout: no tensor-parallel degree and pipeline depth divide " +
        std::to_string(options.gpus) + " GPUs, " + std::to_string(options.layers) +
        " layers and the batch" + detail::PinsText(options));
  }
  Search search(provider, hw, options, budget);
  const auto n_layouts = static_cast<int64_t>(layouts.size());
  SSDTRAIN_ASSIGN_OR_RETURN(detail::BoundedLayouts bounded,
                            detail::BoundLayouts(std::move(layouts), search.cache(), hw, budget,
                                                 *traces::ParseDdpImpl(options.ddp)));
  Say(options, "plan: " + std::to_string(n_layouts) + " layouts, " +
                   std::to_string(bounded.feasible.size()) +
                   " whose weights and optimizer state fit");
  if (bounded.feasible.empty()) {
    PlannerResult out;
    out.layouts = n_layouts;
    out.over_budget_bytes = bounded.min_static_bytes - budget;
    return out;
  }
  // Until the winner fits by its printed (unrolled) peaks, or no plan fits.
  Refuted refuted;
  Pass pass;
  int64_t simulated_layouts = 0;
  while (true) {
    SSDTRAIN_ASSIGN_OR_RETURN(
        pass, SearchLayouts(search, options, bounded.feasible, policies, refuted, keep_bounds));
    simulated_layouts += pass.simulated_layouts;
    if (!pass.best_fit) break;
    Best& won = *pass.best_fit;
    SSDTRAIN_RETURN_IF_ERROR(search.Exact(won.candidate));
    if (won.candidate.fits) {
      for (nlohmann::json& point : won.rok) {
        if (point["policy"] == won.policy) point = RokPoint(won.policy, won.candidate);
      }
      break;
    }
    Say(options, Progress(won.layout, std::nullopt) + " " + won.policy +
                     ": fits by the closed form of its interleaved peaks, not by its unrolled "
                     "steps' (over by " +
                     std::to_string(won.candidate.over_budget_bytes) +
                     " bytes); searched again without it");
    refuted.emplace(won.key, std::move(won.candidate));
  }
  std::optional<Best>& best_fit = pass.best_fit;
  std::optional<Best>& best_any = pass.best_any;
  if (best_fit) SSDTRAIN_RETURN_IF_ERROR(TryOtherChunkCounts(search, options, *best_fit));
  Best chosen = best_fit ? std::move(*best_fit) : std::move(*best_any);
  // The chosen plan's prediction: its timeline when asked; interleaved, its
  // stages' peaks from the unrolled step (Search::Exact; a plan that fits was
  // judged by them already).
  if (options.record_timeline) {
    SSDTRAIN_ASSIGN_OR_RETURN(chosen.candidate, search.Evaluate(chosen.layout, chosen.policy,
                                                                options.record_timeline, true));
  }
  SSDTRAIN_RETURN_IF_ERROR(search.Exact(chosen.candidate));
  SSDTRAIN_RETURN_IF_ERROR(search.Reserved(chosen.candidate, chosen.layout));
  std::optional<PlannerResult::ScheduleComparison> comparison;
  if (chosen.layout.schedule == traces::Schedule::kInterleaved) {
    SSDTRAIN_ASSIGN_OR_RETURN(comparison, AgainstOneFOneB(search, chosen));
  }
  PlannerResult out = ResultOf(std::move(chosen), budget);
  out.interleaved_vs_1f1b = comparison;
  out.layouts = n_layouts;
  out.simulated_layouts = simulated_layouts;
  out.simulations = search.simulations();
  return out;
}

}  // namespace ssdtrain::sim

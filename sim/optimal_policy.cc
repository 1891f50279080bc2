#include "sim/optimal_policy.h"

#include <algorithm>
#include <map>
#include <optional>

#include "sim/op_cost.h"
#include "traces/storage_plan.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::sim {
namespace {

using traces::OpId;
using traces::Phase;
using traces::Placement;
using traces::TensorAction;
using traces::TensorId;

bool IsOffload(TensorAction a) {
  return a == TensorAction::kOffloadSsd || a == TensorAction::kOffloadHost;
}

struct Candidate {
  traces::Plan plan;
  Prediction prediction;
};

class Search {
 public:
  Search(const traces::Trace& trace, const HardwareOptions& hw, int64_t budget,
         const PolicyOptions& options, const traces::StoragePlan* storages)
      : trace_(trace), hw_(hw), budget_(budget), options_(options), given_storages_(storages) {}

  // A plan the search met before (a quarter of its candidates: a move's prefix
  // can equal the incumbent or an earlier try) is not simulated again: the
  // simulation is deterministic. Every plan of one search is `base` with its
  // own placements (and policy name), so the placements are the key.
  Result<Prediction> Evaluate(const traces::Plan& plan) {
    std::string text;
    for (const Placement& q : plan.placements) {
      const int64_t fields[] = {q.tensor,          static_cast<int64_t>(q.action),
                                q.prefetch_before, q.evict_before,
                                q.device,          q.offset};
      text.append(reinterpret_cast<const char*>(fields), sizeof(fields));
      text.append(q.file).push_back('\0');
    }
    if (auto it = seen_.find(text); it != seen_.end()) return it->second;
    ++simulations_;
    SimulateOptions so;
    so.gpu = options_.gpu;
    so.record_timeline = false;
    if (given_storages_ == nullptr && !storages_) {
      SSDTRAIN_ASSIGN_OR_RETURN(storages_, traces::ResolveStorages(trace_, "plan"));
    }
    const traces::StoragePlan* storages = given_storages_ ? given_storages_ : &*storages_;
    SSDTRAIN_ASSIGN_OR_RETURN(Prediction p,
                              Simulate({StageInput{&trace_, &plan, storages}}, hw_, so));
    seen_.emplace(std::move(text), p);
    return p;
  }
  // The peak of the trace's own stage, holding its in-flight micro-batches
  // (the trace stands for every stage in the simulation).
  int64_t Peak(const Prediction& p) const {
    const auto stage = static_cast<size_t>(std::max<int64_t>(0, trace_.header.stage));
    if (p.stage_peaks.empty()) return p.metrics.peak_gpu_bytes;
    return p.stage_peaks[std::min(stage, p.stage_peaks.size() - 1)].peak_gpu_bytes;
  }
  bool Fits(const Prediction& p) const { return Peak(p) <= budget_; }
  bool Better(const Prediction& a, const Prediction& b) const {
    if (Fits(a) != Fits(b)) return Fits(a);
    if (!Fits(a)) return Peak(a) < Peak(b);
    if (a.metrics.step_time_ns != b.metrics.step_time_ns) {
      return a.metrics.step_time_ns < b.metrics.step_time_ns;
    }
    return Peak(a) < Peak(b);
  }
  // Tries `plan` (after time-aware prefetch); replaces the incumbent when better.
  Result<bool> Try(traces::Plan plan, Candidate* best) {
    ApplyTimeAwarePrefetch(trace_, hw_, best->prediction, options_, &plan);
    SSDTRAIN_ASSIGN_OR_RETURN(Prediction p, Evaluate(plan));
    if (!Better(p, best->prediction)) return false;
    best->plan = std::move(plan);
    best->prediction = std::move(p);
    return true;
  }
  // Sets `action` on prefixes of `tensors` (longest first); keeps the first
  // prefix that improves the incumbent.
  Result<bool> TryPrefixes(const std::vector<TensorId>& tensors, TensorAction action,
                           Candidate* best) {
    for (size_t k = tensors.size(); k >= 1; k = k / 2) {
      traces::Plan plan = best->plan;
      std::map<TensorId, size_t> index;
      for (size_t i = 0; i < plan.placements.size(); ++i) index[plan.placements[i].tensor] = i;
      for (size_t i = 0; i < k; ++i) {
        Placement p = action == TensorAction::kOffloadSsd
                          ? traces::SsdPlacement(trace_, tensors[i], traces::kNoOp)
                          : Placement{tensors[i], action, traces::kNoOp, "", 0, 0};
        auto it = index.find(tensors[i]);
        if (it != index.end()) {
          plan.placements[it->second] = p;
        } else {
          plan.placements.push_back(p);
        }
      }
      // Plain keeps say nothing; a held one (hold_until: a re-run's input
      // nothing else keeps, sim::SetRerunPoints) stays, or each re-run
      // rebuilds it again.
      plan.placements.erase(std::remove_if(plan.placements.begin(), plan.placements.end(),
                                           [](const Placement& p) {
                                             return p.action == TensorAction::kKeep &&
                                                    p.hold_until == traces::kNoOp;
                                           }),
                            plan.placements.end());
      std::sort(plan.placements.begin(), plan.placements.end(),
                [](const Placement& a, const Placement& b) { return a.tensor < b.tensor; });
      SSDTRAIN_ASSIGN_OR_RETURN(bool improved, Try(std::move(plan), best));
      if (improved) return true;
      if (k == 1) break;
    }
    return false;
  }
  int simulations() const { return simulations_; }

 private:
  const traces::Trace& trace_;
  const HardwareOptions& hw_;
  int64_t budget_;
  const PolicyOptions& options_;
  int simulations_ = 0;
  std::map<std::string, Prediction> seen_;
  const traces::StoragePlan* given_storages_;    // the trace's, from the caller, or null:
  std::optional<traces::StoragePlan> storages_;  // resolved at the first simulation
};

std::map<TensorId, TensorAction> Actions(const traces::Plan& plan) {
  std::map<TensorId, TensorAction> out;
  for (const Placement& p : plan.placements) out[p.tensor] = p.action;
  return out;
}

}  // namespace

void ApplyTimeAwarePrefetch(const traces::Trace& trace, const HardwareOptions& hw,
                            const Prediction& timing, const PolicyOptions& options,
                            traces::Plan* plan) {
  const int gpu = options.gpu >= 0 ? options.gpu : SlowestArray(hw);
  const ArrayFigures array = ArrayFor(hw, gpu);
  const double ssd_Bps = std::min(array.read_GBps, hw.host_link.h2d_GBps) * 1e9;
  const double host_Bps = hw.host_link.h2d_GBps * 1e9;
  const double latency_ns = hw.storage.drive.read_latency_us * 1e3 + hw.host_link.latency_us * 1e3;
  // Backward ops in order, with their predicted starts.
  std::vector<std::pair<int64_t, OpId>> backward;
  for (const traces::Op& op : trace.ops) {
    if (op.phase == Phase::kBackward && static_cast<size_t>(op.id) < timing.ops.size() &&
        timing.ops[static_cast<size_t>(op.id)].start_ns >= 0) {
      backward.emplace_back(timing.ops[static_cast<size_t>(op.id)].start_ns, op.id);
    }
  }
  if (backward.empty()) return;
  struct Read {
    int64_t need_ns;
    double duration_ns;
    size_t placement;
  };
  // Each storage's first predicted read outside the forward pass, over the
  // storage and its aliases (one pass over the tensors, not one per placement).
  std::vector<int64_t> first_need(trace.tensors.size(), -1);
  for (const traces::Tensor& t : trace.tensors) {
    int64_t& need = first_need[static_cast<size_t>(trace.StorageOf(t.id))];
    for (OpId c : t.consumers) {
      if (trace.op(c).phase == Phase::kForward) continue;
      const int64_t s = timing.ops[static_cast<size_t>(c)].start_ns;
      if (s >= 0 && (need < 0 || s < need)) need = s;
    }
  }
  std::vector<Read> reads;
  for (size_t i = 0; i < plan->placements.size(); ++i) {
    const Placement& p = plan->placements[i];
    if (!IsOffload(p.action)) continue;
    const TensorId root = trace.StorageOf(p.tensor);
    const int64_t need = first_need[static_cast<size_t>(root)];
    if (need < 0) continue;
    const double bw = p.action == TensorAction::kOffloadHost ? host_Bps : ssd_Bps;
    reads.push_back(
        Read{need, static_cast<double>(trace.tensor(root).bytes) / bw * 1e9 + latency_ns, i});
  }
  // Latest schedule on one serial read channel, from the last need backwards.
  std::sort(reads.begin(), reads.end(), [](const Read& a, const Read& b) {
    return a.need_ns != b.need_ns ? a.need_ns > b.need_ns : a.placement > b.placement;
  });
  // Margin for rate sharing with writes still in flight.
  constexpr double kSafety = 1.10;
  // The backward ops' starts as a running maximum: the first op (in op order)
  // that starts after a time is the first whose running maximum does, so a
  // binary search finds it.
  std::vector<int64_t> latest_start;
  latest_start.reserve(backward.size());
  for (const auto& [t, op] : backward) {
    latest_start.push_back(latest_start.empty() ? t : std::max(latest_start.back(), t));
  }
  double channel_free = 1e300;
  for (const Read& r : reads) {
    const double finish = std::min(static_cast<double>(r.need_ns), channel_free);
    const double start = finish - r.duration_ns * kSafety;
    channel_free = start;
    // The op before the first backward op (in op order) that starts after
    // `start`: the latest one of the run starting at or before it; the first
    // one if none.
    const auto after =
        std::upper_bound(latest_start.begin(), latest_start.end(), start,
                         [](double s, int64_t t) { return s < static_cast<double>(t); });
    const size_t i = static_cast<size_t>(after - latest_start.begin());
    plan->placements[r.placement].prefetch_before = backward[i == 0 ? 0 : i - 1].second;
  }
}

Result<OptimalResult> MakeOptimalPlan(const traces::Trace& trace, const HardwareOptions& hw,
                                      const traces::Plan& base, int64_t budget_bytes,
                                      const PolicyOptions& options,
                                      const traces::StoragePlan* storages) {
  const int64_t budget = budget_bytes > 0 ? budget_bytes : GpuMemoryBytes(hw);
  Search search(trace, hw, budget, options, storages);
  OptimalResult out;
  std::optional<Candidate> best;
  for (std::string_view policy : kFixedPolicies) {
    SSDTRAIN_ASSIGN_OR_RETURN(traces::Plan plan, MakeFixedPlan(policy, trace, hw, base, options));
    SSDTRAIN_ASSIGN_OR_RETURN(Prediction p, search.Evaluate(plan));
    if (!best || search.Better(p, best->prediction)) {
      best = Candidate{std::move(plan), std::move(p)};
      out.best_fixed_policy = std::string(policy);
    }
  }
  out.best_fixed_step_ns = best->prediction.metrics.step_time_ns;
  Candidate& inc = *best;
  SSDTRAIN_ASSIGN_OR_RETURN(bool improved, search.Try(inc.plan, &inc));
  (void)improved;

  const std::vector<TensorId> candidates =
      traces::OffloadCandidates(trace, options.min_offload_bytes);
  std::vector<TensorId> all_movable = candidates;
  OpCostModel cost(hw, trace.header);
  constexpr int kRounds = 3;
  for (int round = 0; round < kRounds; ++round) {
    bool any = false;
    auto actions = Actions(inc.plan);
    auto action_of = [&](TensorId t) {
      auto it = actions.find(t);
      return it == actions.end() ? TensorAction::kKeep : it->second;
    };
    // Keep more: moved tensors, latest first (their I/O is the least hidden).
    std::vector<TensorId> moved;
    for (const Placement& p : inc.plan.placements) moved.push_back(p.tensor);
    std::sort(moved.rbegin(), moved.rend());
    SSDTRAIN_ASSIGN_OR_RETURN(bool a, search.TryPrefixes(moved, TensorAction::kKeep, &inc));
    any = any || a;
    actions = Actions(inc.plan);
    // Recompute cheap memory-bound tensors instead of moving or keeping them:
    // ordered by recompute time per byte saved.
    std::vector<std::pair<double, TensorId>> cheap;
    for (TensorId t : candidates) {
      if (trace.tensor(t).producer == traces::kNoOp) continue;  // a view: nothing to re-run
      const traces::Op& producer = trace.op(trace.tensor(trace.StorageOf(t)).producer);
      if (producer.kind == traces::OpKind::kGemm || producer.kind == traces::OpKind::kAttention ||
          producer.kind == traces::OpKind::kCollective || producer.layer != trace.tensor(t).layer) {
        continue;
      }
      if (action_of(t) == TensorAction::kRecompute) continue;
      const double per_byte = static_cast<double>(cost.OpTimeNs(producer)) /
                              static_cast<double>(trace.tensor(trace.StorageOf(t)).bytes);
      cheap.emplace_back(per_byte, t);
    }
    std::sort(cheap.begin(), cheap.end());
    std::vector<TensorId> cheap_ids;
    for (const auto& [c, t] : cheap) cheap_ids.push_back(t);
    SSDTRAIN_ASSIGN_OR_RETURN(bool b,
                              search.TryPrefixes(cheap_ids, TensorAction::kRecompute, &inc));
    any = any || b;
    actions = Actions(inc.plan);
    // Host path for the earliest SSD tensors, within the pinned budget.
    std::vector<TensorId> to_host;
    int64_t pinned =
        options.allow_host_offload ? HostPinnedBytesPerMicroBatch(hw, base.num_micro_batches) : 0;
    for (TensorId t : candidates) {
      if (action_of(t) != TensorAction::kOffloadSsd) continue;
      const int64_t bytes = trace.tensor(trace.StorageOf(t)).bytes;
      if (bytes > pinned) break;
      pinned -= bytes;
      to_host.push_back(t);
    }
    SSDTRAIN_ASSIGN_OR_RETURN(bool c,
                              search.TryPrefixes(to_host, TensorAction::kOffloadHost, &inc));
    any = any || c;
    actions = Actions(inc.plan);
    // Over budget or I/O-free slack: offload kept tensors, earliest first.
    std::vector<TensorId> kept;
    for (TensorId t : candidates) {
      if (action_of(t) == TensorAction::kKeep) kept.push_back(t);
    }
    SSDTRAIN_ASSIGN_OR_RETURN(bool d, search.TryPrefixes(kept, TensorAction::kOffloadSsd, &inc));
    any = any || d;
    if (!any) break;
  }
  inc.plan.policy = "optimal";
  inc.plan.memory_budget_bytes = budget;
  out.fits = search.Fits(inc.prediction);
  out.plan = std::move(inc.plan);
  out.prediction = std::move(inc.prediction);
  out.simulations = search.simulations();
  return out;
}

}  // namespace ssdtrain::sim

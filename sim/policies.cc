#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string>

#include "sim/op_cost.h"
#include "sim/policy.h"
#include "traces/op_scope.h"
#include "traces/prefetch.h"
#include "traces/storage_plan.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::sim {
namespace {

using traces::OpKind;
using traces::Phase;
using traces::Placement;
using traces::TensorAction;
using traces::TensorId;

bool ProducedBy(const traces::Trace& trace, TensorId t, OpKind kind) {
  const traces::OpId p = trace.tensor(trace.StorageOf(t)).producer;
  return p != traces::kNoOp && trace.op(p).kind == kind;
}

bool InAttentionCore(const traces::Trace& trace, const traces::Tensor& t) {
  const traces::Op& producer = trace.op(t.producer);
  if (producer.kind == OpKind::kSoftmax) return true;
  if (producer.kind == OpKind::kDropout) {
    for (TensorId in : producer.inputs) {
      if (ProducedBy(trace, in, OpKind::kSoftmax)) return true;
    }
  }
  if (producer.kind == OpKind::kGemm) {
    for (traces::OpId c : t.consumers) {
      if (trace.op(c).kind == OpKind::kSoftmax) return true;
    }
  }
  return false;
}

bool InMlaUpProjection(const traces::Trace& trace, const traces::Tensor& t) {
  return traces::InScope(trace.op(t.producer), traces::kMlaUpScope);
}

bool Selected(const std::vector<std::string>& modules, std::string_view module) {
  return std::find(modules.begin(), modules.end(), module) != modules.end();
}

Placement Offload(const traces::Trace& trace, const std::vector<traces::OpId>& prefetch, TensorId t,
                  TensorAction action) {
  const traces::OpId before = prefetch[static_cast<size_t>(t)];
  if (action == TensorAction::kOffloadSsd) return traces::SsdPlacement(trace, t, before);
  return Placement{t, action, before, "", 0, 0};
}

}  // namespace

namespace {

// "" when every name is in `known`, else "<what> "x": expected a, b or c",
// the list written from `known` itself.
template <size_t N>
std::string NotAmong(std::string_view what, const std::vector<std::string>& names,
                     const std::string_view (&known)[N]) {
  for (const std::string& m : names) {
    if (std::find(std::begin(known), std::end(known), m) != std::end(known)) continue;
    std::string list;
    for (size_t i = 0; i < N; ++i) {
      if (i > 0) list.append(i + 1 == N ? " or " : ", ");
      list.append(known[i]);
    }
    std::string out(what);
    out.append(" \"");
    out.append(m);
    out.append("\": expected ");
    out.append(list);
    return out;
  }
  return "";
}

}  // namespace

Result<std::map<int64_t, traces::OpId>> SetRerunPoints(
    const traces::Trace& trace, traces::Plan* plan,
    const std::function<int64_t(const traces::Tensor&)>& region_of) {
  std::map<TensorId, int64_t> region;  // storage root -> region
  for (const Placement& p : plan->placements) {
    if (p.action != TensorAction::kRecompute) continue;
    region.emplace(trace.StorageOf(p.tensor), region_of(trace.tensor(p.tensor)));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const traces::StoragePlan sp, traces::ResolveStorages(trace, "trace"));
  std::map<int64_t, traces::OpId> point;  // region -> its first backward read
  for (const traces::Op& op : trace.ops) {
    if (op.phase != Phase::kBackward) continue;
    for (TensorId t : op.inputs) {
      const auto it = region.find(trace.StorageOf(t));
      if (it != region.end()) point.emplace(it->second, op.id);
    }
  }
  for (Placement& p : plan->placements) {
    if (p.action != TensorAction::kRecompute) continue;
    const auto it = point.find(region.at(trace.StorageOf(p.tensor)));
    if (it != point.end()) p.prefetch_before = it->second;
  }
  // What each region's re-run reads: from its recomputed storages up through
  // their producers' inputs, within the region through what nothing saves;
  // such an input of another region (or of none) is held until the point.
  std::map<TensorId, traces::OpId> held;  // storage root -> the last point that reads it
  for (const auto& [r, at] : point) {
    std::vector<TensorId> stack;
    std::set<TensorId> seen;
    for (const auto& [root, of] : region) {
      if (of == r) stack.push_back(root);
    }
    while (!stack.empty()) {
      const TensorId root = stack.back();
      stack.pop_back();
      if (!seen.insert(root).second) continue;
      const traces::OpId producer = trace.tensor(root).producer;
      if (producer == traces::kNoOp) continue;
      for (TensorId in : trace.op(producer).inputs) {
        const TensorId s = trace.StorageOf(in);
        const traces::StorageInfo& info = sp.storages[static_cast<size_t>(sp.IndexOf(s))];
        if (info.persistent() || info.saved || region.count(s) > 0) continue;
        if (region_of(trace.tensor(s)) == r) {
          stack.push_back(s);  // a temporary of the region: its re-run rebuilds it
        } else if (trace.tensor(s).producer != traces::kNoOp) {
          traces::OpId& until = held[s];
          until = std::max(until, at);
        }
      }
    }
  }
  for (const auto& [s, until] : held) {
    Placement hold{s, TensorAction::kKeep, traces::kNoOp, "", 0, 0};
    hold.hold_until = until;
    plan->placements.push_back(hold);
  }
  return point;
}

std::string RecomputeModulesError(const std::vector<std::string>& modules) {
  return NotAmong("recompute module", modules, kRecomputeModules);
}

std::string OffloadModulesError(const std::vector<std::string>& modules) {
  return NotAmong("offload module", modules, traces::kOffloadModules);
}

traces::Plan BasePlan(const traces::Trace& trace) {
  return traces::PlanTemplate(trace, /*policy=*/"");  // the policy that fills it names it
}

int AdaptiveFirstKeptLayer(const traces::Trace& trace, const HardwareOptions& hw,
                           const PolicyOptions& options) {
  const int gpu = options.gpu >= 0 ? options.gpu : SlowestArray(hw);
  const ArrayFigures array = ArrayFor(hw, gpu);
  double write_GBps = std::min(array.write_GBps, hw.host_link.d2h_GBps);
  if (!hw.storage.gds) write_GBps = std::min(write_GBps, hw.host_memory.bandwidth_GBps / 2);
  const double write_Bps = write_GBps * 1e9;
  OpCostModel cost(hw, trace.header);
  // Each layer's forward start (the forward time before its first op) and the
  // whole forward pass's time, in op order.
  std::map<int, double> layer_start, layer_bytes;
  double forward_seconds = 0;
  for (const traces::Op& op : trace.ops) {
    if (op.phase != Phase::kForward) continue;
    if (op.layer != traces::kNoLayer) layer_start.emplace(op.layer, forward_seconds);
    forward_seconds += static_cast<double>(cost.OpTimeNs(op)) * 1e-9;
  }
  for (TensorId t : traces::OffloadCandidates(trace, options.min_offload_bytes)) {
    layer_bytes[trace.tensor(t).layer] +=
        static_cast<double>(trace.tensor(trace.StorageOf(t)).bytes);
  }
  // The writes must hide behind the forward pass, as traces::RequiredWriteGBps
  // (what a plan reports it needs) counts them: offload layers 0..n−1 while,
  // for every offloaded layer p, the bytes of layers p..n−1 fit in what the
  // drives write from p's start to the end of the forward pass,
  // Σ_{p≤q<n} bytes_q ≤ B_write · (T_fwd − start_p). For p = 0 this is the
  // plan's need (bytes over forward time) at most B_write. (FlashTrain's
  // solve_num_adaptive_keep_layers also counts backward, 2× forward, as write
  // time: its plans need more than the drives give; ssdtrain-paper keeps it.)
  double min_slack = 0;  // min over offloaded p of B·(T_fwd − start_p) − Σ_{p≤q<n} bytes_q
  bool any = false;
  int last_layer = -1;
  for (const auto& [layer, start] : layer_start) {
    const double bytes = layer_bytes.count(layer) ? layer_bytes[layer] : 0;
    const double own = write_Bps * (forward_seconds - start) - bytes;
    const double slack = any ? std::min(min_slack - bytes, own) : own;
    if (slack < 0) return layer;
    min_slack = slack;
    any = true;
    last_layer = layer;
  }
  return last_layer + 1;
}

Result<traces::Plan> MakeFixedPlan(std::string_view policy, const traces::Trace& trace,
                                   const HardwareOptions& hw, const traces::Plan& base,
                                   const PolicyOptions& options) {
  if (policy == "offload-ssd") {
    return traces::OffloadAllPlan(trace, base,
                                  {options.min_offload_bytes, options.prefetch_lookahead_modules});
  }
  traces::Plan plan = traces::KeepAllPlan(trace, base);
  if (policy == "keep") return plan;
  plan.policy = std::string(policy);
  if (policy == "recompute-sac") return MakeSacPlan(trace, plan);
  if (policy == "recompute-full" || policy == "recompute-selective") {
    const bool full = policy == "recompute-full";
    if (const std::string why = RecomputeModulesError(options.recompute_modules); !why.empty()) {
      return Status::InvalidArgument(why);
    }
    const bool core = Selected(options.recompute_modules, "core_attn");
    const bool mla_up = Selected(options.recompute_modules, "mla_up_proj");
    if (options.recompute_every < 1) {
      return Status::InvalidArgument("--recompute-every: expected a positive integer, got " +
                                     std::to_string(options.recompute_every));
    }
    // The blocks recompute-full rebuilds: every recompute_every-th of the
    // stage's, in forward order, counted from 1.
    std::set<int> seen, rebuilt;
    for (const traces::Op& op : trace.ops) {
      if (op.phase != Phase::kForward || op.layer == traces::kNoLayer) continue;
      if (!seen.insert(op.layer).second) continue;
      if (static_cast<int64_t>(seen.size()) % options.recompute_every == 0) {
        rebuilt.insert(op.layer);
      }
    }
    for (TensorId t : traces::OffloadCandidates(trace)) {
      const traces::Tensor& tensor = trace.tensor(t);
      if (tensor.producer == traces::kNoOp) continue;  // a view: nothing to re-run
      if (trace.op(tensor.producer).layer != tensor.layer) continue;
      if (traces::ReadOutsideLayer(trace, tensor, tensor.layer)) continue;  // the block's output
      if (full && rebuilt.count(tensor.layer) == 0) continue;
      if (!full && !(core && InAttentionCore(trace, tensor)) &&
          !(mla_up && InMlaUpProjection(trace, tensor))) {
        continue;
      }
      plan.placements.push_back(Placement{t, TensorAction::kRecompute, traces::kNoOp, "", 0, 0});
    }
    // The checkpointed regions: a block (recompute-full), or each selected
    // module of a block (Megatron-Core checkpoints core_attn and mla_up_proj
    // apart).
    SSDTRAIN_RETURN_IF_ERROR(
        SetRerunPoints(trace, &plan, [&](const traces::Tensor& t) -> int64_t {
          return full ? t.layer : 2 * int64_t{t.layer} + (InAttentionCore(trace, t) ? 0 : 1);
        }).status());
    return plan;
  }
  const std::vector<TensorId> candidates =
      traces::OffloadCandidates(trace, options.min_offload_bytes);
  const std::vector<traces::OpId> prefetch =
      traces::LookaheadPrefetchOps(trace, options.prefetch_lookahead_modules);
  if (policy == "offload-host") {
    int64_t budget =
        options.allow_host_offload ? HostPinnedBytesPerMicroBatch(hw, base.num_micro_batches) : 0;
    for (TensorId t : candidates) {
      const int64_t bytes = trace.tensor(trace.StorageOf(t)).bytes;
      if (bytes > budget) break;  // in forward order: the earliest layers go to the host
      budget -= bytes;
      plan.placements.push_back(Offload(trace, prefetch, t, TensorAction::kOffloadHost));
    }
    return plan;
  }
  if (policy == "ssdtrain-paper") return MakeSsdtrainPaperPlan(trace, hw, plan, options);
  if (policy == "megatron-offload") {
    if (const std::string why = OffloadModulesError(options.offload_modules); !why.empty()) {
      return Status::InvalidArgument(why);
    }
    // The storages a chosen module's backward reads.
    std::vector<bool> chosen(trace.tensors.size(), false);
    for (const traces::Tensor& t : trace.tensors) {
      for (traces::OpId c : t.consumers) {
        const traces::Op& op = trace.op(c);
        if (op.phase == Phase::kBackward &&
            Selected(options.offload_modules, traces::OffloadModuleOf(op))) {
          chosen[static_cast<size_t>(trace.StorageOf(t.id))] = true;
        }
      }
    }
    int64_t budget =
        options.allow_host_offload ? HostPinnedBytesPerMicroBatch(hw, base.num_micro_batches) : 0;
    for (TensorId t : traces::OffloadCandidates(trace)) {
      const traces::Tensor& storage = trace.tensor(trace.StorageOf(t));
      if (!chosen[static_cast<size_t>(storage.id)]) continue;
      if (storage.bytes < kMegatronMinOffloadElements * traces::DTypeSize(storage.dtype)) continue;
      if (storage.bytes > budget) break;  // in forward order, as its groups are
      budget -= storage.bytes;
      plan.placements.push_back(Offload(trace, prefetch, t, TensorAction::kOffloadHost));
    }
    return plan;
  }
  if (policy == "ssdtrain") {
    const int first_kept = AdaptiveFirstKeptLayer(trace, hw, options);
    for (TensorId t : candidates) {
      if (trace.tensor(t).layer >= first_kept) continue;
      plan.placements.push_back(Offload(trace, prefetch, t, TensorAction::kOffloadSsd));
    }
    return plan;
  }
  return Status::InvalidArgument(
      "policy: expected keep, recompute-full, recompute-selective, recompute-sac, offload-host, "
      "offload-ssd, ssdtrain, ssdtrain-paper, megatron-offload, optimal or auto, got \"" +
      std::string(policy) + "\"");
}

}  // namespace ssdtrain::sim

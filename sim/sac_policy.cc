// recompute-sac (sim/policy.h): torchtitan's per-op selective activation
// checkpointing, as its checkpoint wrapper's policy decides per op of a
// transformer block's forward (torchtitan/parallelisms/parallelize_llama.py,
// _apply_ac_to_transformer_block with selective_ac_option "op", and its
// _save_list; the same rule in torchtitan/distributed/activation_checkpoint.py
// today):
//   - MUST_SAVE: matrix multiplies (aten.mm), except every second one of the
//     block, counted from 1 in forward order; the fused attention kernels
//     (flash / memory-efficient SDPA); the tensor-parallel reduce-scatters;
//   - PREFER_RECOMPUTE: everything else (norms, rotary, activations, the
//     residual adds, batched matmuls, all-gathers).
// torch.utils.checkpoint then keeps the block's input and the outputs of
// the saved ops (its cache, read by autograd or not) and re-runs the other
// ops in backward, taking the saved ops' outputs from the cache. Here:
// recompute every saved-for-backward activation of the block that a
// recomputed op produces, all of the block's at once when backward first
// needs one (the re-run, SetRerunPoints); keep those a saved op produces; hold
// a saved op's outputs that autograd does not save (Placement::hold_until)
// until that re-run where it reads them, or else until the block's backward
// starts (where PyTorch's re-run consumes its cache). On a block built with separate projections
// (models: projections "separate", torchtitan's wq, wk, wv and w1, w3) the saved GEMMs are wq, wv,
// w1 and w2 and the recomputed ones wk, wo and w3.
#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "sim/policy.h"
#include "traces/op_scope.h"
#include "traces/storage_plan.h"
#include "traces/uniform_plans.h"

namespace ssdtrain::sim {
namespace {

using traces::Op;
using traces::OpId;
using traces::OpKind;
using traces::Phase;
using traces::Placement;
using traces::TensorAction;
using traces::TensorId;

bool IsLinearGemm(const Op& op) {
  return op.kind == OpKind::kGemm && op.gemm.has_value() && op.gemm->batch == 1;
}

// Whether torchtitan's policy saves `op`'s outputs, given whether it is an
// odd-numbered linear GEMM of its block.
bool SavedKind(const Op& op, bool odd_gemm) {
  if (IsLinearGemm(op)) return odd_gemm;
  if (op.kind == OpKind::kAttention) return true;
  return op.kind == OpKind::kCollective && op.name.find("reduce_scatter") != std::string::npos;
}

}  // namespace

Result<traces::Plan> MakeSacPlan(const traces::Trace& trace, traces::Plan plan) {
  plan.policy = "recompute-sac";
  // Which forward ops of the blocks the policy saves.
  std::vector<bool> saved_op(trace.ops.size(), false);
  std::map<std::pair<int, int64_t>, int64_t> gemms;  // (layer, micro-batch) -> count
  // Each (layer, micro-batch)'s first backward op: where its re-run starts.
  std::map<std::pair<int, int64_t>, OpId> backward_start;
  for (const Op& op : trace.ops) {
    if (op.layer == traces::kNoLayer) continue;
    const std::pair<int, int64_t> key{op.layer, op.micro_batch};
    if (op.phase == Phase::kBackward) backward_start.emplace(key, op.id);
    if (op.phase != Phase::kForward) continue;
    const bool odd = IsLinearGemm(op) && ++gemms[key] % 2 == 1;
    saved_op[static_cast<size_t>(op.id)] = SavedKind(op, odd);
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const traces::StoragePlan sp, traces::ResolveStorages(trace, "trace"));
  // Recompute what the recomputed ops produce; the rest of the block's
  // saved tensors stay.
  std::vector<bool> recomputed(sp.storages.size(), false);
  for (TensorId t : traces::OffloadCandidates(trace)) {
    const traces::Tensor& tensor = trace.tensor(t);
    if (tensor.producer == traces::kNoOp) continue;  // a view: nothing to re-run
    const Op& producer = trace.op(tensor.producer);
    if (producer.layer != tensor.layer || saved_op[static_cast<size_t>(producer.id)]) continue;
    if (traces::ReadOutsideLayer(trace, tensor, tensor.layer)) continue;  // the block's output
    plan.placements.push_back(Placement{t, TensorAction::kRecompute, traces::kNoOp, "", 0, 0});
    recomputed[static_cast<size_t>(sp.IndexOf(t))] = true;
  }
  // A block's re-run: all of it when backward first needs one of them.
  SSDTRAIN_ASSIGN_OR_RETURN(
      const auto rerun,
      SetRerunPoints(trace, &plan, [](const traces::Tensor& t) -> int64_t { return t.layer; }));
  // A storage gone by backward (not saved, or recomputed), which a recompute
  // re-runs its producer for when something downstream needs it.
  auto gone = [&](int index) {
    const traces::StorageInfo& s = sp.storages[static_cast<size_t>(index)];
    if (s.persistent()) return false;
    return recomputed[static_cast<size_t>(index)] || !s.saved;
  };
  // The saved ops' outputs autograd does not keep: held until the last
  // backward op whose recompute re-runs one of their consumers.
  for (const Op& op : trace.ops) {
    if (!saved_op[static_cast<size_t>(op.id)]) continue;
    for (TensorId out : op.outputs) {
      const int index = sp.IndexOf(out);
      const traces::StorageInfo& s = sp.storages[static_cast<size_t>(index)];
      if (s.root != out || s.saved || !s.activation() || s.producer != op.id) continue;
      const traces::Tensor& tensor = trace.tensor(out);
      OpId until = backward_start.count({op.layer, op.micro_batch})
                       ? backward_start.at({op.layer, op.micro_batch})
                       : traces::kNoOp;
      // Read beyond the block: it stays until then anyway.
      if (traces::ReadOutsideLayer(trace, tensor, op.layer)) continue;
      // Downstream through what is gone by backward: each recomputed storage
      // reached is rebuilt by a run that re-runs a consumer of `out` first.
      std::vector<OpId> stack(tensor.consumers.begin(), tensor.consumers.end());
      std::vector<bool> seen(trace.ops.size(), false);
      while (!stack.empty()) {
        const Op& c = trace.op(stack.back());
        stack.pop_back();
        if (seen[static_cast<size_t>(c.id)]) continue;
        seen[static_cast<size_t>(c.id)] = true;
        if (c.phase != Phase::kForward || c.layer != op.layer) continue;
        for (TensorId o : c.outputs) {
          const int j = sp.IndexOf(o);
          if (sp.storages[static_cast<size_t>(j)].root != o || !gone(j)) continue;
          const traces::StorageInfo& g = sp.storages[static_cast<size_t>(j)];
          if (recomputed[static_cast<size_t>(j)] && g.first_backward_use != traces::kNoOp &&
              rerun.count(op.layer)) {
            until = std::max(until, rerun.at(op.layer));  // the re-run reads it
          }
          for (OpId next : trace.tensor(o).consumers) stack.push_back(next);
        }
      }
      if (until == traces::kNoOp) continue;  // no backward of its block in this trace
      Placement hold{out, TensorAction::kKeep, traces::kNoOp, "", 0, 0};
      hold.hold_until = until;
      plan.placements.push_back(hold);
    }
  }
  return plan;
}

}  // namespace ssdtrain::sim

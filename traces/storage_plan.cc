#include "traces/storage_plan.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>

#include "traces/detail/storage_links.h"
#include "traces/detail/storage_points.h"

namespace ssdtrain::traces {
namespace {

// A relative path that stays inside its directory: no "..", not absolute, not empty.
bool StaysInside(const std::string& file) {
  if (file.empty()) return false;
  std::filesystem::path p(file);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

int64_t Pad(int64_t bytes) {
  return (bytes + kOffloadExtentAlignment - 1) / kOffloadExtentAlignment * kOffloadExtentAlignment;
}

std::string Name(const Tensor& t) { return "tensor " + std::to_string(t.id) + " (" + t.name + ")"; }

}  // namespace

bool IsWeightGradient(const Trace& trace, const Tensor& t) {
  if (t.kind != TensorKind::kGradient) return false;
  if (t.consumers.empty()) return true;
  for (OpId c : t.consumers) {
    if (c >= 0 && static_cast<size_t>(c) < trace.ops.size() &&
        trace.op(c).phase == Phase::kOptimizer) {
      return true;
    }
  }
  return false;
}

bool GradientsSetToNone(const Trace& trace) { return trace.header.weight_grads == "set_to_none"; }

bool IsPersistent(const Trace& trace, const Tensor& t) {
  return t.producer == kNoOp || t.kind == TensorKind::kWeight ||
         t.kind == TensorKind::kOptimizerState ||
         (!GradientsSetToNone(trace) && IsWeightGradient(trace, t));
}

std::string OffloadFileName(TensorId storage) {
  // Appended piecewise: GCC 12 warns (-Wrestrict) on "lit" + std::string + "lit".
  std::string name = "t";
  name += std::to_string(storage);
  name += ".bin";
  return name;
}

int64_t DeviceBytes(int64_t bytes, int64_t alignment) {
  if (bytes <= 0 || alignment <= 1) return std::max<int64_t>(bytes, 0);
  return (bytes + alignment - 1) / alignment * alignment;
}

int64_t ReplayAttentionBatch(const Op& op) {
  constexpr int64_t s = kReplayAttentionGemmSide;
  return std::max<int64_t>(1, op.flops / (2 * s * s * s));
}

int64_t ReplayGemmWorkspaceBytes(int64_t m, int64_t n, int64_t k, int64_t batch,
                                 int64_t output_region_bytes) {
  constexpr int64_t kElementBytes = 4;  // fp32, the widest GEMM dtype
  const int64_t fit = output_region_bytes / std::max<int64_t>(1, m * n * kElementBytes);
  const int64_t chunk = std::clamp<int64_t>(fit, 1, std::max<int64_t>(1, batch));
  return (m * k + k * n + m * n * chunk) * kElementBytes;
}

int64_t ReplayWorkspaceBytes(const Trace& trace, int64_t output_region_bytes) {
  int64_t bytes = 0;
  for (const Op& op : trace.ops) {
    if (op.gemm) {
      const GemmDims& g = *op.gemm;
      bytes =
          std::max(bytes, ReplayGemmWorkspaceBytes(g.m, g.n, g.k, g.batch, output_region_bytes));
    } else if (op.kind == OpKind::kAttention && op.flops > 0) {
      constexpr int64_t s = kReplayAttentionGemmSide;
      bytes = std::max(
          bytes, ReplayGemmWorkspaceBytes(s, s, s, ReplayAttentionBatch(op), output_region_bytes));
    }
  }
  return bytes;
}

Result<StoragePlan> ResolveStorages(const Trace& trace, const std::string& source) {
  const auto n_tensors = static_cast<int64_t>(trace.tensors.size());
  StoragePlan sp;
  sp.index_of.assign(trace.tensors.size(), -1);
  // Storages in root-id order. A root's id is below its aliases' only when the
  // trace lists views after their base, so resolve roots first.
  for (const Tensor& t : trace.tensors) {
    const TensorId root = trace.StorageOf(t.id);
    if (root < 0 || root >= n_tensors) {
      return Status::InvalidArgument(source + ": tensors[" + std::to_string(t.id) +
                                     "].alias_of: the alias chain leaves the trace");
    }
    if (root != t.id) continue;
    StorageInfo s;
    s.root = root;
    s.bytes = t.bytes;
    s.producer = t.producer;
    s.role = IsPersistent(trace, t)              ? StorageRole::kPersistent
             : IsWeightGradient(trace, t)        ? StorageRole::kWeightGradient
             : t.kind == TensorKind::kActivation ? StorageRole::kActivation
                                                 : StorageRole::kTransient;
    sp.index_of[static_cast<size_t>(root)] = static_cast<int>(sp.storages.size());
    sp.storages.push_back(std::move(s));
  }
  for (const Tensor& t : trace.tensors) {
    const int index = sp.index_of[static_cast<size_t>(trace.StorageOf(t.id))];
    sp.index_of[static_cast<size_t>(t.id)] = index;
    StorageInfo& s = sp.storages[static_cast<size_t>(index)];
    if (t.saved_for_backward) s.saved = true;
    // A member another forward op made: that op writes the storage in place.
    if (t.id != s.root && t.producer != kNoOp && t.producer != s.producer && t.producer >= 0 &&
        t.producer < static_cast<OpId>(trace.ops.size()) &&
        trace.op(t.producer).phase == Phase::kForward) {
      s.writers.push_back(t.producer);
    }
  }
  for (StorageInfo& s : sp.storages) {
    std::sort(s.writers.begin(), s.writers.end());
    s.writers.erase(std::unique(s.writers.begin(), s.writers.end()), s.writers.end());
  }

  // Lifetimes and per-op storage lists. An async collective's inputs are read
  // until the GEMM beside it has run (AsyncOverlapGemm).
  std::vector<std::vector<TensorId>> held_by_gemm(trace.ops.size());
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    const OpId gemm = AsyncOverlapGemm(trace, static_cast<OpId>(i));
    if (gemm == kNoOp) continue;
    const Op& op = trace.ops[i];
    auto& held = held_by_gemm[static_cast<size_t>(gemm)];
    held.insert(held.end(), op.inputs.begin(), op.inputs.end());
  }
  for (const Op& op : trace.ops) {
    auto touch = [&](TensorId t, OpLists& list) -> Status {
      if (t < 0 || t >= n_tensors) {
        return Status::InvalidArgument(source + ": op " + std::to_string(op.id) + " names tensor " +
                                       std::to_string(t) + ", which the trace does not have");
      }
      const int index = sp.index_of[static_cast<size_t>(t)];
      list.AddUnique(index);
      StorageInfo& s = sp.storages[static_cast<size_t>(index)];
      s.last_use = std::max(s.last_use, op.id);
      if (op.phase == Phase::kForward) {
        s.last_forward_use = std::max(s.last_forward_use, op.id);
      } else if (s.first_backward_use == kNoOp) {
        s.first_backward_use = op.id;
      }
      return Status::Ok();
    };
    for (TensorId t : op.inputs) SSDTRAIN_RETURN_IF_ERROR(touch(t, sp.op_inputs));
    for (TensorId t : held_by_gemm[static_cast<size_t>(&op - trace.ops.data())]) {
      SSDTRAIN_RETURN_IF_ERROR(touch(t, sp.op_inputs));
    }
    sp.op_inputs.EndOp();
    for (TensorId t : op.outputs) SSDTRAIN_RETURN_IF_ERROR(touch(t, sp.op_outputs));
    sp.op_outputs.EndOp();
  }
  for (StorageInfo& s : sp.storages) {  // a weight gradient read by nothing: the step's result
    if (s.role == StorageRole::kWeightGradient && !trace.ops.empty() &&
        trace.tensor(s.root).consumers.empty()) {
      s.last_use = trace.ops.back().id;
    }
  }
  for (const StorageInfo& s : sp.storages) {
    if (s.persistent()) sp.persistent_bytes += s.bytes;
  }
  detail::PairRegathers(trace, sp);
  sp.prefetch_at = OpLists::Grouped(trace.ops.size(), {});  // nothing moves: every storage kept
  sp.evict_at = sp.prefetch_at;
  sp.rebuild_at = sp.prefetch_at;
  sp.rerun_keep = sp.prefetch_at;
  return sp;
}

Result<StoragePlan> ResolvePlan(const Trace& trace, const StoragePlan& storages, const Plan& plan,
                                const std::string& source) {
  const auto n_tensors = static_cast<int64_t>(trace.tensors.size());
  const auto n_ops = static_cast<int64_t>(trace.ops.size());
  const bool unplaced = std::all_of(storages.storages.begin(), storages.storages.end(),
                                    [](const StorageInfo& s) { return s.placed_by == -1; });
  if (storages.index_of.size() != trace.tensors.size() ||
      storages.op_inputs.size() != trace.ops.size() || !unplaced) {
    return Status::Internal(
        source + ": resolved against storages that are not its trace's own (ResolveStorages)");
  }
  StoragePlan sp = storages;
  // Placements: one action per storage.
  // Tensor id -> the placement that names it (duplicates are refused); -1: none.
  std::vector<int64_t> placed_at(trace.tensors.size(), -1);
  std::vector<int> first_placement(sp.storages.size(), -1);
  for (size_t i = 0; i < plan.placements.size(); ++i) {
    const Placement& p = plan.placements[i];
    // Built only for a message: a search resolves thousands of placements a plan.
    auto at = [&] { return source + ": placements[" + std::to_string(i) + "]"; };
    if (p.tensor < 0 || p.tensor >= n_tensors) {
      return Status::FailedPrecondition(at() + ".tensor: tensor " + std::to_string(p.tensor) +
                                        " does not exist in the trace");
    }
    if (const int64_t earlier = placed_at[static_cast<size_t>(p.tensor)]; earlier >= 0) {
      return Status::InvalidArgument(at() + ".tensor: tensor " + std::to_string(p.tensor) +
                                     " is already placed by placements[" + std::to_string(earlier) +
                                     "]");
    }
    placed_at[static_cast<size_t>(p.tensor)] = static_cast<int64_t>(i);
    const Tensor& t = trace.tensor(p.tensor);
    if (p.action != TensorAction::kKeep && !t.saved_for_backward) {
      return Status::InvalidArgument(at() + ".action: " + Name(t) +
                                     " is not saved for backward; only saved tensors can be " +
                                     std::string(ToString(p.action)));
    }
    const bool offload =
        p.action == TensorAction::kOffloadSsd || p.action == TensorAction::kOffloadHost;
    if (offload && !t.offloadable) {
      return Status::InvalidArgument(at() + ".action: " + Name(t) + " is not offloadable");
    }
    if (p.action == TensorAction::kRecompute && t.producer == kNoOp) {
      return Status::InvalidArgument(at() + ".action: tensor " + std::to_string(t.id) +
                                     " has no producer op to recompute it with");
    }
    if (p.prefetch_before != kNoOp && (p.prefetch_before < 0 || p.prefetch_before >= n_ops)) {
      return Status::InvalidArgument(at() + ".prefetch_before: op " +
                                     std::to_string(p.prefetch_before) + " does not exist");
    }
    if (p.action == TensorAction::kRecompute && p.prefetch_before != kNoOp &&
        trace.op(p.prefetch_before).phase != Phase::kBackward) {
      return Status::InvalidArgument(at() + ".prefetch_before: op " +
                                     std::to_string(p.prefetch_before) +
                                     " is not a backward op; a recomputed tensor's prefetch_before "
                                     "is where backward rebuilds it");
    }
    if (p.evict_before != kNoOp) {
      if (!offload) {
        return Status::InvalidArgument(at() +
                                       ".evict_before: only an offloaded tensor is evicted (" +
                                       Name(t) + " is " + std::string(ToString(p.action)) + ")");
      }
      if (p.evict_before < 0 || p.evict_before >= n_ops) {
        return Status::InvalidArgument(at() + ".evict_before: op " +
                                       std::to_string(p.evict_before) + " does not exist");
      }
      if (trace.op(p.evict_before).phase == Phase::kOptimizer) {
        return Status::InvalidArgument(at() + ".evict_before: op " +
                                       std::to_string(p.evict_before) +
                                       " is in the optimizer phase; a storage is evicted between "
                                       "its last forward use and backward");
      }
    }
    if (p.hold_until != kNoOp) {
      if (p.action != TensorAction::kKeep) {
        return Status::InvalidArgument(at() + ".hold_until: only a kept tensor is held (" +
                                       Name(t) + " is " + std::string(ToString(p.action)) + ")");
      }
      if (p.hold_until < 0 || p.hold_until >= n_ops) {
        return Status::InvalidArgument(at() + ".hold_until: op " + std::to_string(p.hold_until) +
                                       " does not exist");
      }
      if (t.producer == kNoOp || p.hold_until <= t.producer ||
          trace.op(p.hold_until).phase == Phase::kOptimizer) {
        return Status::InvalidArgument(
            at() + ".hold_until: op " + std::to_string(p.hold_until) + " must come after " +
            Name(t) + "'s producer" +
            (t.producer == kNoOp ? " (it has none)" : " (op " + std::to_string(t.producer) + ")") +
            ", outside the optimizer phase");
      }
    }
    if (p.action == TensorAction::kOffloadSsd) {
      if (!StaysInside(p.file)) {
        return Status::InvalidArgument(at() + ".file: \"" + p.file +
                                       "\" must be a relative name inside the offload directory "
                                       "(no \"..\", not absolute, not empty)");
      }
      if (p.offset < 0 || p.device < 0) {
        return Status::InvalidArgument(at() + ": offset and device must not be negative");
      }
      if (p.offset % kOffloadExtentAlignment != 0) {
        return Status::InvalidArgument(at() + ".offset: " + std::to_string(p.offset) +
                                       " must be a multiple of " +
                                       std::to_string(kOffloadExtentAlignment) + " (O_DIRECT)");
      }
    }
    const int index = sp.index_of[static_cast<size_t>(p.tensor)];
    StorageInfo& s = sp.storages[static_cast<size_t>(index)];
    if (s.persistent()) {
      if (p.action != TensorAction::kKeep || p.hold_until != kNoOp) {
        return Status::InvalidArgument(at() + ".action: " + Name(t) + " is resident all step (" +
                                       "a weight, weight gradient, optimizer state or step input)" +
                                       "; it can only be kept");
      }
      continue;
    }
    const int first = first_placement[static_cast<size_t>(index)];
    if (first >= 0) {
      const Placement& q = plan.placements[static_cast<size_t>(first)];
      const bool same_place =
          p.action != TensorAction::kOffloadSsd ||
          std::tie(p.file, p.device, p.offset) == std::tie(q.file, q.device, q.offset);
      if (p.action != q.action || !same_place) {
        return Status::InvalidArgument(at() + ": " + Name(t) + " shares its storage with tensor " +
                                       std::to_string(q.tensor) + ", placed by placements[" +
                                       std::to_string(first) + "] as " +
                                       std::string(ToString(q.action)) +
                                       (q.action == TensorAction::kOffloadSsd
                                            ? " at " + q.file + ":" + std::to_string(q.offset)
                                            : "") +
                                       "; one storage takes one placement");
      }
      if (p.prefetch_before != kNoOp &&
          (s.prefetch_before == kNoOp || p.prefetch_before < s.prefetch_before)) {
        s.prefetch_before = p.prefetch_before;
      }
      s.hold_until = std::max(s.hold_until, p.hold_until);
      if (p.action == TensorAction::kRecompute && p.prefetch_before != kNoOp &&
          (s.rebuild_before == kNoOp || p.prefetch_before < s.rebuild_before)) {
        s.rebuild_before = p.prefetch_before;
      }
      if (p.evict_before != s.evict_before) {
        return Status::InvalidArgument(
            at() + ".evict_before: " + Name(t) + " shares its storage with tensor " +
            std::to_string(q.tensor) + ", whose placements[" + std::to_string(first) +
            "] evicts it " +
            (s.evict_before == kNoOp ? "when its write lands"
                                     : "before op " + std::to_string(s.evict_before)) +
            "; one storage has one eviction point");
      }
      continue;
    }
    first_placement[static_cast<size_t>(index)] = static_cast<int>(i);
    s.placed_by = p.tensor;
    s.action = p.action;
    if (offload) s.prefetch_before = p.prefetch_before;
    if (offload) s.evict_before = p.evict_before;
    s.hold_until = p.hold_until;
    if (p.action == TensorAction::kRecompute) s.rebuild_before = p.prefetch_before;
    if (p.action == TensorAction::kOffloadSsd) {
      s.file = p.file;
      s.device = p.device;
      s.offset = p.offset;
      sp.max_device = std::max(sp.max_device, p.device);
    }
  }

  // Extents: none may overlap another in the same file of the same directory.
  std::map<std::pair<int, std::string>, std::vector<std::pair<int64_t, int>>> extents;
  for (size_t i = 0; i < sp.storages.size(); ++i) {
    StorageInfo& s = sp.storages[i];
    if (s.action == TensorAction::kOffloadSsd) {
      sp.ssd_bytes += s.bytes;
      extents[{s.device, s.file}].emplace_back(s.offset, static_cast<int>(i));
    } else if (s.action == TensorAction::kOffloadHost) {
      s.host_offset = sp.host_region_bytes;
      sp.host_region_bytes += Pad(s.bytes);
    }
  }
  for (auto& [where, list] : extents) {
    std::sort(list.begin(), list.end());
    for (size_t k = 1; k < list.size(); ++k) {
      const StorageInfo& a = sp.storages[static_cast<size_t>(list[k - 1].second)];
      const StorageInfo& b = sp.storages[static_cast<size_t>(list[k].second)];
      if (a.offset + Pad(a.bytes) > b.offset) {
        return Status::InvalidArgument(
            source + ": placements[" + std::to_string(placed_at[static_cast<size_t>(b.placed_by)]) +
            "].offset: tensor " + std::to_string(b.placed_by) + " at " + where.second + ":" +
            std::to_string(b.offset) + " overlaps tensor " + std::to_string(a.placed_by) +
            " at offset " + std::to_string(a.offset) + " (" + std::to_string(Pad(a.bytes)) +
            " bytes on disk)");
      }
    }
  }

  detail::ApplyHolds(trace, sp);
  SSDTRAIN_RETURN_IF_ERROR(detail::ResolveRebuildPoints(trace, placed_at, source, sp));
  SSDTRAIN_RETURN_IF_ERROR(detail::ResolveMovePoints(trace, placed_at, source, sp));
  return sp;
}

Result<StoragePlan> ResolvePlan(const Trace& trace, const Plan& plan, const std::string& source) {
  SSDTRAIN_ASSIGN_OR_RETURN(const StoragePlan storages, ResolveStorages(trace, source));
  return ResolvePlan(trace, storages, plan, source);
}

Status CheckDevices(const StoragePlan& storage_plan, int directories, const std::string& source) {
  if (storage_plan.max_device < directories) return Status::Ok();
  for (const StorageInfo& s : storage_plan.storages) {
    if (s.action == TensorAction::kOffloadSsd && s.device >= directories) {
      return Status::InvalidArgument(
          source + ": the placement of tensor " + std::to_string(s.placed_by) + " names device " +
          std::to_string(s.device) + ", but the run has " + std::to_string(directories) +
          " offload director" + (directories == 1 ? "y" : "ies") + " (device 0 to " +
          std::to_string(directories - 1) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace ssdtrain::traces

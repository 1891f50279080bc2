// TraceBuilder::ShardForZero: ZeRO-2/3's tensors and ops in the trace
// (trace_builder.h, ZeroSpec; traces/layout.h has the stages). Run by Finish()
// on the finished forward and backward, before the optimizer's ops.
//
// Units, as FSDP wraps a model (torchtitan wraps each block, the embedding
// and the output layer): a block's weights are one unit; a weight outside the
// blocks is a unit of its own.
//
// Stage 3, the weights (PyTorch FSDP2 with reshard_after_forward, Megatron-
// FSDP's optim_grads_params): each weight is held as its shard, its elements
// split over `shards` ranks and rounded up (the flat shard FSDP pads to equal
// sizes), resident all step. A run is a maximal stretch of ops of one phase
// and one layer; the unit's weights that a run reads are all-gathered by one
// op, L<layer>.zero_all_gather, into full transient copies (workspaces named
// "<weight>.gathered", freed after their last reader, that run's last op),
// and the run reads those. The k-th gather of a phase is issued before the
// first reader of the (k − prefetch)-th (the first of the phase at least):
// FSDP's prefetch, which holds prefetch + 1 units' full weights at a time. A
// recompute of a forward op in backward gathers again (the copy was freed).
//
// Stages 2 and 3, the gradients (FSDP, Megatron-FSDP's optim_grads): once
// backward has written a unit's last gradient, one op,
// L<layer>.zero_reduce_scatter, reads the unit's full gradients (now
// transient: nothing else reads them) and writes each one's shard, which the
// optimizer reads: the weight gradient, resident as the header's weight_grads
// says. In a whole step each micro-batch reduce-scatters its own and the later
// ones accumulate into the shard (FSDP without no_sync). With
// defer_grad_sync (FSDP2's set_requires_gradient_sync(False) on all but the
// last micro-batch) the reduce-scatters come after the backward instead, as
// the optimizer phase's first ops, in the order the backward completes the
// units: the full gradients are then weight gradients (traces/storage_plan.h),
// accumulated over a whole step's micro-batches, and a step reduce-scatters
// once. FSDP issues them during the last backward; here they follow it.
//
// The gathers run on kZeroGatherStream, the reduce-scatters on
// kZeroReduceStream (traces/collective_kind.h), over the shard group. With
// ep > 1 a block's routed experts (traces::IsRoutedExpert) are a unit of
// their own, split over expert_shards ranks (the expert-data-parallel group)
// by ops named L<layer>.experts.zero_all_gather and
// L<layer>.experts.zero_reduce_scatter, which run over that group: FSDP with
// expert parallelism wraps the experts apart (torchtitan's dp_shard_mod_ep
// mesh), Megatron-FSDP keeps them in buffers of their own.
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "models/detail/trace_builder.h"
#include "traces/collective_kind.h"
#include "traces/dp_buckets.h"

namespace ssdtrain::models::detail {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A block's units: 2·layer (its weights), 2·layer + 1 (its routed experts').
bool IsExpertUnit(int64_t unit) { return unit >= 0 && unit % 2 == 1; }

}  // namespace

void TraceBuilder::ShardForZero() {
  const int64_t dense_shards = std::max<int64_t>(1, zero_.shards);
  const int64_t expert_shards = std::max<int64_t>(1, zero_.expert_shards);
  const bool split_experts = expert_shards != dense_shards;
  auto& tensors = trace_.tensors;
  const size_t n_original = tensors.size();
  std::vector<traces::Op> ops = std::move(trace_.ops);
  trace_.ops.clear();

  // The unit of each weight: its block's (2·layer), its block's routed
  // experts' where they shard apart (2·layer + 1), or the weight itself
  // outside the blocks (keys below kNoLayer).
  std::vector<int64_t> unit(n_original, 0);
  std::vector<bool> is_weight(n_original, false);
  for (TensorId w : weights_) {
    is_weight[Index(w)] = true;
    const int layer = tensor(w).layer;
    const bool experts = split_experts && traces::IsRoutedExpert(tensor(w));
    unit[Index(w)] = layer != traces::kNoLayer ? 2 * int64_t{layer} + (experts ? 1 : 0)
                                               : traces::kNoLayer - 1 - w;
  }
  // How many ways a unit's weights and gradients are split.
  auto shards_of = [&](int64_t u) { return IsExpertUnit(u) ? expert_shards : dense_shards; };
  const bool shard_weights = zero_.stage >= 3;

  // Stage 3: the gathers. Runs of (phase, layer); per run and unit, the
  // weights read in order of first reading.
  struct Gather {
    int64_t unit = 0;
    traces::Phase phase = traces::Phase::kForward;
    size_t first_use = 0;  // index into ops
    std::vector<TensorId> weights;
    std::vector<TensorId> copies;
  };
  std::vector<Gather> gathers;
  std::vector<std::vector<size_t>> gathers_before(ops.size() + 1);
  if (shard_weights) {
    std::map<std::pair<size_t, int64_t>, size_t> gather_of;  // (run, unit) -> gather
    size_t run = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      traces::Op& op = ops[i];
      if (i > 0 && (op.phase != ops[i - 1].phase || op.layer != ops[i - 1].layer)) ++run;
      for (TensorId& in : op.inputs) {
        if (!is_weight[Index(in)]) continue;
        auto [it, added] = gather_of.emplace(std::pair{run, unit[Index(in)]}, gathers.size());
        if (added) gathers.push_back(Gather{unit[Index(in)], op.phase, i, {}, {}});
        Gather& g = gathers[it->second];
        size_t k = 0;
        while (k < g.weights.size() && g.weights[k] != in) ++k;
        if (k == g.weights.size()) {
          const traces::Tensor w = tensor(in);  // a copy: AddTensor moves the table
          const int saved_layer = layer_;
          layer_ = traces::kNoLayer;  // the weight's name carries its layer already
          const bool backward = op.phase != traces::Phase::kForward;
          std::string name = w.name + (backward ? ".gathered_bwd" : ".gathered");
          const TensorId copy = AddTensor(name, w.shape, w.dtype, TensorKind::kWorkspace);
          layer_ = saved_layer;
          tensors[Index(copy)].layer = w.layer;
          g.weights.push_back(in);
          g.copies.push_back(copy);
        }
        in = g.copies[k];
      }
    }
    // The k-th gather of a phase goes before the first reader of the
    // (k − prefetch)-th of that phase.
    size_t phase_start = 0;
    for (size_t k = 0; k < gathers.size(); ++k) {
      if (gathers[k].phase != gathers[phase_start].phase) phase_start = k;
      const size_t ahead = static_cast<size_t>(std::max<int64_t>(0, zero_.prefetch));
      const size_t at = k >= phase_start + ahead ? k - ahead : phase_start;
      gathers_before[gathers[at].first_use].push_back(k);
    }
    // The shards: each weight's elements split over the ranks, rounded up.
    sharded_elements_.assign(tensors.size(), 0);
    for (TensorId w : weights_) {
      traces::Tensor& t = tensors[Index(w)];
      int64_t elements = 1;
      for (int64_t d : t.shape) elements *= d;
      sharded_elements_[Index(w)] = elements;
      const int64_t shard = CeilDiv(elements, shards_of(unit[Index(w)]));
      t.shape = {shard};
      t.bytes = shard * traces::DTypeSize(t.dtype);
    }
  }

  // The reduce-scatters: per unit, after the op that writes its last
  // completed gradient (each gradient's producer in a one-micro-batch trace).
  std::map<int64_t, std::vector<TensorId>> unit_weights;  // weights with a gradient
  for (TensorId w : weights_) {
    if (last_grad_[Index(w)] != kNoTensor) unit_weights[unit[Index(w)]].push_back(w);
  }
  std::vector<std::vector<int64_t>> scatters_after(ops.size());
  for (const auto& [u, ws] : unit_weights) {
    traces::OpId last = traces::kNoOp;
    for (TensorId w : ws) last = std::max(last, tensor(last_grad_[Index(w)]).producer);
    if (last == traces::kNoOp) continue;  // gradients nothing writes: left as they are
    scatters_after[static_cast<size_t>(last)].push_back(u);
  }

  // The new op list.
  for (traces::Tensor& t : tensors) {
    t.producer = traces::kNoOp;
    t.consumers.clear();
  }
  std::vector<traces::OpId> new_id(ops.size(), traces::kNoOp);
  const Phase saved_phase = phase_;
  const int saved_layer = layer_;
  auto emit = [&](traces::Op op) {
    op.id = static_cast<traces::OpId>(trace_.ops.size());
    trace_.ops.push_back(std::move(op));
  };
  // "L<layer>.<suffix>" for a block, "L<layer>.experts.<suffix>" for its
  // routed experts; "<weight>.<suffix>" for a weight of its own.
  auto collective = [&](int64_t u, std::string_view suffix, Phase phase, int stream,
                        std::vector<TensorId> inputs, std::vector<TensorId> outputs) {
    traces::Op op;
    const int layer = tensor(inputs[0]).layer;
    layer_ = layer;
    const std::string scope =
        IsExpertUnit(u) ? std::string(traces::kRoutedExperts) + "." : std::string();
    op.name = layer != traces::kNoLayer ? Prefixed(scope + std::string(suffix))
                                        : tensor(inputs[0]).name + "." + std::string(suffix);
    op.kind = OpKind::kCollective;
    op.phase = phase;
    op.layer = layer;
    op.stage = stage();
    op.stream = stream;
    for (TensorId t : inputs) op.bytes_read += tensor(t).bytes;
    for (TensorId t : outputs) op.bytes_written += tensor(t).bytes;
    op.inputs = std::move(inputs);
    op.outputs = std::move(outputs);
    emit(std::move(op));
  };
  // The unit's reduce-scatter: its full gradients to their shards.
  auto reduce_scatter = [&](int64_t u, Phase phase) {
    const int64_t shards = shards_of(u);
    std::vector<TensorId> full, parts;
    for (TensorId w : unit_weights[u]) {
      const std::string name = tensor(w).name;
      const int layer = tensor(w).layer;
      const TensorId g = last_grad_[Index(w)];
      const int64_t elements = Elements(w);
      layer_ = traces::kNoLayer;
      const TensorId part = AddTensor(name + ".grad_shard", {CeilDiv(elements, shards)},
                                      tensor(g).dtype, TensorKind::kGradient);
      tensors[Index(part)].layer = layer;
      full.push_back(g);
      parts.push_back(part);
      last_grad_[Index(w)] = part;
    }
    collective(u, traces::kZeroReduceScatterSuffix, phase, traces::kZeroReduceStream,
               std::move(full), std::move(parts));
  };
  std::vector<int64_t> deferred;  // zero_.defer_grad_sync: units in order of completion
  for (size_t i = 0; i < ops.size(); ++i) {
    for (size_t k : gathers_before[i]) {
      const Gather& g = gathers[k];
      collective(g.unit, traces::kZeroAllGatherSuffix, g.phase, traces::kZeroGatherStream,
                 g.weights, g.copies);
    }
    new_id[i] = static_cast<traces::OpId>(trace_.ops.size());
    const Phase phase = ops[i].phase;
    emit(std::move(ops[i]));
    for (int64_t u : scatters_after[i]) {
      if (zero_.defer_grad_sync) {
        deferred.push_back(u);
      } else {
        reduce_scatter(u, phase);
      }
    }
  }
  // Deferred: after the backward, as the optimizer phase's first ops, so that
  // a whole step runs them once, after its last micro-batch's backward, and
  // the full gradients are weight gradients accumulated over the micro-batches.
  for (int64_t u : deferred) reduce_scatter(u, Phase::kOptimizer);
  phase_ = saved_phase;
  layer_ = saved_layer;
  for (traces::Edge& e : trace_.edges) {
    e.from = new_id[static_cast<size_t>(e.from)];
    e.to = new_id[static_cast<size_t>(e.to)];
  }
  // Producers (the first writer) and consumers, from the new list.
  for (const traces::Op& op : trace_.ops) {
    for (TensorId in : op.inputs) tensors[Index(in)].consumers.push_back(op.id);
    for (TensorId out : op.outputs) {
      if (tensors[Index(out)].producer == traces::kNoOp) tensors[Index(out)].producer = op.id;
    }
  }
}

}  // namespace ssdtrain::models::detail

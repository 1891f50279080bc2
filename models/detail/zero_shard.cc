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
// op, L<layer>.zero_all_gather, into full transient buffers
// ("<weight>.gather_out"), which one op on the compute stream just before the
// run's first op, L<layer>.zero_copy_out, copies into the full copies the
// run reads (workspaces named "<weight>.gathered", freed after their last
// reader, that run's last op): FSDP2's foreach_all_gather_copy_out, which
// waits for the gather and splits its flat output into the unsharded
// parameters on the current stream (Megatron-FSDP gathers into the
// parameters' own buffers, no copy: not told apart). The k-th gather of a phase is issued before
// the first reader of the (k − prefetch)-th (the first of the phase at least): FSDP's prefetch,
// which holds prefetch + 1 units' full weights at a time. A recompute of a forward op in backward
// reads the copies its unit's backward gather made, where that gather has run
// (traces::RegatheredAt, as FSDP's pre-backward all-gather serves a checkpointed block); a weight
// the backward reads not (a bias) it gathers again (the forward's copy was freed).
//
// Stages 2 and 3, the gradients (FSDP, Megatron-FSDP's optim_grads): once
// backward has written a unit's last gradient, one op,
// L<layer>.zero_reduce_scatter, reads the unit's full gradients (now
// transient: nothing else reads them) and writes each one's shard, which the
// optimizer reads: the weight gradient, resident as the header's weight_grads
// says. The shards are in the main gradients' dtype (OptimizerSpec::
// grad_dtype, fp32 for bf16: FSDP2's reduce_dtype); backward writes the full
// gradients in the weights' dtype, and where the two differ one op,
// L<layer>.zero_grad_cast, casts the unit's into transient full copies that
// the reduce-scatter reads. In a whole step each micro-batch reduce-scatters its own and the later
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
#include <cassert>
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

// A gathered weight's names (AddGatheredCopy below).
constexpr std::string_view kGatherOutput = ".gather_out";
constexpr std::string_view kGatheredCopy = ".gathered";

// A block's units: 2·layer (its weights), 2·layer + 1 (its routed experts').
bool IsExpertUnit(int64_t unit) { return unit >= 0 && unit % 2 == 1; }

}  // namespace

// ShardForZero's steps over one builder, in order: units, gathers (stage 3),
// shards (stage 3), reduce-scatters, the new op list.
class ZeroSharder {
 public:
  explicit ZeroSharder(TraceBuilder& b)
      : b_(b),
        dense_shards_(std::max<int64_t>(1, b.zero_.shards)),
        expert_shards_(std::max<int64_t>(1, b.zero_.expert_shards)),
        ops_(std::move(b.trace_.ops)) {
    b_.trace_.ops.clear();
  }

  void Run() {
    AssignUnits();
    if (b_.zero_.stage >= 3) {
      PlanGathers();
      ShardWeights();
      PlanGatherInputs();
    }
    PlanReduceScatters();
    EmitOps();
    RelinkTensors();
  }

 private:
  using Tensors = std::vector<traces::Tensor>;
  Tensors& tensors() { return b_.trace_.tensors; }
  static size_t Index(int64_t id) { return static_cast<size_t>(id); }
  // How many ways a unit's weights and gradients are split.
  int64_t ShardsOf(int64_t u) const { return IsExpertUnit(u) ? expert_shards_ : dense_shards_; }

  // The unit of each weight: its block's (2·layer), its block's routed
  // experts' where they shard apart (2·layer + 1), or the weight itself
  // outside the blocks (keys below kNoLayer).
  void AssignUnits() {
    const size_t n = tensors().size();
    const bool split_experts = expert_shards_ != dense_shards_;
    unit_.assign(n, 0);
    is_weight_.assign(n, false);
    for (TensorId w : b_.weights_) {
      is_weight_[Index(w)] = true;
      const int layer = b_.tensor(w).layer;
      const bool experts = split_experts && traces::IsRoutedExpert(b_.tensor(w));
      unit_[Index(w)] = layer != traces::kNoLayer ? 2 * int64_t{layer} + (experts ? 1 : 0)
                                                  : traces::kNoLayer - 1 - w;
    }
    gathers_before_.assign(ops_.size() + 1, {});
    copy_outs_before_.assign(ops_.size() + 1, {});
  }

  // Stage 3: runs of (phase, layer); per run and unit, one gather of the
  // weights it reads (in order of first reading) into full copies, which the
  // run's ops read instead; then where each gather is issued (prefetch).
  void PlanGathers() {
    std::map<std::pair<size_t, int64_t>, size_t> gather_of;  // (run, unit) -> gather
    size_t run = 0;
    for (size_t i = 0; i < ops_.size(); ++i) {
      traces::Op& op = ops_[i];
      if (i > 0 && (op.phase != ops_[i - 1].phase || op.layer != ops_[i - 1].layer)) ++run;
      for (TensorId& in : op.inputs) {
        if (!is_weight_[Index(in)]) continue;
        auto [it, added] = gather_of.emplace(std::pair{run, unit_[Index(in)]}, gathers_.size());
        if (added) gathers_.push_back(Gather{unit_[Index(in)], op.phase, i, {}, {}, 0, {}, {}});
        Gather& g = gathers_[it->second];
        size_t k = 0;
        while (k < g.weights.size() && g.weights[k] != in) ++k;
        if (k == g.weights.size()) {
          g.weights.push_back(in);
          g.outputs.push_back(AddGatheredCopy(in, op.phase, kGatherOutput));
          g.copies.push_back(AddGatheredCopy(in, op.phase, kGatheredCopy));
        }
        in = g.copies[k];
      }
    }
    // The k-th gather of a phase goes before the first reader of the
    // (k − prefetch)-th of that phase.
    size_t phase_start = 0;
    const size_t ahead = static_cast<size_t>(std::max<int64_t>(0, b_.zero_.prefetch));
    for (size_t k = 0; k < gathers_.size(); ++k) {
      if (gathers_[k].phase != gathers_[phase_start].phase) phase_start = k;
      const size_t at = k >= phase_start + ahead ? k - ahead : phase_start;
      gathers_before_[gathers_[at].first_use].push_back(k);
      copy_outs_before_[gathers_[k].first_use].push_back(k);
    }
  }

  // A weight's full transient copy for one run, in the weight's layer: what
  // the gather writes ("<weight>.gather_out", or ".gather_out_bwd" in
  // backward) or what the copy-out makes of it and the run's ops read
  // ("<weight>.gathered", ".gathered_bwd").
  TensorId AddGatheredCopy(TensorId weight, Phase phase, std::string_view suffix) {
    const traces::Tensor w = b_.tensor(weight);  // a copy: AddTensor moves the table
    const int saved_layer = b_.layer_;
    b_.layer_ = traces::kNoLayer;  // the weight's name carries its layer already
    const bool backward = phase != traces::Phase::kForward;
    std::string name = w.name;
    name.append(suffix);
    if (backward) name.append("_bwd");
    const TensorId copy = b_.AddTensor(name, w.shape, w.dtype, TensorKind::kWorkspace);
    b_.layer_ = saved_layer;
    tensors()[Index(copy)].layer = w.layer;
    return copy;
  }

  // Stage 3, the shards: each weight's elements split over the ranks, rounded
  // up; in fp32 where they are the master weights (ZeroSpec::fp32_shards).
  void ShardWeights() {
    b_.sharded_elements_.assign(tensors().size(), 0);
    for (TensorId w : b_.weights_) {
      traces::Tensor& t = tensors()[Index(w)];
      int64_t elements = 1;
      for (int64_t d : t.shape) elements *= d;
      b_.sharded_elements_[Index(w)] = elements;
      const int64_t shard = CeilDiv(elements, ShardsOf(unit_[Index(w)]));
      t.shape = {shard};
      if (b_.zero_.fp32_shards) t.dtype = DType::kFp32;
      t.bytes = shard * traces::DTypeSize(t.dtype);
    }
  }

  // Stage 3, what each gather sends: the shards themselves, or with fp32
  // shards their casts to the gathered copies' dtype ("<weight>.gather_in",
  // ".gather_in_bwd"; transient), which one op on the compute stream,
  // L<layer>.zero_gather_cast, writes just before the gather: FSDP2's
  // all-gather copy-in casts each sharded parameter to the param dtype.
  void PlanGatherInputs() {
    for (Gather& g : gathers_) {
      if (!b_.zero_.fp32_shards) {
        g.inputs = g.weights;
        continue;
      }
      for (size_t k = 0; k < g.weights.size(); ++k) {
        const traces::Tensor w = b_.tensor(g.weights[k]);  // a copy: AddTensor moves the table
        std::string name = w.name;
        name.append(g.phase == Phase::kForward ? ".gather_in" : ".gather_in_bwd");
        const int saved_layer = b_.layer_;
        b_.layer_ = traces::kNoLayer;  // the weight's name carries its layer already
        const TensorId in =
            b_.AddTensor(name, w.shape, b_.tensor(g.copies[k]).dtype, TensorKind::kWorkspace);
        b_.layer_ = saved_layer;
        tensors()[Index(in)].layer = w.layer;
        g.inputs.push_back(in);
        g.cast_elements += w.shape[0];
      }
    }
  }

  // The reduce-scatters: per unit, after the op that writes its last
  // completed gradient (each gradient's producer in a one-micro-batch trace).
  void PlanReduceScatters() {
    for (TensorId w : b_.weights_) {
      if (b_.last_grad_[Index(w)] != kNoTensor) unit_weights_[unit_[Index(w)]].push_back(w);
    }
    scatters_after_.assign(ops_.size(), {});
    for (const auto& [u, ws] : unit_weights_) {
      traces::OpId last = traces::kNoOp;
      for (TensorId w : ws) last = std::max(last, b_.tensor(b_.last_grad_[Index(w)]).producer);
      if (last == traces::kNoOp) continue;  // gradients nothing writes: left as they are
      scatters_after_[static_cast<size_t>(last)].push_back(u);
    }
  }

  // The new op list: each op after the gathers issued before it, followed by
  // the reduce-scatters of the units it completes (or, deferred, after the
  // backward, as the optimizer phase's first ops, so that a whole step runs
  // them once, after its last micro-batch's backward, and the full gradients
  // are weight gradients accumulated over the micro-batches).
  void EmitOps() {
    for (traces::Tensor& t : tensors()) {
      t.producer = traces::kNoOp;
      t.consumers.clear();
    }
    new_id_.assign(ops_.size(), traces::kNoOp);
    // Every op, gather and its cast and copy-out, cast and reduce-scatter: no regrowth of the list
    // (the ops were moved out).
    b_.trace_.ops.reserve(ops_.size() + 3 * gathers_.size() + 2 * unit_weights_.size());
    const Phase saved_phase = b_.phase_;
    const int saved_layer = b_.layer_;
    std::vector<int64_t> deferred;  // zero_.defer_grad_sync: units in order of completion
    for (size_t i = 0; i < ops_.size(); ++i) {
      for (size_t k : gathers_before_[i]) {
        const Gather& g = gathers_[k];
        if (g.inputs != g.weights) {
          EmitUnitOp(g.unit, traces::kZeroGatherCastSuffix, OpKind::kElementwise, g.phase,
                     /*stream=*/0, g.weights, g.inputs, g.cast_elements);
        }
        EmitUnitOp(g.unit, traces::kZeroAllGatherSuffix, OpKind::kCollective, g.phase,
                   traces::kZeroGatherStream, g.inputs, g.outputs);
      }
      for (size_t k : copy_outs_before_[i]) {
        const Gather& g = gathers_[k];
        EmitUnitOp(g.unit, traces::kZeroCopyOutSuffix, OpKind::kElementwise, g.phase,
                   /*stream=*/0, g.outputs, g.copies);
      }
      new_id_[i] = static_cast<traces::OpId>(b_.trace_.ops.size());
      const Phase phase = ops_[i].phase;
      Emit(std::move(ops_[i]));
      for (int64_t u : scatters_after_[i]) {
        if (b_.zero_.defer_grad_sync) {
          deferred.push_back(u);
        } else {
          ReduceScatter(u, phase);
        }
      }
    }
    for (int64_t u : deferred) ReduceScatter(u, Phase::kOptimizer);
    b_.phase_ = saved_phase;
    b_.layer_ = saved_layer;
  }

  void Emit(traces::Op op) {
    op.id = static_cast<traces::OpId>(b_.trace_.ops.size());
    b_.trace_.ops.push_back(std::move(op));
  }

  // An op of unit `u` whose first input is `first`: "L<layer>.<suffix>" for a
  // block, "L<layer>.experts.<suffix>" for its routed experts;
  // "<weight>.<suffix>" for a weight of its own (the unit's weight, whatever
  // the op reads: its shard, gradient or a copy). Sets the builder's layer to
  // the unit's.
  std::string UnitOpName(int64_t u, TensorId first, std::string_view suffix) {
    const int layer = b_.tensor(first).layer;
    b_.layer_ = layer;
    std::string name;
    if (layer == traces::kNoLayer) {
      name = b_.tensor(static_cast<TensorId>(traces::kNoLayer - 1 - u)).name;  // AssignUnits
      name.push_back('.');
    } else if (IsExpertUnit(u)) {
      name = traces::kRoutedExperts;
      name.push_back('.');
    }
    name.append(suffix);
    return layer == traces::kNoLayer ? name : b_.Prefixed(name);
  }

  // One of unit u's own ops, named by UnitOpName: a collective on a side
  // stream, or an elementwise op on the compute stream (stream 0).
  void EmitUnitOp(int64_t u, std::string_view suffix, OpKind kind, Phase phase, int stream,
                  std::vector<TensorId> inputs, std::vector<TensorId> outputs, int64_t flops = 0) {
    traces::Op op;
    const int layer = b_.tensor(inputs[0]).layer;
    op.name = UnitOpName(u, inputs[0], suffix);
    op.kind = kind;
    op.phase = phase;
    op.layer = layer;
    op.stage = b_.stage();
    op.stream = stream;
    op.flops = flops;
    for (TensorId t : inputs) op.bytes_read += b_.tensor(t).bytes;
    for (TensorId t : outputs) op.bytes_written += b_.tensor(t).bytes;
    op.inputs = std::move(inputs);
    op.outputs = std::move(outputs);
    Emit(std::move(op));
  }

  // The unit's reduce-scatter: its full gradients to their shards, which
  // become the weights' current gradients, in the main gradients' dtype. Where
  // backward wrote them in another, one op on the compute stream first casts
  // them into full copies of that dtype ("<weight>.grad_reduce", transient),
  // which the reduce-scatter reads: FSDP2's foreach_reduce with a reduce_dtype
  // (torchtitan's float32) copies the unsharded gradients into its
  // reduce-scatter input of that dtype on the current stream.
  void ReduceScatter(int64_t u, Phase phase) {
    const int64_t shards = ShardsOf(u);
    const DType reduce_dtype = b_.optimizer_.grad_dtype;
    std::vector<TensorId> full, parts, casts;
    int64_t cast_elements = 0;
    for (TensorId w : unit_weights_[u]) {
      const std::string name = b_.tensor(w).name;
      const int layer = b_.tensor(w).layer;
      const TensorId g = b_.last_grad_[Index(w)];
      const int64_t elements = b_.Elements(w);
      b_.layer_ = traces::kNoLayer;
      const TensorId part = b_.AddTensor(name + ".grad_shard", {CeilDiv(elements, shards)},
                                         reduce_dtype, TensorKind::kGradient);
      tensors()[Index(part)].layer = layer;
      full.push_back(g);
      parts.push_back(part);
      if (b_.tensor(g).dtype != reduce_dtype) {
        const TensorId cast = b_.AddTensor(name + ".grad_reduce", b_.tensor(g).shape, reduce_dtype,
                                           TensorKind::kWorkspace);
        tensors()[Index(cast)].layer = layer;
        casts.push_back(cast);
        cast_elements += elements;
      }
      b_.last_grad_[Index(w)] = part;
    }
    if (!casts.empty()) {
      // "L<layer>.zero_grad_cast" (or "<weight>.zero_grad_cast",
      // "L<layer>.experts.zero_grad_cast"): one conversion per element.
      assert(casts.size() == full.size());
      EmitUnitOp(u, traces::kZeroGradCastSuffix, OpKind::kElementwise, phase, /*stream=*/0, full,
                 casts, cast_elements);
      full = std::move(casts);
    }
    EmitUnitOp(u, traces::kZeroReduceScatterSuffix, OpKind::kCollective, phase,
               traces::kZeroReduceStream, std::move(full), std::move(parts));
  }

  // Edges to the new op ids; producers (the first writer) and consumers from
  // the new list.
  void RelinkTensors() {
    for (traces::Edge& e : b_.trace_.edges) {
      e.from = new_id_[static_cast<size_t>(e.from)];
      e.to = new_id_[static_cast<size_t>(e.to)];
    }
    for (const traces::Op& op : b_.trace_.ops) {
      for (TensorId in : op.inputs) tensors()[Index(in)].consumers.push_back(op.id);
      for (TensorId out : op.outputs) {
        if (tensors()[Index(out)].producer == traces::kNoOp) tensors()[Index(out)].producer = op.id;
      }
    }
  }

  struct Gather {
    int64_t unit = 0;
    traces::Phase phase = traces::Phase::kForward;
    size_t first_use = 0;  // index into ops_
    std::vector<TensorId> weights;
    std::vector<TensorId> inputs;   // what the gather reads: the shards, or their casts
    int64_t cast_elements = 0;      // the casts' elements, where there are casts
    std::vector<TensorId> outputs;  // what the gather writes
    std::vector<TensorId> copies;   // what its copy-out makes of them, which the run reads
  };

  TraceBuilder& b_;
  const int64_t dense_shards_, expert_shards_;
  std::vector<traces::Op> ops_;  // the trace's ops before sharding
  std::vector<int64_t> unit_;    // per tensor id: a weight's unit
  std::vector<bool> is_weight_;
  std::vector<Gather> gathers_;
  std::vector<std::vector<size_t>> gathers_before_;        // per op index: gathers issued before it
  std::vector<std::vector<size_t>> copy_outs_before_;      // per op index: copy-outs just before it
  std::map<int64_t, std::vector<TensorId>> unit_weights_;  // weights with a gradient
  std::vector<std::vector<int64_t>> scatters_after_;       // per op index: units it completes
  std::vector<traces::OpId> new_id_;                       // per op index: its id in the new list
};

void TraceBuilder::ShardForZero() { ZeroSharder(*this).Run(); }

}  // namespace ssdtrain::models::detail

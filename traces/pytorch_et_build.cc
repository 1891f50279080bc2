// A PyTorch execution trace's calls assembled into a trace
// (traces/detail/pytorch_et_importer.h; the rules: traces/pytorch_et.h):
// tensors as storage lifetimes, ops with their work, what backward reads,
// layers, the header, and what was assumed.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "traces/detail/pytorch_et_importer.h"

namespace ssdtrain::traces::detail {
namespace {

using StorageKey = std::pair<std::string, int64_t>;  // (device, storage id)

TensorKind MadeKind(Phase phase) {
  return phase == Phase::kForward    ? TensorKind::kActivation
         : phase == Phase::kBackward ? TensorKind::kGradient
                                     : TensorKind::kWorkspace;
}

// A new row: a storage's tensor (or a view of one, `alias_of`).
TensorId AddTensor(Trace* trace, const TensorValue& v, OpId producer, TensorKind kind,
                   std::optional<TensorId> alias_of, const std::string& scope, int layer) {
  Tensor t;
  t.id = static_cast<TensorId>(trace->tensors.size());
  t.dtype = v.dtype;
  t.kind = kind;
  t.producer = producer;
  t.layer = layer;
  t.alias_of = alias_of;
  if (alias_of) {
    t.shape = v.shape;
    t.bytes = std::min(v.bytes(), trace->tensors[static_cast<size_t>(*alias_of)].bytes);
  } else if (v.offset == 0) {
    t.shape = v.shape;
    t.bytes = v.bytes();
  } else {  // a result at an offset into storage it made: the storage as a flat array
    t.shape = {v.offset + v.numel};
    t.bytes = (v.offset + v.numel) * v.itemsize;
  }
  const std::string prefix = scope.empty() ? "<model>" : scope;
  switch (kind) {
    case TensorKind::kWeight:
      t.name = prefix + ".weight" + std::to_string(t.id);
      break;
    case TensorKind::kInput:
      t.name = "input" + std::to_string(t.id);
      break;
    case TensorKind::kOptimizerState:
      t.name = "optimizer_state" + std::to_string(t.id);
      break;
    default:
      t.name = prefix + ".t" + std::to_string(t.id);
  }
  trace->tensors.push_back(std::move(t));
  return trace->tensors.back().id;
}

// Saved for backward: made in forward, read by a backward op (a view's read
// marks its storage too).
void MarkSavedForBackward(Trace* trace) {
  for (Tensor& t : trace->tensors) {
    const TensorId root = trace->StorageOf(t.id);
    const Tensor& r = trace->tensors[static_cast<size_t>(root)];
    if (r.producer == kNoOp || trace->op(r.producer).phase != Phase::kForward) continue;
    for (OpId c : t.consumers) {
      if (trace->op(c).phase == Phase::kBackward) t.saved_for_backward = true;
    }
  }
  for (Tensor& t : trace->tensors) {
    if (t.saved_for_backward) {
      trace->tensors[static_cast<size_t>(trace->StorageOf(t.id))].saved_for_backward = true;
    }
  }
}

// One layer, 0, without numbered scopes (the planners never offload layer
// -1); otherwise a tensor made before the trace takes its first reader's.
void SpreadLayers(bool any_layer, Trace* trace) {
  if (!any_layer) {
    for (Tensor& t : trace->tensors) t.layer = 0;
    for (Op& o : trace->ops) o.layer = 0;
    return;
  }
  for (Tensor& t : trace->tensors) {
    if (t.producer == kNoOp && !t.consumers.empty()) t.layer = trace->op(t.consumers[0]).layer;
  }
}

}  // namespace

struct EtBuildState {
  // Gradients accumulated into leaves, by (shape, dtype): the weights' (an
  // AccumulateGrad node's input is the gradient of one leaf of that shape).
  std::map<std::pair<std::vector<int64_t>, DType>, int> leaf_grads;
  // The forward top-level op of each (thread, seq_id), for backward ops' layers and names.
  std::map<std::pair<int64_t, int64_t>, size_t> forward_of_seq;
  struct Storage {
    TensorId root = 0;
    std::map<int64_t, TensorId> rows;  // tensor id -> row on this storage
  };
  std::map<StorageKey, Storage> live;
  // Storages an op's inner calls made, not (yet) seen outside it: a row, made
  // by that op, once a later op reads one.
  std::map<StorageKey, std::pair<OpId, TensorValue>> inner_made;
  // The current op's input storages and the storages it made.
  std::set<StorageKey> input_storages, made;
  std::vector<std::string> op_scopes;  // each op's scope
  bool any_layer = false;
  int weights = 0, inputs = 0, optimizer_state = 0;
};

void EtImporter::Build() {
  EtBuildState s;
  CountLeafGradients(&s);
  IndexForwardOps(&s);
  for (const OpCall& call : calls_) ImportCall(call, &s);
  Trace& trace = out_.trace;
  MarkSavedForBackward(&trace);
  SpreadLayers(s.any_layer, &trace);
  for (Tensor& t : trace.tensors) {
    const Tensor& root = trace.tensors[static_cast<size_t>(trace.StorageOf(t.id))];
    t.offloadable = root.kind == TensorKind::kActivation && root.bytes >= options_.min_bytes;
  }
  FillHeader();
  SayAssumptions(s);
}

void EtImporter::CountLeafGradients(EtBuildState* s) const {
  for (const Node& n : nodes_) {
    if (n.name != kAccumulateGrad) continue;
    std::vector<TensorValue> grads;
    ArgShapes ignored;
    if (!ReadValues(n, "inputs", &grads, &ignored).ok()) continue;
    for (const TensorValue& g : grads) ++s->leaf_grads[{g.shape, g.dtype}];
  }
}

void EtImporter::IndexForwardOps(EtBuildState* s) const {
  for (const Node& n : nodes_) {
    if (n.seq_id < 0 || n.evaluate >= 0 || n.top_op < 0) continue;
    s->forward_of_seq.emplace(std::pair{n.tid, n.seq_id}, static_cast<size_t>(n.top_op));
  }
}

// Its scope: its own, or for a backward op, its forward op's (through the
// autograd node's seq_id); `grad_fn` the autograd node's name.
std::string EtImporter::CallScope(const OpCall& call, const EtBuildState& s,
                                  std::string* grad_fn) const {
  const Node& n = nodes_[call.node];
  std::string scope = ScopeName(n);
  if (call.phase == Phase::kBackward && n.grad_fn >= 0) {
    const Node& g = nodes_[static_cast<size_t>(n.grad_fn)];
    *grad_fn = g.name;
    const int64_t fw_thread = g.fw_tid != 0 ? g.fw_tid : g.tid;
    const auto f = s.forward_of_seq.find({fw_thread, g.seq_id});
    if (g.seq_id >= 0 && f != s.forward_of_seq.end()) scope = ScopeName(nodes_[f->second]);
  }
  return scope;
}

void EtImporter::ImportCall(const OpCall& call, EtBuildState* s) {
  Trace& trace = out_.trace;
  const Node& n = nodes_[call.node];
  std::string grad_fn;
  const std::string scope = CallScope(call, *s, &grad_fn);
  const int layer = LayerOf(scope);
  s->any_layer = s->any_layer || layer != kNoLayer;

  Op op;
  op.id = static_cast<OpId>(trace.ops.size());
  op.phase = call.phase;
  op.layer = layer;
  op.name = (scope.empty() ? std::string("<model>") : scope) + "." +
            (grad_fn.empty() ? "" : ShortName(grad_fn) + ".") + ShortName(n.name);
  AddInputs(call, scope, layer, &op, s);
  const bool all_alias = AddOutputs(call, scope, layer, &op, s);
  // What its inner calls made at other addresses: newer than any storage
  // that held the address before.
  for (const TensorValue& v : call.inner) {
    const StorageKey key{v.device, v.storage_id};
    if (v.numel == 0 || s->input_storages.count(key) > 0 || s->made.count(key) > 0) continue;
    s->live.erase(key);
    s->inner_made.insert_or_assign(key, std::pair{op.id, v});
  }
  s->op_scopes.push_back(scope);
  SetWork(call, TorchOpInfo(n.name).view && all_alias, *s, &op);
  for (TensorId r : op.inputs) trace.tensors[static_cast<size_t>(r)].consumers.push_back(op.id);
  trace.ops.push_back(std::move(op));
}

// Inputs: rows of live storages, storages an earlier op's inner calls made,
// or storages made before the trace (weights, optimizer state, step inputs).
void EtImporter::AddInputs(const OpCall& call, const std::string& scope, int layer, Op* op,
                           EtBuildState* s) {
  Trace& trace = out_.trace;
  s->input_storages.clear();
  auto add_input = [&](TensorId r) {
    if (std::find(op->inputs.begin(), op->inputs.end(), r) == op->inputs.end()) {
      op->inputs.push_back(r);
    }
  };
  for (const TensorValue& v : call.inputs) {
    const StorageKey key{v.device, v.storage_id};
    s->input_storages.insert(key);
    auto it = s->live.find(key);
    if (const auto inner = s->inner_made.find(key);
        it == s->live.end() && inner != s->inner_made.end()) {
      const auto [by, made_v] = inner->second;
      Op& producer = trace.ops[static_cast<size_t>(by)];
      const TensorId r = AddTensor(&trace, made_v, by, MadeKind(producer.phase), std::nullopt,
                                   s->op_scopes[static_cast<size_t>(by)], producer.layer);
      producer.outputs.push_back(r);
      it = s->live.emplace(key, EtBuildState::Storage{r, {{made_v.tensor_id, r}}}).first;
      s->inner_made.erase(inner);
    }
    if (it == s->live.end()) {
      TensorKind kind = TensorKind::kInput;
      if (v.shape.empty()) {  // a 0-dim tensor from outside: a wrapped number
        ++s->inputs;
      } else if (call.phase == Phase::kOptimizer) {
        kind = TensorKind::kOptimizerState;
        ++s->optimizer_state;
      } else if (auto g = s->leaf_grads.find({v.shape, v.dtype});
                 g != s->leaf_grads.end() && g->second > 0 && v.offset == 0) {
        --g->second;
        kind = TensorKind::kWeight;
        ++s->weights;
      } else {
        ++s->inputs;
      }
      const TensorId r = AddTensor(&trace, v, kNoOp, kind, std::nullopt, scope, layer);
      it = s->live.emplace(key, EtBuildState::Storage{r, {{v.tensor_id, r}}}).first;
    }
    const EtBuildState::Storage& st = it->second;
    const auto row = st.rows.find(v.tensor_id);
    add_input(row != st.rows.end() ? row->second : st.root);
  }
}

// Outputs: written in place (one more input), a view of an input's storage
// (a row aliasing it), or a new storage. True when every output is a view.
bool EtImporter::AddOutputs(const OpCall& call, const std::string& scope, int layer, Op* op,
                            EtBuildState* s) {
  Trace& trace = out_.trace;
  s->made.clear();
  bool all_alias = true;
  const TensorKind made_kind = MadeKind(call.phase);
  for (const TensorValue& v : call.outputs) {
    const StorageKey key{v.device, v.storage_id};
    const auto it = s->live.find(key);
    const bool on_input = s->input_storages.count(key) > 0 || s->made.count(key) > 0;
    if (v.numel == 0) {  // empty: no storage to share (their ids may all be one address)
      all_alias = false;
      op->outputs.push_back(AddTensor(&trace, v, op->id, made_kind, std::nullopt, scope, layer));
      continue;
    }
    if (it != s->live.end() && on_input) {
      EtBuildState::Storage& st = it->second;
      const auto row = st.rows.find(v.tensor_id);
      if (row != st.rows.end()) {  // written in place: one more input
        if (trace.tensors[static_cast<size_t>(row->second)].producer != op->id &&
            std::find(op->inputs.begin(), op->inputs.end(), row->second) == op->inputs.end()) {
          op->inputs.push_back(row->second);
        }
        continue;
      }
      const TensorId r =
          AddTensor(&trace, v, op->id, trace.tensors[static_cast<size_t>(st.root)].kind, st.root,
                    scope, layer);
      st.rows.emplace(v.tensor_id, r);
      op->outputs.push_back(r);
      continue;
    }
    all_alias = false;
    const TensorId r = AddTensor(&trace, v, op->id, made_kind, std::nullopt, scope, layer);
    s->live[key] = EtBuildState::Storage{r, {{v.tensor_id, r}}};
    s->inner_made.erase(key);
    s->made.insert(key);
    op->outputs.push_back(r);
  }
  return all_alias;
}

// The op's kind, FLOPs and bytes: a view's none; GEMM dims and attention
// FLOPs from the arguments' shapes (traces/torch_ops.h); one FLOP per output
// element otherwise.
void EtImporter::SetWork(const OpCall& call, bool view, const EtBuildState& s, Op* op) const {
  const Trace& trace = out_.trace;
  const Node& n = nodes_[call.node];
  int64_t out_elements = 0, written = 0, read = 0;
  for (const TensorValue& v : call.outputs) {
    out_elements += v.numel;
    written += v.bytes();
  }
  for (const TensorValue& v : call.inputs) {
    const auto it = s.live.find({v.device, v.storage_id});
    const int64_t root_bytes =
        it == s.live.end() ? v.bytes() : trace.tensors[static_cast<size_t>(it->second.root)].bytes;
    read += std::min(v.bytes(), root_bytes);
  }
  op->kind = TorchOpInfo(n.name).kind;
  if (view) {
    op->kind = OpKind::kElementwise;
  } else if (const std::optional<GemmDims> dims = TorchGemmDims(n.name, call.arg_shapes)) {
    op->gemm = *dims;
    op->flops = 2 * dims->m * dims->n * dims->k * dims->batch;
  } else if (const std::optional<int64_t> f = TorchAttentionFlops(n.name, call.arg_shapes)) {
    op->flops = *f;
  } else {
    if (op->kind == OpKind::kGemm || op->kind == OpKind::kAttention) {
      op->kind = OpKind::kElementwise;
    }
    op->flops = out_elements;
  }
  if (!view) {
    op->bytes_read = read;
    op->bytes_written = written;
  }
  if (call.phase == Phase::kOptimizer) op->kind = OpKind::kOptimizer;
}

// The header: what the file cannot say (model dims 1), the layers, and the
// dtype holding the most activation bytes.
void EtImporter::FillHeader() {
  Trace& trace = out_.trace;
  std::map<DType, int64_t> activation_bytes;
  int max_layer = 0;
  for (const Tensor& t : trace.tensors) {
    if (!t.alias_of && t.kind == TensorKind::kActivation) activation_bytes[t.dtype] += t.bytes;
    max_layer = std::max(max_layer, t.layer);
  }
  Header& h = trace.header;
  h.model = "pytorch-et";
  h.family = "gpt";
  h.hidden = h.heads = h.kv_heads = h.ffn_hidden = h.vocab = h.seq_len = 1;
  h.micro_batch = 1;
  h.layers = h.stage_layers = max_layer + 1;
  h.dtype = "fp32";
  int64_t best = -1;
  for (DType d : {DType::kFp32, DType::kBf16, DType::kFp16}) {
    const auto it = activation_bytes.find(d);
    if (it != activation_bytes.end() && it->second > best) {
      best = it->second;
      h.dtype = std::string(ToString(d));
    }
  }
}

void EtImporter::SayAssumptions(const EtBuildState& s) {
  const Trace& trace = out_.trace;
  const Header& h = trace.header;
  int64_t ops_inside = 0;
  for (const Node& n : nodes_) ops_inside += n.op && n.under_op ? 1 : 0;
  std::vector<std::string>& a = out_.assumed;
  a.push_back(std::to_string(trace.ops.size()) + " ops: the top-level operator calls (" +
              std::to_string(ops_inside) +
              " calls inside them are their work); no durations (the file has none)");
  a.push_back(
      "header: hidden, heads, ffn_hidden, vocab, seq_len and micro_batch 1 (an execution trace "
      "holds no model dims); dtype " +
      h.dtype + " (most activation bytes); one micro-batch (0)");
  a.push_back(s.any_layer ? "layers: from numbered record_function scopes, " +
                                std::to_string(h.layers) + " (ops outside them are layer -1)"
                          : "layers: no numbered record_function scope (e.g. \"blocks.3\"): the "
                            "whole step is one layer, 0");
  a.push_back(std::to_string(s.weights) +
              " tensors made before the trace are weights (backward "
              "accumulates a gradient of their shape into a leaf), " +
              std::to_string(s.inputs) + " step inputs" +
              (s.optimizer_state > 0 ? ", " + std::to_string(s.optimizer_state) + " optimizer state"
                                     : std::string()));
  a.push_back(
      "saved for backward: made in forward and read by a backward op; offloadable: "
      "activations of at least " +
      std::to_string(options_.min_bytes) + " bytes");
}

}  // namespace ssdtrain::traces::detail

// PyTorch execution traces as traces (traces/pytorch_et.h).
#include "traces/pytorch_et.h"

#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <unordered_map>
#include <utility>

#include "traces/detail/json_fields.h"
#include "traces/torch_ops.h"
#include "traces/validate.h"

namespace ssdtrain::traces {
namespace {

using nlohmann::json;

constexpr std::string_view kEvaluateFunction = "autograd::engine::evaluate_function: ";
constexpr std::string_view kAccumulateGrad = "torch::autograd::AccumulateGrad";

struct Node {
  int64_t id = 0;
  int64_t parent = 0;
  std::string name;
  bool op = false;  // an operator call (a non-empty op_schema)
  int64_t seq_id = -1;
  int64_t tid = 0;
  int64_t fw_tid = 0;
  const json* j = nullptr;
  // Filled by the ancestry walk.
  bool under_op = false;  // an operator is above it
  int64_t top_op = -1;    // the node index of its outermost operator (itself if top-level)
  int64_t evaluate = -1;  // the evaluate_function node above it
  int64_t grad_fn = -1;   // the autograd node (evaluate_function's child) above or at it
  int64_t scope = -1;     // the innermost record_function scope above it
};

// One tensor argument or result.
struct TensorValue {
  int64_t tensor_id = 0;
  int64_t storage_id = 0;
  int64_t offset = 0;
  int64_t numel = 0;
  int64_t itemsize = 0;
  std::string device;
  DType dtype = DType::kFp32;
  std::vector<int64_t> shape;
  int64_t bytes() const { return numel * itemsize; }
};

struct OpCall {
  size_t node = 0;
  Phase phase = Phase::kForward;
  std::vector<TensorValue> inputs, outputs;
  // What the calls inside it made: a composite op's saved intermediates
  // (layer_norm's mean and rstd, cross_entropy's log-probabilities) are
  // results of its inner calls, not of the op.
  std::vector<TensorValue> inner;
  ArgShapes arg_shapes;  // every argument's, in schema order
};

class Importer {
 public:
  Importer(const json& j, std::string source, PytorchEtOptions options)
      : j_(j), source_(std::move(source)), options_(options) {}

  Result<PytorchEtImport> Run();

 private:
  Status Error(const std::string& what) const {
    return Status::InvalidArgument(source_ + ": " + what);
  }
  Status NodeError(const Node& n, const std::string& field, const std::string& what) const {
    return Error("node " + std::to_string(n.id) + " (" + n.name + "): " + field + ": " + what);
  }
  Status ReadNodes();
  Status WalkAncestry();
  Status ReadCall(size_t node, OpCall* call) const;
  Status ReadValues(const Node& n, const std::string& side, std::vector<TensorValue>* tensors,
                    ArgShapes* shapes) const;
  Result<TensorValue> ReadTensor(const Node& n, const std::string& field, const json& value,
                                 const json& shape, std::string_view type) const;
  std::string ScopeName(const Node& n) const;
  int LayerOf(const std::string& scope);
  void Build();

  const json& j_;
  std::string source_;
  PytorchEtOptions options_;
  std::vector<Node> nodes_;
  std::unordered_map<int64_t, size_t> index_;  // node id -> nodes_ index
  std::vector<std::vector<size_t>> children_;
  std::vector<OpCall> calls_;
  std::unordered_map<std::string, int> layers_;  // scope name -> layer
  PytorchEtImport out_;
};

// A JSON integer (signed or unsigned) as int64, or nullopt.
std::optional<int64_t> AsInt(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

// A node's field: its own (torch 1.13's layout), or the value of its attrs
// entry of that name (torch 2's: [{"name", "type", "value"}, ...]); null when
// it has neither.
const json* Field(const json& node, const char* name) {
  if (const auto f = node.find(name); f != node.end()) return &*f;
  const auto attrs = node.find("attrs");
  if (attrs == node.end() || !attrs->is_array()) return nullptr;
  for (const json& a : *attrs) {
    if (!a.is_object()) continue;
    const auto n = a.find("name");
    const auto value = a.find("value");
    if (n != a.end() && value != a.end() && n->is_string() && *n == name) return &*value;
  }
  return nullptr;
}

Status Importer::ReadNodes() {
  const auto nodes = j_.find("nodes");
  if (nodes == j_.end() || !nodes->is_array()) {
    return Error("nodes: expected an array of the execution trace's nodes");
  }
  nodes_.reserve(nodes->size());
  for (size_t i = 0; i < nodes->size(); ++i) {
    const json& v = (*nodes)[i];
    const std::string at = "nodes[" + std::to_string(i) + "]";
    if (!v.is_object()) return Error(at + ": expected an object, got " + detail::TypeName(v));
    Node n;
    n.j = &v;
    const auto id = v.find("id");
    const std::optional<int64_t> idv = id == v.end() ? std::nullopt : AsInt(*id);
    if (!idv) return Error(at + ".id: expected an integer");
    n.id = *idv;
    const auto name = v.find("name");
    if (name == v.end() || !name->is_string()) {
      return Error("node " + std::to_string(n.id) + ": name: expected a string");
    }
    n.name = name->get<std::string>();
    // torch 2 writes the parent as ctrl_deps, the rest under attrs.
    const bool torch2 = v.contains("ctrl_deps");
    const json* parent = Field(v, torch2 ? "ctrl_deps" : "parent");
    const std::optional<int64_t> pv = parent == nullptr ? std::nullopt : AsInt(*parent);
    if (!pv) {
      return NodeError(n, torch2 ? "ctrl_deps" : "parent",
                       "expected an integer (the parent node's id)");
    }
    n.parent = *pv;
    if (const json* schema = Field(v, "op_schema"); schema != nullptr) {
      if (!schema->is_string()) return NodeError(n, "op_schema", "expected a string");
      n.op = !schema->get_ref<const std::string&>().empty();
    } else {
      n.op = n.name.starts_with("aten::");  // files without op_schema: aten calls only
    }
    for (auto [field, dest] : {std::pair<const char*, int64_t*>{"seq_id", &n.seq_id},
                               {"tid", &n.tid},
                               {"fw_tid", &n.fw_tid}}) {
      const json* f = Field(v, field);
      if (f == nullptr) continue;
      const std::optional<int64_t> fv = AsInt(*f);
      if (!fv) return NodeError(n, field, "expected an integer");
      *dest = *fv;
    }
    if (!index_.emplace(n.id, nodes_.size()).second) {
      return NodeError(n, "id", "two nodes have this id");
    }
    nodes_.push_back(std::move(n));
  }
  if (nodes_.empty()) return Error("nodes: empty (no operator was observed)");
  return Status::Ok();
}

// Each node's operator, autograd and scope ancestors. A node whose parent is
// itself or absent from the file (id 0 in PyTorch's: none) is a root.
Status Importer::WalkAncestry() {
  std::vector<int> state(nodes_.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<size_t> path;
  for (size_t start = 0; start < nodes_.size(); ++start) {
    if (state[start] == 2) continue;
    path.clear();
    size_t at = start;
    std::optional<size_t> done_parent;
    while (true) {
      if (state[at] == 1) {
        return NodeError(nodes_[at], "parent", "the chain of parents loops back to this node");
      }
      state[at] = 1;
      path.push_back(at);
      const Node& n = nodes_[at];
      if (n.parent == n.id) break;
      const auto p = index_.find(n.parent);
      if (p == index_.end()) {
        if (n.parent != 0) {
          return NodeError(n, "parent", "node " + std::to_string(n.parent) + " is not in the file");
        }
        break;
      }
      if (state[p->second] == 2) {
        done_parent = p->second;
        break;
      }
      at = p->second;
    }
    // Fill from the top of the path down.
    for (size_t k = path.size(); k-- > 0;) {
      Node& n = nodes_[path[k]];
      const Node* p = nullptr;
      if (k + 1 < path.size()) {
        p = &nodes_[path[k + 1]];
      } else if (done_parent) {
        p = &nodes_[*done_parent];
      }
      if (p != nullptr) {
        n.under_op = p->under_op || p->op;
        n.top_op = p->top_op;
        n.evaluate = p->evaluate;
        n.grad_fn = p->grad_fn;
        n.scope = p->scope;
        if (p->name.starts_with(kEvaluateFunction)) n.grad_fn = static_cast<int64_t>(path[k]);
      }
      const size_t self = path[k];
      if (n.op && !n.under_op) n.top_op = static_cast<int64_t>(self);
      if (n.name.starts_with(kEvaluateFunction)) n.evaluate = static_cast<int64_t>(self);
      // A scope: a record_function that is neither an operator, a root, nor autograd's.
      const bool root = n.name.starts_with("[pytorch|");
      if (!n.op && !n.under_op && !root && n.evaluate < 0 && n.grad_fn < 0) {
        n.scope = static_cast<int64_t>(self);
      }
      state[self] = 2;
    }
  }
  return Status::Ok();
}

Result<TensorValue> Importer::ReadTensor(const Node& n, const std::string& field, const json& value,
                                         const json& shape, std::string_view type) const {
  // "Tensor(float)" -> "float"
  std::string_view inner = type;
  if (inner.starts_with("Tensor(") && inner.ends_with(")")) {
    inner = inner.substr(7, inner.size() - 8);
  }
  if (!value.is_array() || value.size() != 6 || !value[5].is_string()) {
    return NodeError(n, field,
                     "expected a tensor [tensor id, storage id, offset, numel, itemsize, "
                     "device], got " +
                         value.dump().substr(0, 80));
  }
  TensorValue t;
  int64_t* fields[5] = {&t.tensor_id, &t.storage_id, &t.offset, &t.numel, &t.itemsize};
  static constexpr const char* kNames[5] = {"tensor id", "storage id", "offset", "numel",
                                            "itemsize"};
  for (size_t i = 0; i < 5; ++i) {
    const std::optional<int64_t> v = AsInt(value[i]);
    if (!v || *v < 0) {
      return NodeError(n, field,
                       std::string(kNames[i]) + ": expected an integer >= 0, got " +
                           value[i].dump().substr(0, 40));
    }
    *fields[i] = *v;
  }
  t.device = value[5].get<std::string>();
  if (t.itemsize == 0 && t.device.empty()) return t;  // an undefined tensor (None)
  const std::optional<DType> dtype = TorchDType(inner);
  if (!dtype) {
    return NodeError(
        n, field,
        "type '" + std::string(type) + "' has no trace dtype (known: " + TorchDTypeNames() + ")");
  }
  t.dtype = *dtype;
  if (t.itemsize != DTypeSize(t.dtype)) {
    return NodeError(n, field,
                     "itemsize " + std::to_string(t.itemsize) + " is not the size of '" +
                         std::string(inner) + "' (" + std::to_string(DTypeSize(t.dtype)) + ")");
  }
  constexpr int64_t kMaxElements = int64_t{1} << 50;  // no real tensor; keeps bytes in range
  if (t.numel > kMaxElements || t.offset > kMaxElements) {
    return NodeError(n, field, "numel or offset past 2^50 elements");
  }
  if (shape.is_array()) {
    int64_t product = 1;
    bool ok = true;
    for (const json& d : shape) {
      const std::optional<int64_t> v = AsInt(d);
      if (!v || *v < 0 || (*v > 0 && product > kMaxElements / *v)) {
        ok = false;
        break;
      }
      t.shape.push_back(*v);
      product *= *v;
    }
    if (!ok || product != t.numel) t.shape = {t.numel};  // a shape that does not count numel
  } else {
    t.shape = {t.numel};
  }
  return t;
}

// inputs/outputs with their _shapes and _types: each tensor, and every
// argument's shape (tensor lists flattened into their tensors; a list's own
// shape stays empty).
Status Importer::ReadValues(const Node& n, const std::string& side,
                            std::vector<TensorValue>* tensors, ArgShapes* shapes) const {
  const json& v = *n.j;
  const auto io = v.find(side);
  if (io == v.end() || !(io->is_array() || io->is_object())) {
    return NodeError(n, side,
                     "expected an array (torch 1.13) or an object of values, shapes and types "
                     "(torch 2)");
  }
  // torch 1.13: "inputs", "input_shapes", "input_types"; torch 2: "inputs":
  // {"values", "shapes", "types", "strides"}.
  const bool torch2 = io->is_object();
  const json& owner = torch2 ? *io : v;
  const std::string one = side.substr(0, side.size() - 1);  // "inputs" -> "input_types"
  const std::string values_name = torch2 ? side + ".values" : side;
  const std::string shapes_name = torch2 ? side + ".shapes" : one + "_shapes";
  const std::string types_name = torch2 ? side + ".types" : one + "_types";
  const auto values = torch2 ? owner.find("values") : io;
  const auto shape_list = owner.find(torch2 ? "shapes" : one + "_shapes");
  const auto types = owner.find(torch2 ? "types" : one + "_types");
  if (values == owner.end() || !values->is_array()) {
    return NodeError(n, values_name, "expected an array");
  }
  if (types == owner.end() || !types->is_array() || types->size() != values->size()) {
    return NodeError(n, types_name, "expected an array as long as " + values_name);
  }
  const bool have_shapes = shape_list != owner.end() && shape_list->is_array();
  if (have_shapes && shape_list->size() != values->size()) {
    return NodeError(n, shapes_name, "expected an array as long as " + values_name);
  }
  static const json kNull;
  for (size_t i = 0; i < values->size(); ++i) {
    const std::string field = side + "[" + std::to_string(i) + "]";
    const json& type = (*types)[i];
    if (!type.is_string()) return NodeError(n, types_name, "expected strings");
    const std::string& ty = type.get_ref<const std::string&>();
    const json& shape = have_shapes ? (*shape_list)[i] : kNull;
    std::vector<int64_t> arg_shape;
    if (ty.starts_with("Tensor(")) {
      SSDTRAIN_ASSIGN_OR_RETURN(TensorValue t, ReadTensor(n, field, (*values)[i], shape, ty));
      if (t.itemsize > 0) {
        arg_shape = t.shape;
        tensors->push_back(std::move(t));
      }
    } else if ((ty.starts_with("GenericList[") || ty.starts_with("Tuple[")) &&
               ty.find("Tensor(") != std::string::npos) {
      // "GenericList[Tensor(float),Tensor(float)]": a list (or tuple) of tensors.
      const json& list = (*values)[i];
      if (!list.is_array()) return NodeError(n, field, "expected a list of tensors");
      std::vector<std::string_view> elem_types;
      std::string_view rest = std::string_view(ty).substr(ty.find('[') + 1);
      if (rest.ends_with("]")) rest.remove_suffix(1);
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        elem_types.push_back(rest.substr(0, comma));
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
      for (size_t e = 0; e < list.size(); ++e) {
        const std::string_view et = e < elem_types.size() ? elem_types[e] : elem_types.back();
        if (!et.starts_with("Tensor(")) continue;
        const json& es = shape.is_array() && e < shape.size() ? shape[e] : kNull;
        SSDTRAIN_ASSIGN_OR_RETURN(
            TensorValue t, ReadTensor(n, field + "[" + std::to_string(e) + "]", list[e], es, et));
        if (t.itemsize > 0) tensors->push_back(std::move(t));
      }
    }
    shapes->push_back(std::move(arg_shape));
  }
  return Status::Ok();
}

Status Importer::ReadCall(size_t node, OpCall* call) const {
  const Node& n = nodes_[node];
  call->node = node;
  SSDTRAIN_RETURN_IF_ERROR(ReadValues(n, "inputs", &call->inputs, &call->arg_shapes));
  ArgShapes ignored;
  SSDTRAIN_RETURN_IF_ERROR(ReadValues(n, "outputs", &call->outputs, &ignored));
  // The calls inside, in the order they started.
  std::vector<size_t> stack(children_[node].rbegin(), children_[node].rend());
  while (!stack.empty()) {
    const size_t c = stack.back();
    stack.pop_back();
    if (nodes_[c].op)
      SSDTRAIN_RETURN_IF_ERROR(ReadValues(nodes_[c], "outputs", &call->inner, &ignored));
    stack.insert(stack.end(), children_[c].rbegin(), children_[c].rend());
  }
  return Status::Ok();
}

std::string Importer::ScopeName(const Node& n) const {
  return n.scope >= 0 ? nodes_[static_cast<size_t>(n.scope)].name : std::string();
}

// The first integer of a scope name between dots: "blocks.3.mlp" -> 3
// (ssdtrain.capture's rule for module names).
int Importer::LayerOf(const std::string& scope) {
  const auto known = layers_.find(scope);
  if (known != layers_.end()) return known->second;
  static const std::regex kLayer(R"((?:^|\.)(\d+)(?:\.|$))");
  std::smatch m;
  int layer = kNoLayer;
  if (std::regex_search(scope, m, kLayer) && m[1].length() <= 6) layer = std::stoi(m[1].str());
  layers_.emplace(scope, layer);
  return layer;
}

// The op's name without its namespace: "aten::addmm" -> "addmm".
std::string ShortName(const std::string& name) {
  const size_t colons = name.rfind("::");
  return colons == std::string::npos ? name : name.substr(colons + 2);
}

Result<PytorchEtImport> Importer::Run() {
  if (!j_.is_object()) return Error("expected a PyTorch execution trace (a JSON object)");
  const auto schema = j_.find("schema");
  if (schema == j_.end() || !schema->is_string()) {
    return Error("schema: expected the execution trace's schema string (e.g. \"1.0.1\")");
  }
  SSDTRAIN_RETURN_IF_ERROR(ReadNodes());
  SSDTRAIN_RETURN_IF_ERROR(WalkAncestry());

  children_.assign(nodes_.size(), {});
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const auto p = index_.find(nodes_[i].parent);
    if (p != index_.end() && p->second != i) children_[p->second].push_back(i);
  }
  for (std::vector<size_t>& c : children_) {
    std::sort(c.begin(), c.end(), [&](size_t a, size_t b) { return nodes_[a].id < nodes_[b].id; });
  }
  // The top-level operator calls, in the order they started.
  std::vector<size_t> tops;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].op && !nodes_[i].under_op) tops.push_back(i);
  }
  std::sort(tops.begin(), tops.end(),
            [&](size_t a, size_t b) { return nodes_[a].id < nodes_[b].id; });
  int64_t first_backward = -1, last_backward = -1;
  for (size_t i : tops) {
    if (nodes_[i].evaluate < 0) continue;
    if (first_backward < 0) first_backward = nodes_[i].id;
    last_backward = nodes_[i].id;
  }
  if (tops.empty()) return Error("no operator nodes (a non-empty op_schema): nothing ran");
  if (first_backward < 0) {
    return Error(
        "no backward: no operator runs under an autograd::engine::evaluate_function node "
        "(observe a whole training step, loss.backward() included)");
  }
  calls_.reserve(tops.size());
  for (size_t i : tops) {
    OpCall call;
    SSDTRAIN_RETURN_IF_ERROR(ReadCall(i, &call));
    const int64_t id = nodes_[i].id;
    call.phase = nodes_[i].evaluate >= 0 || (id > first_backward && id < last_backward)
                     ? Phase::kBackward
                     : (id < first_backward ? Phase::kForward : Phase::kOptimizer);
    calls_.push_back(std::move(call));
  }
  Build();
  SSDTRAIN_RETURN_IF_ERROR(Validate(out_.trace, source_ + " (imported)"));
  return std::move(out_);
}

void Importer::Build() {
  Trace& trace = out_.trace;
  // Gradients accumulated into leaves, by (shape, dtype): the weights' (an
  // AccumulateGrad node's input is the gradient of one leaf of that shape).
  std::map<std::pair<std::vector<int64_t>, DType>, int> leaf_grads;
  for (const Node& n : nodes_) {
    if (n.name != kAccumulateGrad) continue;
    std::vector<TensorValue> grads;
    ArgShapes ignored;
    if (!ReadValues(n, "inputs", &grads, &ignored).ok()) continue;
    for (const TensorValue& g : grads) ++leaf_grads[{g.shape, g.dtype}];
  }

  // The forward top-level op of each (thread, seq_id), for backward ops' layers and names.
  std::map<std::pair<int64_t, int64_t>, size_t> forward_of_seq;
  for (const Node& n : nodes_) {
    if (n.seq_id < 0 || n.evaluate >= 0 || n.top_op < 0) continue;
    forward_of_seq.emplace(std::pair{n.tid, n.seq_id}, static_cast<size_t>(n.top_op));
  }
  bool any_layer = false;

  struct Storage {
    TensorId root = 0;
    std::map<int64_t, TensorId> rows;  // tensor id -> row on this storage
  };
  std::map<std::pair<std::string, int64_t>, Storage> live;  // (device, storage id)
  // Storages an op's inner calls made, not (yet) seen outside it: a row, made
  // by that op, once a later op reads one.
  std::map<std::pair<std::string, int64_t>, std::pair<OpId, TensorValue>> inner_made;
  std::vector<std::string> op_scopes;  // each op's scope
  int weights = 0, inputs = 0, optimizer_state = 0;

  auto add_tensor = [&](const TensorValue& v, OpId producer, TensorKind kind,
                        std::optional<TensorId> alias_of, const std::string& scope, int layer) {
    Tensor t;
    t.id = static_cast<TensorId>(trace.tensors.size());
    t.dtype = v.dtype;
    t.kind = kind;
    t.producer = producer;
    t.layer = layer;
    t.alias_of = alias_of;
    if (alias_of) {
      t.shape = v.shape;
      t.bytes = std::min(v.bytes(), trace.tensors[static_cast<size_t>(*alias_of)].bytes);
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
    trace.tensors.push_back(std::move(t));
    return trace.tensors.back().id;
  };

  for (const OpCall& call : calls_) {
    const Node& n = nodes_[call.node];
    const OpId oid = static_cast<OpId>(trace.ops.size());
    // Its scope: its own, or for a backward op, its forward op's.
    std::string scope = ScopeName(n);
    std::string grad_fn;
    if (call.phase == Phase::kBackward && n.grad_fn >= 0) {
      const Node& g = nodes_[static_cast<size_t>(n.grad_fn)];
      grad_fn = g.name;
      const int64_t fw_thread = g.fw_tid != 0 ? g.fw_tid : g.tid;
      const auto f = forward_of_seq.find({fw_thread, g.seq_id});
      if (g.seq_id >= 0 && f != forward_of_seq.end()) scope = ScopeName(nodes_[f->second]);
    }
    const int layer = LayerOf(scope);
    any_layer = any_layer || layer != kNoLayer;

    Op op;
    op.id = oid;
    op.phase = call.phase;
    op.layer = layer;
    const std::string short_name = ShortName(n.name);
    op.name = (scope.empty() ? std::string("<model>") : scope) + "." +
              (grad_fn.empty() ? "" : ShortName(grad_fn) + ".") + short_name;

    // Inputs: rows of live storages, or storages made before the trace.
    std::set<std::pair<std::string, int64_t>> input_storages;
    auto add_input = [&](TensorId r) {
      if (std::find(op.inputs.begin(), op.inputs.end(), r) == op.inputs.end()) {
        op.inputs.push_back(r);
      }
    };
    for (const TensorValue& v : call.inputs) {
      const std::pair key{v.device, v.storage_id};
      input_storages.insert(key);
      auto it = live.find(key);
      if (const auto inner = inner_made.find(key); it == live.end() && inner != inner_made.end()) {
        const auto [by, made_v] = inner->second;
        Op& producer = trace.ops[static_cast<size_t>(by)];
        const TensorKind kind = producer.phase == Phase::kForward    ? TensorKind::kActivation
                                : producer.phase == Phase::kBackward ? TensorKind::kGradient
                                                                     : TensorKind::kWorkspace;
        const TensorId r = add_tensor(made_v, by, kind, std::nullopt,
                                      op_scopes[static_cast<size_t>(by)], producer.layer);
        producer.outputs.push_back(r);
        it = live.emplace(key, Storage{r, {{made_v.tensor_id, r}}}).first;
        inner_made.erase(inner);
      }
      if (it == live.end()) {
        TensorKind kind = TensorKind::kInput;
        if (v.shape.empty()) {  // a 0-dim tensor from outside: a wrapped number
          ++inputs;
        } else if (call.phase == Phase::kOptimizer) {
          kind = TensorKind::kOptimizerState;
          ++optimizer_state;
        } else if (auto g = leaf_grads.find({v.shape, v.dtype});
                   g != leaf_grads.end() && g->second > 0 && v.offset == 0) {
          --g->second;
          kind = TensorKind::kWeight;
          ++weights;
        } else {
          ++inputs;
        }
        const TensorId r = add_tensor(v, kNoOp, kind, std::nullopt, scope, layer);
        it = live.emplace(key, Storage{r, {{v.tensor_id, r}}}).first;
      }
      const Storage& s = it->second;
      const auto row = s.rows.find(v.tensor_id);
      add_input(row != s.rows.end() ? row->second : s.root);
    }

    // Outputs: in place, a view of an input's storage, or a new storage.
    const TorchOp info = TorchOpInfo(n.name);
    const bool view_op = info.view;
    bool all_alias = true;
    std::set<std::pair<std::string, int64_t>> made;
    const TensorKind made_kind = call.phase == Phase::kForward    ? TensorKind::kActivation
                                 : call.phase == Phase::kBackward ? TensorKind::kGradient
                                                                  : TensorKind::kWorkspace;
    for (const TensorValue& v : call.outputs) {
      const std::pair key{v.device, v.storage_id};
      const auto it = live.find(key);
      const bool on_input = input_storages.count(key) > 0 || made.count(key) > 0;
      if (v.numel == 0) {  // empty: no storage to share (their ids may all be one address)
        all_alias = false;
        op.outputs.push_back(add_tensor(v, oid, made_kind, std::nullopt, scope, layer));
        continue;
      }
      if (it != live.end() && on_input) {
        Storage& s = it->second;
        const auto row = s.rows.find(v.tensor_id);
        if (row != s.rows.end()) {  // written in place: one more input
          if (trace.tensors[static_cast<size_t>(row->second)].producer != oid) {
            add_input(row->second);
          }
          continue;
        }
        const TensorId r = add_tensor(v, oid, trace.tensors[static_cast<size_t>(s.root)].kind,
                                      s.root, scope, layer);
        s.rows.emplace(v.tensor_id, r);
        op.outputs.push_back(r);
        continue;
      }
      all_alias = false;
      const TensorId r = add_tensor(v, oid, made_kind, std::nullopt, scope, layer);
      live[key] = Storage{r, {{v.tensor_id, r}}};
      inner_made.erase(key);
      made.insert(key);
      op.outputs.push_back(r);
    }
    // What its inner calls made at other addresses: newer than any storage
    // that held the address before.
    for (const TensorValue& v : call.inner) {
      const std::pair key{v.device, v.storage_id};
      if (v.numel == 0 || input_storages.count(key) > 0 || made.count(key) > 0) continue;
      live.erase(key);
      inner_made.insert_or_assign(key, std::pair{oid, v});
    }
    op_scopes.push_back(scope);

    // Work.
    const bool view = view_op && all_alias;
    int64_t out_elements = 0, written = 0, read = 0;
    for (const TensorValue& v : call.outputs) {
      out_elements += v.numel;
      written += v.bytes();
    }
    for (const TensorValue& v : call.inputs) {
      const auto it = live.find({v.device, v.storage_id});
      const int64_t root_bytes =
          it == live.end() ? v.bytes() : trace.tensors[static_cast<size_t>(it->second.root)].bytes;
      read += std::min(v.bytes(), root_bytes);
    }
    op.kind = info.kind;
    if (view) {
      op.kind = OpKind::kElementwise;
    } else if (const std::optional<GemmDims> dims = TorchGemmDims(n.name, call.arg_shapes)) {
      op.gemm = *dims;
      op.flops = 2 * dims->m * dims->n * dims->k * dims->batch;
    } else if (const std::optional<int64_t> f = TorchAttentionFlops(n.name, call.arg_shapes)) {
      op.flops = *f;
    } else {
      if (op.kind == OpKind::kGemm || op.kind == OpKind::kAttention) op.kind = OpKind::kElementwise;
      op.flops = out_elements;
    }
    if (!view) {
      op.bytes_read = read;
      op.bytes_written = written;
    }
    if (call.phase == Phase::kOptimizer) op.kind = OpKind::kOptimizer;
    for (TensorId r : op.inputs) trace.tensors[static_cast<size_t>(r)].consumers.push_back(oid);
    trace.ops.push_back(std::move(op));
  }

  // Saved for backward: made in forward, read by a backward op.
  for (Tensor& t : trace.tensors) {
    const TensorId root = trace.StorageOf(t.id);
    const Tensor& r = trace.tensors[static_cast<size_t>(root)];
    if (r.producer == kNoOp || trace.op(r.producer).phase != Phase::kForward) continue;
    for (OpId c : t.consumers) {
      if (trace.op(c).phase == Phase::kBackward) t.saved_for_backward = true;
    }
  }
  for (Tensor& t : trace.tensors) {
    if (t.saved_for_backward) {
      trace.tensors[static_cast<size_t>(trace.StorageOf(t.id))].saved_for_backward = true;
    }
  }
  // One layer, 0, without numbered scopes (the planners never offload layer -1).
  if (!any_layer) {
    for (Tensor& t : trace.tensors) t.layer = 0;
    for (Op& o : trace.ops) o.layer = 0;
  } else {
    // A tensor made before the trace takes its first reader's layer.
    for (Tensor& t : trace.tensors) {
      if (t.producer == kNoOp && !t.consumers.empty()) t.layer = trace.op(t.consumers[0]).layer;
    }
  }
  std::map<DType, int64_t> activation_bytes;
  int max_layer = 0;
  for (Tensor& t : trace.tensors) {
    const Tensor& root = trace.tensors[static_cast<size_t>(trace.StorageOf(t.id))];
    t.offloadable = root.kind == TensorKind::kActivation && root.bytes >= options_.min_bytes;
    if (!t.alias_of && t.kind == TensorKind::kActivation) activation_bytes[t.dtype] += t.bytes;
    max_layer = std::max(max_layer, t.layer);
  }
  // The header: what the file cannot say.
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
  a.push_back(any_layer ? "layers: from numbered record_function scopes, " +
                              std::to_string(h.layers) + " (ops outside them are layer -1)"
                        : "layers: no numbered record_function scope (e.g. \"blocks.3\"): the "
                          "whole step is one layer, 0");
  a.push_back(std::to_string(weights) +
              " tensors made before the trace are weights (backward "
              "accumulates a gradient of their shape into a leaf), " +
              std::to_string(inputs) + " step inputs" +
              (optimizer_state > 0 ? ", " + std::to_string(optimizer_state) + " optimizer state"
                                   : std::string()));
  a.push_back(
      "saved for backward: made in forward and read by a backward op; offloadable: "
      "activations of at least " +
      std::to_string(options_.min_bytes) + " bytes");
}

}  // namespace

bool IsPytorchEt(const json& j) {
  return j.is_object() && j.contains("nodes") && j.contains("schema") && !j.contains("format");
}

Result<PytorchEtImport> TraceFromPytorchEt(const json& j, const std::string& source,
                                           const PytorchEtOptions& options) {
  return Importer(j, source, options).Run();
}

}  // namespace ssdtrain::traces

// PyTorch execution traces as traces (traces/pytorch_et.h).
#include "traces/pytorch_et.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "traces/detail/json_fields.h"
#include "traces/detail/pytorch_et_importer.h"
#include "traces/validate.h"

namespace ssdtrain::traces {
namespace detail {

using nlohmann::json;

Result<PytorchEtImport> EtImporter::Run() {
  if (!j_.is_object()) return Error("expected a PyTorch execution trace (a JSON object)");
  const auto schema = j_.find("schema");
  if (schema == j_.end() || !schema->is_string()) {
    return Error("schema: expected the execution trace's schema string (e.g. \"1.0.1\")");
  }
  SSDTRAIN_RETURN_IF_ERROR(ReadNodes());
  SSDTRAIN_RETURN_IF_ERROR(WalkAncestry());

  SSDTRAIN_RETURN_IF_ERROR(ReadCalls());
  Build();
  SSDTRAIN_RETURN_IF_ERROR(Validate(out_.trace, source_ + " (imported)"));
  return std::move(out_);
}

Status EtImporter::ReadNodes() {
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
Status EtImporter::WalkAncestry() {
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

// The top-level operator calls with their tensors and phases: backward
// under an evaluate_function node (and between the first and the last such),
// forward before, optimizer after.
Status EtImporter::ReadCalls() {
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
  return Status::Ok();
}

}  // namespace detail

bool IsPytorchEt(const nlohmann::json& j) {
  return j.is_object() && j.contains("nodes") && j.contains("schema") && !j.contains("format");
}

Result<PytorchEtImport> TraceFromPytorchEt(const nlohmann::json& j, const std::string& source,
                                           const PytorchEtOptions& options) {
  return detail::EtImporter(j, source, options).Run();
}

}  // namespace ssdtrain::traces

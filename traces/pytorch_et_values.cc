// Tensor values of PyTorch execution-trace nodes (traces/detail/pytorch_et_importer.h):
// a node's inputs and outputs in torch 1.13's and torch 2's layouts, each
// tensor checked, and the scopes and layers of ops.
#include <regex>

#include "traces/detail/pytorch_et_importer.h"

namespace ssdtrain::traces::detail {

using nlohmann::json;

std::optional<int64_t> AsInt(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

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

Result<TensorValue> EtImporter::ReadTensor(const Node& n, const std::string& field,
                                           const json& value, const json& shape,
                                           std::string_view type) const {
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
Status EtImporter::ReadValues(const Node& n, const std::string& side,
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

Status EtImporter::ReadCall(size_t node, OpCall* call) const {
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

std::string EtImporter::ScopeName(const Node& n) const {
  return n.scope >= 0 ? nodes_[static_cast<size_t>(n.scope)].name : std::string();
}

// The first integer of a scope name between dots: "blocks.3.mlp" -> 3
// (ssdtrain.capture's rule for module names).
int EtImporter::LayerOf(const std::string& scope) {
  const auto known = layers_.find(scope);
  if (known != layers_.end()) return known->second;
  static const std::regex kLayer(R"((?:^|\.)(\d+)(?:\.|$))");
  std::smatch m;
  int layer = kNoLayer;
  if (std::regex_search(scope, m, kLayer) && m[1].length() <= 6) layer = std::stoi(m[1].str());
  layers_.emplace(scope, layer);
  return layer;
}

std::string ShortName(const std::string& name) {
  const size_t colons = name.rfind("::");
  return colons == std::string::npos ? name : name.substr(colons + 2);
}

}  // namespace ssdtrain::traces::detail

// The Chakra ET reader (traces/chakra.h): files `ssdtrain export --chakra`
// wrote, back into traces; field numbers from schema/chakra_et.proto.
#include <map>
#include <set>

#include "traces/chakra.h"
#include "traces/detail/chakra_fields.h"
#include "traces/detail/protobuf_wire.h"
#include "traces/io.h"

namespace ssdtrain::traces {
namespace {

using detail::ProtoField;
using detail::WireType;
using namespace chakra_et;  // the field numbers and enum values, nothing else

// A message's attrs (field `attr_field`) by name: each the field holding its value.
struct Attrs {
  std::map<std::string, ProtoField, std::less<>> by_name;
  std::string where;  // "node 12 (\"fc1\")" or "the metadata", for messages

  Status Error(std::string_view name, const std::string& what) const {
    return Status::InvalidArgument(where + ": attribute " + std::string(name) + ": " + what);
  }
  const ProtoField* Find(std::string_view name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : &it->second;
  }
  Result<const ProtoField*> Need(std::string_view name, int number, WireType type,
                                 const char* expected) const {
    const ProtoField* f = Find(name);
    if (f == nullptr) return Error(name, "missing (expected " + std::string(expected) + ")");
    if (f->number != number || f->type != type) {
      return Error(name, "field " + std::to_string(f->number) + " where " + expected + " (field " +
                             std::to_string(number) + ") was expected");
    }
    return f;
  }
  Result<int64_t> Int(std::string_view name) const {
    SSDTRAIN_ASSIGN_OR_RETURN(const ProtoField* f,
                              Need(name, kAttrInt64, WireType::kVarint, "int64_val"));
    return static_cast<int64_t>(f->value);
  }
  Result<std::string> String(std::string_view name) const {
    SSDTRAIN_ASSIGN_OR_RETURN(const ProtoField* f,
                              Need(name, kAttrString, WireType::kLengthDelimited, "string_val"));
    return std::string(f->bytes);
  }
  // A list message's field 1, as varints (Int64List, BoolList) or strings.
  Result<std::vector<int64_t>> IntList(std::string_view name, int number = kAttrInt64List,
                                       const char* expected = "int64_list") const {
    SSDTRAIN_ASSIGN_OR_RETURN(const ProtoField* f,
                              Need(name, number, WireType::kLengthDelimited, expected));
    std::vector<ProtoField> fields;
    std::string error;
    if (!detail::ParseFields(f->bytes, &fields, &error)) return Error(name, error);
    std::vector<uint64_t> values;
    for (const ProtoField& v : fields) {
      if (v.number != 1 || !detail::UnpackVarints(v, &values)) {
        return Error(name, "field " + std::to_string(v.number) + " is not a list of varints");
      }
    }
    return std::vector<int64_t>(values.begin(), values.end());
  }
  Result<std::vector<std::string>> StringList(std::string_view name) const {
    SSDTRAIN_ASSIGN_OR_RETURN(const ProtoField* f, Need(name, kAttrStringList,
                                                        WireType::kLengthDelimited, "string_list"));
    std::vector<ProtoField> fields;
    std::string error;
    if (!detail::ParseFields(f->bytes, &fields, &error)) return Error(name, error);
    std::vector<std::string> out;
    for (const ProtoField& v : fields) {
      if (v.number != 1 || v.type != WireType::kLengthDelimited) {
        return Error(name, "field " + std::to_string(v.number) + " is not a string");
      }
      out.emplace_back(v.bytes);
    }
    return out;
  }
};

// The attrs (AttributeProto messages) among `fields` with number `attr_field`.
Result<Attrs> ReadAttrs(const std::vector<ProtoField>& fields, int attr_field, std::string where) {
  Attrs attrs;
  attrs.where = std::move(where);
  for (const ProtoField& f : fields) {
    if (f.number != attr_field || f.type != WireType::kLengthDelimited) continue;
    std::vector<ProtoField> parts;
    std::string error;
    if (!detail::ParseFields(f.bytes, &parts, &error)) {
      return Status::InvalidArgument(attrs.where + ": an attribute: " + error);
    }
    std::string name;
    ProtoField value;
    for (const ProtoField& p : parts) {
      if (p.number == kAttrName && p.type == WireType::kLengthDelimited) {
        name = std::string(p.bytes);
      } else if (p.number != 2) {  // 2: doc_string
        value = p;
      }
    }
    attrs.by_name[name] = value;
  }
  return attrs;
}

// The file's messages: each a varint length, then that many bytes.
Result<std::vector<std::pair<size_t, std::string_view>>> SplitStream(std::string_view bytes,
                                                                     const std::string& source) {
  std::vector<std::pair<size_t, std::string_view>> out;
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t start = at;
    uint64_t n = 0;
    if (!detail::ReadVarint(bytes, &at, &n) || n > bytes.size() - at) {
      return Status::InvalidArgument(source + ": message " + std::to_string(out.size()) +
                                     " at byte " + std::to_string(start) +
                                     ": its length runs past the end of the file (truncated, "
                                     "or not a Chakra ET file)");
    }
    out.emplace_back(start, bytes.substr(at, static_cast<size_t>(n)));
    at += static_cast<size_t>(n);
  }
  if (out.empty()) return Status::InvalidArgument(source + ": empty: no Chakra metadata");
  return out;
}

// Each tensor column of the metadata, checked to hold one value per tensor.
Result<nlohmann::json> TensorsFromMetadata(const Attrs& meta) {
  SSDTRAIN_ASSIGN_OR_RETURN(auto names, meta.StringList("ssdtrain.tensor.name"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto dtypes, meta.StringList("ssdtrain.tensor.dtype"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto kinds, meta.StringList("ssdtrain.tensor.kind"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto bytes, meta.IntList("ssdtrain.tensor.bytes"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto alias_of, meta.IntList("ssdtrain.tensor.alias_of"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto layer, meta.IntList("ssdtrain.tensor.layer"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto micro_batch, meta.IntList("ssdtrain.tensor.micro_batch"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto producer, meta.IntList("ssdtrain.tensor.producer"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto rank, meta.IntList("ssdtrain.tensor.rank"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto shape, meta.IntList("ssdtrain.tensor.shape"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto consumer_count, meta.IntList("ssdtrain.tensor.consumer_count"));
  SSDTRAIN_ASSIGN_OR_RETURN(auto consumers, meta.IntList("ssdtrain.tensor.consumers"));
  SSDTRAIN_ASSIGN_OR_RETURN(
      auto saved, meta.IntList("ssdtrain.tensor.saved_for_backward", kAttrBoolList, "bool_list"));
  SSDTRAIN_ASSIGN_OR_RETURN(
      auto offloadable, meta.IntList("ssdtrain.tensor.offloadable", kAttrBoolList, "bool_list"));
  const size_t n = names.size();
  for (const auto& [name, size] : {std::pair<const char*, size_t>{"dtype", dtypes.size()},
                                   {"kind", kinds.size()},
                                   {"bytes", bytes.size()},
                                   {"alias_of", alias_of.size()},
                                   {"layer", layer.size()},
                                   {"micro_batch", micro_batch.size()},
                                   {"producer", producer.size()},
                                   {"rank", rank.size()},
                                   {"consumer_count", consumer_count.size()},
                                   {"saved_for_backward", saved.size()},
                                   {"offloadable", offloadable.size()}}) {
    if (size != n) {
      return meta.Error(std::string("ssdtrain.tensor.") + name,
                        std::to_string(size) + " values for " + std::to_string(n) + " tensors");
    }
  }
  nlohmann::json tensors = nlohmann::json::array();
  size_t s = 0, c = 0;
  for (size_t i = 0; i < n; ++i) {
    if (rank[i] < 0 || static_cast<uint64_t>(rank[i]) > shape.size() - s) {
      return meta.Error("ssdtrain.tensor.shape", "tensor " + std::to_string(i) + "'s " +
                                                     std::to_string(rank[i]) +
                                                     " dimensions run past the list");
    }
    if (consumer_count[i] < 0 || static_cast<uint64_t>(consumer_count[i]) > consumers.size() - c) {
      return meta.Error("ssdtrain.tensor.consumers", "tensor " + std::to_string(i) + "'s " +
                                                         std::to_string(consumer_count[i]) +
                                                         " consumers run past the list");
    }
    const auto r = static_cast<size_t>(rank[i]);
    const auto k = static_cast<size_t>(consumer_count[i]);
    tensors.push_back(nlohmann::json{
        {"id", i},
        {"name", names[i]},
        {"bytes", bytes[i]},
        {"dtype", dtypes[i]},
        {"shape", std::vector<int64_t>(shape.begin() + static_cast<std::ptrdiff_t>(s),
                                       shape.begin() + static_cast<std::ptrdiff_t>(s + r))},
        {"kind", kinds[i]},
        {"producer", producer[i] < 0 ? nlohmann::json(nullptr) : nlohmann::json(producer[i])},
        {"consumers", std::vector<int64_t>(consumers.begin() + static_cast<std::ptrdiff_t>(c),
                                           consumers.begin() + static_cast<std::ptrdiff_t>(c + k))},
        {"saved_for_backward", saved[i] != 0},
        {"alias_of", alias_of[i] < 0 ? nlohmann::json(nullptr) : nlohmann::json(alias_of[i])},
        {"layer", layer[i]},
        {"micro_batch", micro_batch[i]},
        {"offloadable", offloadable[i] != 0}});
    s += r;
    c += k;
  }
  return tensors;
}

// An op node's op, as the trace format's JSON; its control deps into `edges`.
Result<nlohmann::json> OpFromNode(const std::vector<ProtoField>& fields, const Attrs& a,
                                  uint64_t id, nlohmann::json* edges) {
  nlohmann::json op{{"id", id}};
  std::string name;
  std::vector<uint64_t> ctrl;
  for (const ProtoField& f : fields) {
    if (f.number == kNodeName && f.type == WireType::kLengthDelimited) name = std::string(f.bytes);
    if (f.number == kNodeCtrlDeps && !detail::UnpackVarints(f, &ctrl)) {
      return Status::InvalidArgument(a.where + ": ctrl_deps are not varints");
    }
  }
  op["name"] = name;
  SSDTRAIN_ASSIGN_OR_RETURN(op["kind"], a.String("ssdtrain.kind"));
  SSDTRAIN_ASSIGN_OR_RETURN(op["phase"], a.String("ssdtrain.phase"));
  for (const char* field :
       {"layer", "micro_batch", "stage", "stream", "bytes_read", "bytes_written"}) {
    SSDTRAIN_ASSIGN_OR_RETURN(op[field], a.Int(std::string("ssdtrain.") + field));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(op["flops"], a.Int("num_ops"));
  SSDTRAIN_ASSIGN_OR_RETURN(op["inputs"], a.IntList("ssdtrain.inputs"));
  SSDTRAIN_ASSIGN_OR_RETURN(op["outputs"], a.IntList("ssdtrain.outputs"));
  // [m, n, k, batch, fp8] at `attr` as the trace's gemm object.
  auto gemm_of = [&a](const char* attr) -> Result<nlohmann::json> {
    SSDTRAIN_ASSIGN_OR_RETURN(std::vector<int64_t> g, a.IntList(attr));
    if (g.size() != 5) return a.Error(attr, "expected [m, n, k, batch, fp8]");
    nlohmann::json j{{"m", g[0]}, {"n", g[1]}, {"k", g[2]}, {"batch", g[3]}};
    if (g[4] != 0) j["fp8"] = true;
    return j;
  };
  op["gemm"] = nullptr;
  if (a.Find("ssdtrain.gemm") != nullptr) {
    SSDTRAIN_ASSIGN_OR_RETURN(op["gemm"], gemm_of("ssdtrain.gemm"));
  }
  if (a.Find("ssdtrain.tp_overlap.method") != nullptr) {
    SSDTRAIN_ASSIGN_OR_RETURN(op["tp_overlap"]["method"], a.String("ssdtrain.tp_overlap.method"));
    SSDTRAIN_ASSIGN_OR_RETURN(op["tp_overlap"]["gemm"], gemm_of("ssdtrain.tp_overlap.gemm"));
  }
  if (a.Find("ssdtrain.attention.seq_len") != nullptr) {
    SSDTRAIN_ASSIGN_OR_RETURN(op["attention"]["seq_len"], a.Int("ssdtrain.attention.seq_len"));
    SSDTRAIN_ASSIGN_OR_RETURN(op["attention"]["mask"], a.String("ssdtrain.attention.mask"));
  }
  if (a.Find("ssdtrain.measured_ns") != nullptr) {
    SSDTRAIN_ASSIGN_OR_RETURN(op["measured_ns"], a.Int("ssdtrain.measured_ns"));
  }
  std::set<int64_t> sync;
  if (a.Find("ssdtrain.sync_deps") != nullptr) {
    SSDTRAIN_ASSIGN_OR_RETURN(std::vector<int64_t> s, a.IntList("ssdtrain.sync_deps"));
    sync.insert(s.begin(), s.end());
  }
  for (uint64_t from : ctrl) {
    const auto f = static_cast<int64_t>(from);
    edges->push_back(
        nlohmann::json{{"from", f}, {"to", id}, {"kind", sync.count(f) ? "sync" : "order"}});
  }
  return op;
}

}  // namespace

Result<Trace> TraceFromChakra(std::string_view bytes, const std::string& source) {
  SSDTRAIN_ASSIGN_OR_RETURN(auto messages, SplitStream(bytes, source));
  std::vector<ProtoField> fields;
  std::string error;
  if (!detail::ParseFields(messages[0].second, &fields, &error)) {
    return Status::InvalidArgument(source + ": the metadata (message 0): " + error);
  }
  SSDTRAIN_ASSIGN_OR_RETURN(Attrs meta, ReadAttrs(fields, kMetaAttr, source + ": the metadata"));
  if (meta.Find("ssdtrain.header") == nullptr) {
    return Status::InvalidArgument(
        source +
        ": the metadata has no ssdtrain.header attribute: only Chakra files written by "
        "`ssdtrain export --chakra` are read (a Chakra trace from another tool does not "
        "carry the tensors, saved for backward, that a plan is made of)");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(std::string header_text, meta.String("ssdtrain.header"));
  nlohmann::json header = nlohmann::json::parse(header_text, nullptr, false);
  if (header.is_discarded()) return meta.Error("ssdtrain.header", "not JSON");
  SSDTRAIN_ASSIGN_OR_RETURN(nlohmann::json tensors, TensorsFromMetadata(meta));
  std::map<uint64_t, nlohmann::json> ops;
  nlohmann::json edges = nlohmann::json::array();
  for (size_t m = 1; m < messages.size(); ++m) {
    const std::string at = source + ": message " + std::to_string(m) + " (byte " +
                           std::to_string(messages[m].first) + ")";
    if (!detail::ParseFields(messages[m].second, &fields, &error)) {
      return Status::InvalidArgument(at + ": " + error);
    }
    uint64_t id = 0, type = 0;
    std::string name;
    for (const ProtoField& f : fields) {
      if (f.number == kNodeId && f.type == WireType::kVarint) id = f.value;
      if (f.number == kNodeType && f.type == WireType::kVarint) type = f.value;
      if (f.number == kNodeName && f.type == WireType::kLengthDelimited)
        name = std::string(f.bytes);
    }
    const std::string where = at + ", node " + std::to_string(id) + " (\"" + name + "\")";
    if (type == kMemLoadNode || type == kMemStoreNode) continue;  // a plan's, not the trace's
    if (type != kCompNode && type != kCommCollNode && type != kCommSendNode &&
        type != kCommRecvNode) {
      return Status::InvalidArgument(where + ": type " + std::to_string(type) +
                                     " is not a node ssdtrain writes (compute, communication, "
                                     "memory load or store)");
    }
    SSDTRAIN_ASSIGN_OR_RETURN(Attrs a, ReadAttrs(fields, kNodeAttr, where));
    SSDTRAIN_ASSIGN_OR_RETURN(nlohmann::json op, OpFromNode(fields, a, id, &edges));
    if (!ops.emplace(id, std::move(op)).second) {
      return Status::InvalidArgument(where + ": a second node with this id");
    }
  }
  nlohmann::json op_list = nlohmann::json::array();
  for (auto& [id, op] : ops) op_list.push_back(std::move(op));
  const nlohmann::json doc{{"format", kTraceFormatName},  {"version", kTraceFormatVersion},
                           {"header", std::move(header)}, {"tensors", std::move(tensors)},
                           {"ops", std::move(op_list)},   {"edges", std::move(edges)}};
  return TraceFromJson(doc, source);
}

}  // namespace ssdtrain::traces

// The Chakra ET writer (traces/chakra.h); field numbers from schema/chakra_et.proto.
#include "traces/chakra.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "traces/collective_kind.h"
#include "traces/detail/protobuf_wire.h"
#include "traces/io.h"
#include "traces/torch_ops.h"

namespace ssdtrain::traces {
namespace {

using detail::ProtoWriter;

// Chakra's NodeType and CollectiveCommType values (et_def.proto).
enum NodeType : uint64_t {
  kMemLoadNode = 2,
  kMemStoreNode = 3,
  kCompNode = 4,
  kCommSendNode = 5,
  kCommRecvNode = 6,
  kCommCollNode = 7,
};
uint64_t CommType(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return 0;  // ALL_REDUCE
    case CollectiveKind::kAllGather:
      return 2;  // ALL_GATHER
    case CollectiveKind::kAllToAll:
      return 6;  // ALL_TO_ALL
    case CollectiveKind::kReduceScatter:
      return 7;  // REDUCE_SCATTER
    case CollectiveKind::kSendRecv:
      break;
  }
  return 0;
}

// Node's fields (et_def.proto, message Node).
constexpr int kNodeId = 1, kNodeName = 2, kNodeType = 3, kNodeCtrlDeps = 4, kNodeDataDeps = 5,
              kNodeStart = 6, kNodeDuration = 7, kNodeInputs = 8, kNodeOutputs = 9, kNodeAttr = 10;
// IOInfo's, GlobalMetadata's and AttributeProto's.
constexpr int kIoValues = 1, kIoShapes = 2, kIoTypes = 3;
constexpr int kMetaVersion = 1, kMetaAttr = 2;
constexpr int kAttrName = 1, kAttrInt64 = 9, kAttrInt64List = 10, kAttrUint64 = 13, kAttrBool = 27,
              kAttrBoolList = 28, kAttrString = 29, kAttrStringList = 30;

ProtoWriter Attr(std::string_view name) {
  ProtoWriter a;
  a.Bytes(kAttrName, name);
  return a;
}
ProtoWriter IntAttr(std::string_view name, int64_t v) {
  ProtoWriter a = Attr(name);
  a.Int64(kAttrInt64, v);
  return a;
}
ProtoWriter UintAttr(std::string_view name, uint64_t v) {
  ProtoWriter a = Attr(name);
  a.UInt64(kAttrUint64, v);
  return a;
}
ProtoWriter BoolAttr(std::string_view name, bool v) {
  ProtoWriter a = Attr(name);
  a.Bool(kAttrBool, v);
  return a;
}
ProtoWriter StringAttr(std::string_view name, std::string_view v) {
  ProtoWriter a = Attr(name);
  a.Bytes(kAttrString, v);
  return a;
}
ProtoWriter IntListAttr(std::string_view name, const std::vector<int64_t>& v) {
  ProtoWriter list;
  list.PackedInt64(1, v);
  ProtoWriter a = Attr(name);
  a.Message(kAttrInt64List, list);
  return a;
}
ProtoWriter BoolListAttr(std::string_view name, const std::vector<bool>& v) {
  ProtoWriter list;
  list.PackedBool(1, v);
  ProtoWriter a = Attr(name);
  a.Message(kAttrBoolList, list);
  return a;
}
ProtoWriter StringListAttr(std::string_view name, const std::vector<std::string>& v) {
  ProtoWriter list;
  for (const std::string& s : v) list.Bytes(1, s);
  ProtoWriter a = Attr(name);
  a.Message(kAttrStringList, list);
  return a;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s.append(", ");
    s.append(std::to_string(shape[i]));
  }
  s.push_back(']');
  return s;
}

// PyTorch's execution-trace IOInfo strings for a list of tensors.
ProtoWriter IoInfo(const Trace& trace, const std::vector<TensorId>& tensors) {
  std::string values = "[", shapes = "[", types = "[";
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = trace.tensor(tensors[i]);
    if (i > 0) {
      values.append(", ");
      shapes.append(", ");
      types.append(", ");
    }
    values.append(std::to_string(t.id));
    shapes.append(ShapeText(t.shape));
    types.append("\"Tensor(");
    types.append(TorchTypeName(t.dtype));
    types.append(")\"");
  }
  values.push_back(']');
  shapes.push_back(']');
  types.push_back(']');
  ProtoWriter io;
  io.Bytes(kIoValues, values);
  io.Bytes(kIoShapes, shapes);
  io.Bytes(kIoTypes, types);
  return io;
}

struct NodeSpec {
  uint64_t id = 0;
  std::string name;
  uint64_t type = kCompNode;
  std::vector<uint64_t> data_deps, ctrl_deps;
  std::vector<int64_t> sync_deps;  // the ctrl_deps that are sync edges (EdgeKind::kSync)
  int64_t start_ns = -1, duration_ns = -1;
  OpId op = kNoOp;       // an op's node
  TensorId tensor = -1;  // an SSD transfer's node
  int64_t bytes = 0;     // an SSD transfer's
};

// Every node, ops first (node id = op id), then each offloaded storage's
// store and load, with their dependencies and times.
std::vector<NodeSpec> BuildNodes(const Trace& trace, const ChakraOptions& o) {
  std::vector<NodeSpec> nodes(trace.ops.size());
  // Times of stage 0's first micro-batch from the timeline: ops and transfers.
  std::map<OpId, std::pair<int64_t, int64_t>> op_times;
  std::map<std::pair<TensorId, Lane>, std::pair<int64_t, int64_t>> io_times;
  if (o.timeline != nullptr) {
    for (const Span& s : o.timeline->spans) {
      if (s.stage != 0 || s.micro_batch != 0) continue;
      if (s.lane == Lane::kCompute && s.op != kNoOp) {
        op_times.emplace(s.op, std::make_pair(s.start_ns, s.end_ns));
      } else if ((s.lane == Lane::kSsdWrite || s.lane == Lane::kSsdRead) && s.tensor >= 0) {
        // A tensor's transfer may be several spans (stripes): the whole of them.
        auto [it, fresh] = io_times.emplace(std::make_pair(s.tensor, s.lane),
                                            std::make_pair(s.start_ns, s.end_ns));
        if (!fresh) {
          it->second.first = std::min(it->second.first, s.start_ns);
          it->second.second = std::max(it->second.second, s.end_ns);
        }
      }
    }
  }
  std::vector<std::vector<uint64_t>> ctrl(trace.ops.size());
  std::vector<std::set<int64_t>> sync(trace.ops.size());
  for (const Edge& e : trace.edges) {
    ctrl[static_cast<size_t>(e.to)].push_back(static_cast<uint64_t>(e.from));
    if (e.kind == EdgeKind::kSync) sync[static_cast<size_t>(e.to)].insert(e.from);
  }
  for (const Op& op : trace.ops) {
    NodeSpec& n = nodes[static_cast<size_t>(op.id)];
    n.id = static_cast<uint64_t>(op.id);
    n.name = op.name;
    n.op = op.id;
    n.type = op.kind == OpKind::kCollective ? kCommCollNode
             : op.kind == OpKind::kSend     ? kCommSendNode
             : op.kind == OpKind::kRecv     ? kCommRecvNode
                                            : kCompNode;
    std::set<uint64_t> deps;
    for (TensorId t : op.inputs) {
      const OpId p = trace.tensor(t).producer;
      if (p != kNoOp && p != op.id) deps.insert(static_cast<uint64_t>(p));
    }
    n.data_deps.assign(deps.begin(), deps.end());
    std::set<uint64_t> c(ctrl[static_cast<size_t>(op.id)].begin(),
                         ctrl[static_cast<size_t>(op.id)].end());
    n.ctrl_deps.assign(c.begin(), c.end());
    n.sync_deps.assign(sync[static_cast<size_t>(op.id)].begin(),
                       sync[static_cast<size_t>(op.id)].end());
    if (auto it = op_times.find(op.id); it != op_times.end()) {
      n.start_ns = it->second.first;
      n.duration_ns = it->second.second - it->second.first;
    } else if (op.measured_ns) {
      n.duration_ns = *op.measured_ns;
    }
  }
  if (o.plan == nullptr) return nodes;
  // Each storage the plan writes to the SSD (traces/storage_plan.h decides
  // which, with their bytes and lifetimes): a store after its producer, a load
  // that its first backward use waits for.
  uint64_t next = trace.ops.size();
  for (const StorageInfo& info : o.plan->storages) {
    if (info.action != TensorAction::kOffloadSsd) continue;
    const std::string& name = trace.tensor(info.root).name;
    NodeSpec store;
    store.id = next++;
    store.name = "ssd_write:" + name;
    store.type = kMemStoreNode;
    store.tensor = info.root;
    store.bytes = info.bytes;
    if (info.producer != kNoOp) store.data_deps.push_back(static_cast<uint64_t>(info.producer));
    NodeSpec load;
    load.id = next++;
    load.name = "ssd_read:" + name;
    load.type = kMemLoadNode;
    load.tensor = info.root;
    load.bytes = info.bytes;
    load.data_deps.push_back(store.id);
    if (info.prefetch_before != kNoOp)
      load.ctrl_deps.push_back(static_cast<uint64_t>(info.prefetch_before));
    for (const auto& [spec, lane] : {std::pair{&store, Lane::kSsdWrite}, {&load, Lane::kSsdRead}}) {
      if (auto it = io_times.find({info.root, lane}); it != io_times.end()) {
        spec->start_ns = it->second.first;
        spec->duration_ns = it->second.second - it->second.first;
      }
    }
    if (info.first_backward_use != kNoOp) {
      std::vector<uint64_t>& d = nodes[static_cast<size_t>(info.first_backward_use)].data_deps;
      d.insert(std::upper_bound(d.begin(), d.end(), load.id), load.id);
    }
    nodes.push_back(std::move(store));
    nodes.push_back(std::move(load));
  }
  return nodes;
}

uint64_t Micros(int64_t ns) {
  return static_cast<uint64_t>(std::llround(static_cast<double>(ns) / 1e3));
}

std::string NodeBytes(const Trace& trace, const NodeSpec& n) {
  ProtoWriter w;
  w.UInt64(kNodeId, n.id);
  w.Bytes(kNodeName, n.name);
  w.UInt64(kNodeType, n.type);
  w.PackedUInt64(kNodeCtrlDeps, n.ctrl_deps);
  w.PackedUInt64(kNodeDataDeps, n.data_deps);
  if (n.start_ns >= 0) w.UInt64(kNodeStart, Micros(n.start_ns));
  if (n.duration_ns >= 0) w.UInt64(kNodeDuration, Micros(n.duration_ns));
  if (n.op != kNoOp) {
    const Op& op = trace.op(n.op);
    w.Message(kNodeInputs, IoInfo(trace, op.inputs));
    w.Message(kNodeOutputs, IoInfo(trace, op.outputs));
    w.Message(kNodeAttr, BoolAttr("is_cpu_op", false));
    w.Message(kNodeAttr, IntAttr("num_ops", op.flops));
    if (op.kind == OpKind::kCollective) {
      w.Message(kNodeAttr,
                IntAttr("comm_type", static_cast<int64_t>(CommType(ClassifyCollective(op)))));
      w.Message(kNodeAttr, IntAttr("comm_size", CollectivePayloadBytes(op)));
    } else if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
      w.Message(kNodeAttr, IntAttr("comm_size", CollectivePayloadBytes(op)));
    }
    // What ssdtrain's trace has beyond Chakra's fields.
    w.Message(kNodeAttr, StringAttr("ssdtrain.kind", ToString(op.kind)));
    w.Message(kNodeAttr, StringAttr("ssdtrain.phase", ToString(op.phase)));
    w.Message(kNodeAttr, IntAttr("ssdtrain.layer", op.layer));
    w.Message(kNodeAttr, IntAttr("ssdtrain.micro_batch", op.micro_batch));
    w.Message(kNodeAttr, IntAttr("ssdtrain.stage", op.stage));
    w.Message(kNodeAttr, IntAttr("ssdtrain.stream", op.stream));
    w.Message(kNodeAttr, IntAttr("ssdtrain.bytes_read", op.bytes_read));
    w.Message(kNodeAttr, IntAttr("ssdtrain.bytes_written", op.bytes_written));
    w.Message(kNodeAttr, IntListAttr("ssdtrain.inputs", op.inputs));
    w.Message(kNodeAttr, IntListAttr("ssdtrain.outputs", op.outputs));
    if (op.gemm) {
      const GemmDims& g = *op.gemm;
      w.Message(kNodeAttr, IntListAttr("ssdtrain.gemm", {g.m, g.n, g.k, g.batch, g.fp8 ? 1 : 0}));
    }
    if (op.measured_ns) w.Message(kNodeAttr, IntAttr("ssdtrain.measured_ns", *op.measured_ns));
    if (!n.sync_deps.empty()) w.Message(kNodeAttr, IntListAttr("ssdtrain.sync_deps", n.sync_deps));
  } else {
    w.Message(kNodeAttr, BoolAttr("is_cpu_op", false));
    w.Message(kNodeAttr, UintAttr("tensor_size", static_cast<uint64_t>(n.bytes)));
    w.Message(kNodeAttr, IntAttr("ssdtrain.tensor", n.tensor));
  }
  return w.bytes();
}

std::string MetadataBytes(const Trace& trace) {
  ProtoWriter m;
  m.Bytes(kMetaVersion, kChakraSchemaVersion);
  Trace header_only;
  header_only.header = trace.header;
  m.Message(kMetaAttr, StringAttr("ssdtrain.header", ToJson(header_only)["header"].dump()));
  // The tensor table, column by column; shapes and consumers flattened, with
  // each tensor's count beside them.
  std::vector<std::string> names, dtypes, kinds;
  std::vector<int64_t> bytes, alias_of, layer, micro_batch, producer, rank, shape, consumer_count,
      consumers;
  std::vector<bool> saved, offloadable;
  for (const Tensor& t : trace.tensors) {
    names.push_back(t.name);
    dtypes.emplace_back(ToString(t.dtype));
    kinds.emplace_back(ToString(t.kind));
    bytes.push_back(t.bytes);
    alias_of.push_back(t.alias_of ? *t.alias_of : -1);
    layer.push_back(t.layer);
    micro_batch.push_back(t.micro_batch);
    producer.push_back(t.producer);
    rank.push_back(static_cast<int64_t>(t.shape.size()));
    shape.insert(shape.end(), t.shape.begin(), t.shape.end());
    consumer_count.push_back(static_cast<int64_t>(t.consumers.size()));
    consumers.insert(consumers.end(), t.consumers.begin(), t.consumers.end());
    saved.push_back(t.saved_for_backward);
    offloadable.push_back(t.offloadable);
  }
  m.Message(kMetaAttr, StringListAttr("ssdtrain.tensor.name", names));
  m.Message(kMetaAttr, StringListAttr("ssdtrain.tensor.dtype", dtypes));
  m.Message(kMetaAttr, StringListAttr("ssdtrain.tensor.kind", kinds));
  m.Message(kMetaAttr, IntListAttr("ssdtrain.tensor.bytes", bytes));
  m.Message(kMetaAttr, IntListAttr("ssdtrain.tensor.alias_of", alias_of));
  m.Message(kMetaAttr, IntListAttr("ssdtrain.tensor.layer", layer));
  m.Message(kMetaAttr, IntListAttr("ssdtrain.tensor.micro_batch", micro_batch));
  m.Message(kMetaAttr, IntListAttr("ssdtrain.tensor.producer", producer));
  m.Message(kMetaAttr, IntListAttr("ssdtrain.tensor.rank", rank));
  m.Message(kMetaAttr, IntListAttr("ssdtrain.tensor.shape", shape));
  m.Message(kMetaAttr, IntListAttr("ssdtrain.tensor.consumer_count", consumer_count));
  m.Message(kMetaAttr, IntListAttr("ssdtrain.tensor.consumers", consumers));
  m.Message(kMetaAttr, BoolListAttr("ssdtrain.tensor.saved_for_backward", saved));
  m.Message(kMetaAttr, BoolListAttr("ssdtrain.tensor.offloadable", offloadable));
  return m.bytes();
}

void AppendDelimited(std::string* out, const std::string& message) {
  ProtoWriter::AppendVarint(out, message.size());
  out->append(message);
}

}  // namespace

std::string ToChakra(const Trace& trace, const ChakraOptions& options) {
  std::string out;
  AppendDelimited(&out, MetadataBytes(trace));
  for (const NodeSpec& n : BuildNodes(trace, options)) AppendDelimited(&out, NodeBytes(trace, n));
  return out;
}

ChakraCounts CountChakra(const Trace& trace, const ChakraOptions& options) {
  ChakraCounts c;
  for (const NodeSpec& n : BuildNodes(trace, options)) {
    ++c.nodes;
    (n.op != kNoOp ? c.op_nodes : c.mem_nodes) += 1;
    c.data_deps += static_cast<int64_t>(n.data_deps.size());
    c.ctrl_deps += static_cast<int64_t>(n.ctrl_deps.size());
  }
  return c;
}

namespace {

using detail::ProtoField;
using detail::WireType;

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
  op["gemm"] = nullptr;
  if (a.Find("ssdtrain.gemm") != nullptr) {
    SSDTRAIN_ASSIGN_OR_RETURN(std::vector<int64_t> g, a.IntList("ssdtrain.gemm"));
    if (g.size() != 5) return a.Error("ssdtrain.gemm", "expected [m, n, k, batch, fp8]");
    op["gemm"] = nlohmann::json{{"m", g[0]}, {"n", g[1]}, {"k", g[2]}, {"batch", g[3]}};
    if (g[4] != 0) op["gemm"]["fp8"] = true;
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

bool IsChakraPath(std::string_view path) {
  return path.size() > 3 && path.substr(path.size() - 3) == ".et";
}

}  // namespace ssdtrain::traces

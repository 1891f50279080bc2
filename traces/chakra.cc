// The Chakra ET writer (traces/chakra.h); field numbers from schema/chakra_et.proto.
#include "traces/chakra.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "traces/collective_kind.h"
#include "traces/detail/chakra_fields.h"
#include "traces/detail/protobuf_wire.h"
#include "traces/io.h"
#include "traces/torch_ops.h"

namespace ssdtrain::traces {
namespace {

using detail::ProtoWriter;
using namespace chakra_et;  // the field numbers and enum values, nothing else

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
    if (op.tp_overlap) {
      const GemmDims& g = op.tp_overlap->gemm;
      w.Message(kNodeAttr,
                StringAttr("ssdtrain.tp_overlap.method", ToString(op.tp_overlap->method)));
      w.Message(kNodeAttr,
                IntListAttr("ssdtrain.tp_overlap.gemm", {g.m, g.n, g.k, g.batch, g.fp8 ? 1 : 0}));
    }
    if (op.attention) {
      w.Message(kNodeAttr, IntAttr("ssdtrain.attention.seq_len", op.attention->seq_len));
      w.Message(kNodeAttr, StringAttr("ssdtrain.attention.mask", ToString(op.attention->mask)));
    }
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

bool IsChakraPath(std::string_view path) {
  return path.size() > 3 && path.substr(path.size() - 3) == ".et";
}

}  // namespace ssdtrain::traces

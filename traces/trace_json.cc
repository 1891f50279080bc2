// Traces as JSON (traces/io.h): the format's tables (header, tensors, ops,
// edges) written and read field by field, every field checked on the way in
// with its path (traces/FORMAT.md).
#include "traces/detail/block_kernels_json.h"
#include "traces/detail/json_fields.h"
#include "traces/fp8.h"
#include "traces/io.h"
#include "traces/validate.h"

namespace ssdtrain::traces {
namespace {

using detail::JsonPath;
using detail::ObjectReader;
using detail::ReadBlockKernels;
using detail::WriteBlockKernels;
using nlohmann::json;

json OptionalId(int64_t id) { return id < 0 ? json(nullptr) : json(id); }

json HeaderToJson(const Header& h) {
  json j{{"model", h.model},
         {"family", h.family},
         {"hidden", h.hidden},
         {"heads", h.heads},
         {"kv_heads", h.kv_heads},
         {"layers", h.layers},
         {"ffn_hidden", h.ffn_hidden},
         {"vocab", h.vocab},
         {"seq_len", h.seq_len},
         {"micro_batch", h.micro_batch},
         {"tp", h.tp},
         {"sequence_parallel", h.sequence_parallel},
         {"pp", h.pp},
         {"stage", h.stage},
         {"first_layer", h.first_layer},
         {"stage_layers", h.stage_layers},
         {"dtype", h.dtype},
         {"attention", h.attention},
         {"units", {{"time", h.time_unit}, {"size", h.size_unit}}}};
  if (h.ep != 1) j["ep"] = h.ep;  // written only where experts are spread
  if (h.cp != 1) j["cp"] = h.cp;  // and where the sequence is
  if (h.pp_first_layers != 0) j["pp_first_layers"] = h.pp_first_layers;  // an uneven split
  if (h.pp_last_layers != 0) j["pp_last_layers"] = h.pp_last_layers;
  // Written only where not the default, so traces without it print as before.
  if (h.weight_grads != "persistent") j["weight_grads"] = h.weight_grads;
  if (h.zero_stage != 0) j["zero_stage"] = h.zero_stage;
  if (h.zero_shards != 1) j["zero_shards"] = h.zero_shards;
  if (h.zero_defer_grad_sync) j["zero_defer_grad_sync"] = true;
  if (!h.fp8.empty()) j["fp8"] = h.fp8;
  if (h.projections != "fused") j["projections"] = h.projections;
  WriteBlockKernels(h.block_kernels, &j);
  if (!h.grad_dtype.empty()) j["grad_dtype"] = h.grad_dtype;
  if (h.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (h.tp_backward_overlap) j["tp_backward_overlap"] = true;
  if (!h.attention_kernel.empty()) j["attention_kernel"] = h.attention_kernel;
  return j;
}

json TensorToJson(const Tensor& t) {
  return json{{"id", t.id},
              {"name", t.name},
              {"bytes", t.bytes},
              {"dtype", ToString(t.dtype)},
              {"shape", t.shape},
              {"kind", ToString(t.kind)},
              {"producer", OptionalId(t.producer)},
              {"consumers", t.consumers},
              {"saved_for_backward", t.saved_for_backward},
              {"alias_of", t.alias_of ? json(*t.alias_of) : json(nullptr)},
              {"layer", t.layer},
              {"micro_batch", t.micro_batch},
              {"offloadable", t.offloadable}};
}

json OpToJson(const Op& op) {
  json j{{"id", op.id},
         {"name", op.name},
         {"kind", ToString(op.kind)},
         {"phase", ToString(op.phase)},
         {"layer", op.layer},
         {"micro_batch", op.micro_batch},
         {"stage", op.stage},
         {"stream", op.stream},
         {"inputs", op.inputs},
         {"outputs", op.outputs},
         {"flops", op.flops},
         {"bytes_read", op.bytes_read},
         {"bytes_written", op.bytes_written},
         {"gemm", nullptr}};
  if (op.gemm) {
    j["gemm"] =
        json{{"m", op.gemm->m}, {"n", op.gemm->n}, {"k", op.gemm->k}, {"batch", op.gemm->batch}};
    if (op.gemm->fp8) j["gemm"]["fp8"] = true;
  }
  if (op.measured_ns) j["measured_ns"] = *op.measured_ns;
  if (op.tp_overlap) {
    const GemmDims& g = op.tp_overlap->gemm;
    json gemm{{"m", g.m}, {"n", g.n}, {"k", g.k}, {"batch", g.batch}};
    if (g.fp8) gemm["fp8"] = true;
    j["tp_overlap"] = json{{"method", ToString(op.tp_overlap->method)}, {"gemm", gemm}};
  }
  if (op.attention) {
    j["attention"] =
        json{{"seq_len", op.attention->seq_len}, {"mask", ToString(op.attention->mask)}};
  }
  return j;
}

// `{m, n, k, batch, fp8}` at `field` of `r`.
Result<GemmDims> ParseGemmDims(const ObjectReader& r, const std::string& field) {
  SSDTRAIN_ASSIGN_OR_RETURN(const json* g, r.Value(field));
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader gr, ObjectReader::Make(*g, r.At(field)));
  GemmDims d;
  SSDTRAIN_ASSIGN_OR_RETURN(d.m, gr.Int("m"));
  SSDTRAIN_ASSIGN_OR_RETURN(d.n, gr.Int("n"));
  SSDTRAIN_ASSIGN_OR_RETURN(d.k, gr.Int("k"));
  SSDTRAIN_ASSIGN_OR_RETURN(d.batch, gr.IntOr("batch", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(d.fp8, gr.BoolOr("fp8", false));
  SSDTRAIN_RETURN_IF_ERROR(gr.CheckNoUnknown());
  return d;
}

template <typename E>
Result<E> ParseEnum(const ObjectReader& r, const std::string& field,
                    std::optional<E> (*parse)(std::string_view), const char* expected) {
  SSDTRAIN_ASSIGN_OR_RETURN(std::string s, r.String(field));
  std::optional<E> v = parse(s);
  if (!v) return r.At(field).Error("unknown value \"" + s + "\"; expected one of " + expected);
  return *v;
}

Result<int> SmallInt(const ObjectReader& r, const std::string& field) {
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t v, r.Int(field));
  if (v < INT32_MIN || v > INT32_MAX) return r.At(field).Error("integer out of range");
  return static_cast<int>(v);
}

Result<Header> ParseHeader(const json& j, const JsonPath& at) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, at));
  Header h;
  SSDTRAIN_ASSIGN_OR_RETURN(h.model, r.String("model"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.family, r.String("family"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.hidden, r.Int("hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.heads, r.Int("heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.kv_heads, r.IntOr("kv_heads", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(h.layers, r.Int("layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.ffn_hidden, r.IntOr("ffn_hidden", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(h.vocab, r.IntOr("vocab", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(h.seq_len, r.Int("seq_len"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.micro_batch, r.Int("micro_batch"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.tp, r.IntOr("tp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(h.sequence_parallel, r.BoolOr("sequence_parallel", false));
  SSDTRAIN_ASSIGN_OR_RETURN(h.tp_comm_overlap, r.BoolOr("tp_comm_overlap", false));
  SSDTRAIN_ASSIGN_OR_RETURN(h.tp_backward_overlap, r.BoolOr("tp_backward_overlap", false));
  SSDTRAIN_ASSIGN_OR_RETURN(h.pp, r.IntOr("pp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(h.ep, r.IntOr("ep", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(h.cp, r.IntOr("cp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(h.stage, r.IntOr("stage", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(h.first_layer, r.IntOr("first_layer", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(h.stage_layers, r.IntOr("stage_layers", h.layers));
  SSDTRAIN_ASSIGN_OR_RETURN(h.pp_first_layers, r.IntOr("pp_first_layers", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(h.pp_last_layers, r.IntOr("pp_last_layers", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(h.dtype, r.String("dtype"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.attention, r.StringOr("attention", "standard"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.attention_kernel, r.StringOr("attention_kernel", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(h.fp8, r.StringOr("fp8", ""));
  if (const std::optional<Fp8Recipe> recipe = ParseFp8Recipe(h.fp8); !recipe) {
    return r.At("fp8").Error("unknown recipe \"" + h.fp8 + "\"; expected " +
                             std::string(kFp8RecipeNames));
  } else {
    h.fp8 = std::string(ToString(*recipe));  // "off" reads as ""
  }
  SSDTRAIN_ASSIGN_OR_RETURN(h.projections, r.StringOr("projections", "fused"));
  if (h.projections != "fused" && h.projections != "separate") {
    return r.At("projections")
        .Error("unknown value \"" + h.projections + "\"; expected \"fused\" or \"separate\"");
  }
  SSDTRAIN_RETURN_IF_ERROR(ReadBlockKernels(r, &h.block_kernels));
  SSDTRAIN_ASSIGN_OR_RETURN(h.grad_dtype, r.StringOr("grad_dtype", ""));
  if (!h.grad_dtype.empty() && h.grad_dtype != "fp16" && h.grad_dtype != "bf16" &&
      h.grad_dtype != "fp32") {
    return r.At("grad_dtype")
        .Error("unknown dtype \"" + h.grad_dtype + "\"; expected fp16, bf16 or fp32");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(h.weight_grads, r.StringOr("weight_grads", "persistent"));
  if (h.weight_grads != "persistent" && h.weight_grads != "set_to_none") {
    return r.At("weight_grads")
        .Error("unknown value \"" + h.weight_grads +
               "\"; expected \"persistent\" or \"set_to_none\"");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(h.zero_stage, r.IntOr("zero_stage", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(h.zero_shards, r.IntOr("zero_shards", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(h.zero_defer_grad_sync, r.BoolOr("zero_defer_grad_sync", false));
  SSDTRAIN_ASSIGN_OR_RETURN(const json* units, r.Value("units"));
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader u, ObjectReader::Make(*units, r.At("units")));
  SSDTRAIN_ASSIGN_OR_RETURN(h.time_unit, u.String("time"));
  SSDTRAIN_ASSIGN_OR_RETURN(h.size_unit, u.String("size"));
  if (h.time_unit != "ns")
    return u.At("time").Error("unsupported unit \"" + h.time_unit + "\"; expected \"ns\"");
  if (h.size_unit != "bytes") {
    return u.At("size").Error("unsupported unit \"" + h.size_unit + "\"; expected \"bytes\"");
  }
  SSDTRAIN_RETURN_IF_ERROR(u.CheckNoUnknown());
  SSDTRAIN_RETURN_IF_ERROR(r.CheckNoUnknown());
  return h;
}

Result<Tensor> ParseTensor(const json& j, const JsonPath& at) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, at));
  Tensor t;
  SSDTRAIN_ASSIGN_OR_RETURN(t.id, r.Int("id"));
  SSDTRAIN_ASSIGN_OR_RETURN(t.name, r.StringOr("name", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(t.bytes, r.Int("bytes"));
  SSDTRAIN_ASSIGN_OR_RETURN(
      t.dtype, ParseEnum<DType>(r, "dtype", ParseDType, "fp16, bf16, fp32, uint8, int32, int64"));
  SSDTRAIN_ASSIGN_OR_RETURN(t.shape, r.IntArray("shape"));
  SSDTRAIN_ASSIGN_OR_RETURN(
      t.kind,
      ParseEnum<TensorKind>(r, "kind", ParseTensorKind,
                            "activation, weight, gradient, workspace, optimizer_state, input"));
  SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> producer, r.OptionalInt("producer"));
  t.producer = producer.value_or(kNoOp);
  SSDTRAIN_ASSIGN_OR_RETURN(t.consumers, r.IntArray("consumers"));
  SSDTRAIN_ASSIGN_OR_RETURN(t.saved_for_backward, r.Bool("saved_for_backward"));
  SSDTRAIN_ASSIGN_OR_RETURN(t.alias_of, r.OptionalInt("alias_of"));
  SSDTRAIN_ASSIGN_OR_RETURN(t.layer, SmallInt(r, "layer"));
  SSDTRAIN_ASSIGN_OR_RETURN(t.micro_batch, SmallInt(r, "micro_batch"));
  SSDTRAIN_ASSIGN_OR_RETURN(t.offloadable, r.Bool("offloadable"));
  SSDTRAIN_RETURN_IF_ERROR(r.CheckNoUnknown());
  return t;
}

Result<Op> ParseOp(const json& j, const JsonPath& at) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, at));
  Op op;
  SSDTRAIN_ASSIGN_OR_RETURN(op.id, r.Int("id"));
  SSDTRAIN_ASSIGN_OR_RETURN(op.name, r.StringOr("name", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(
      op.kind, ParseEnum<OpKind>(r, "kind", ParseOpKind,
                                 "gemm, attention, elementwise, norm, softmax, dropout, embedding, "
                                 "loss, collective, send, recv, optimizer"));
  SSDTRAIN_ASSIGN_OR_RETURN(
      op.phase, ParseEnum<Phase>(r, "phase", ParsePhase, "forward, backward, optimizer"));
  SSDTRAIN_ASSIGN_OR_RETURN(op.layer, SmallInt(r, "layer"));
  SSDTRAIN_ASSIGN_OR_RETURN(op.micro_batch, SmallInt(r, "micro_batch"));
  SSDTRAIN_ASSIGN_OR_RETURN(op.stage, SmallInt(r, "stage"));
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t stream, r.IntOr("stream", 0));
  op.stream = static_cast<int>(stream);
  SSDTRAIN_ASSIGN_OR_RETURN(op.inputs, r.IntArray("inputs"));
  SSDTRAIN_ASSIGN_OR_RETURN(op.outputs, r.IntArray("outputs"));
  SSDTRAIN_ASSIGN_OR_RETURN(op.flops, r.Int("flops"));
  SSDTRAIN_ASSIGN_OR_RETURN(op.bytes_read, r.Int("bytes_read"));
  SSDTRAIN_ASSIGN_OR_RETURN(op.bytes_written, r.Int("bytes_written"));
  if (r.Has("gemm")) {
    SSDTRAIN_ASSIGN_OR_RETURN(op.gemm, ParseGemmDims(r, "gemm"));
  } else {
    r.Skip("gemm");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(op.measured_ns, r.OptionalInt("measured_ns"));
  if (r.Has("tp_overlap")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const json* o, r.Value("tp_overlap"));
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader orr, ObjectReader::Make(*o, r.At("tp_overlap")));
    TpOverlap overlap;
    SSDTRAIN_ASSIGN_OR_RETURN(overlap.method,
                              ParseEnum<TpOverlapMethod>(orr, "method", ParseTpOverlapMethod,
                                                         "ring_exchange, pipeline, bulk, async"));
    SSDTRAIN_ASSIGN_OR_RETURN(overlap.gemm, ParseGemmDims(orr, "gemm"));
    SSDTRAIN_RETURN_IF_ERROR(orr.CheckNoUnknown());
    op.tp_overlap = overlap;
  }
  if (r.Has("attention")) {
    SSDTRAIN_ASSIGN_OR_RETURN(const json* o, r.Value("attention"));
    SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader orr, ObjectReader::Make(*o, r.At("attention")));
    AttentionCall call;
    SSDTRAIN_ASSIGN_OR_RETURN(call.seq_len, orr.Int("seq_len"));
    SSDTRAIN_ASSIGN_OR_RETURN(
        call.mask, ParseEnum<AttentionMask>(orr, "mask", ParseAttentionMask, "full, causal, half"));
    SSDTRAIN_RETURN_IF_ERROR(orr.CheckNoUnknown());
    op.attention = call;
  }
  SSDTRAIN_RETURN_IF_ERROR(r.CheckNoUnknown());
  return op;
}

Result<Edge> ParseEdge(const json& j, const JsonPath& at) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, at));
  Edge e;
  SSDTRAIN_ASSIGN_OR_RETURN(e.from, r.Int("from"));
  SSDTRAIN_ASSIGN_OR_RETURN(e.to, r.Int("to"));
  SSDTRAIN_ASSIGN_OR_RETURN(e.kind, ParseEnum<EdgeKind>(r, "kind", ParseEdgeKind, "order, sync"));
  SSDTRAIN_RETURN_IF_ERROR(r.CheckNoUnknown());
  return e;
}

template <typename T>
Status ParseTable(const ObjectReader& root, const std::string& name, bool required,
                  Result<T> (*parse)(const json&, const JsonPath&), std::vector<T>* out) {
  if (!required && !root.Has(name)) {
    root.Skip(name);
    return Status::Ok();
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const json* arr, root.Value(name));
  if (!arr->is_array())
    return root.At(name).Error("expected an array, got " + detail::TypeName(*arr));
  out->reserve(arr->size());
  JsonPath at = root.At(name);
  for (size_t i = 0; i < arr->size(); ++i) {
    SSDTRAIN_ASSIGN_OR_RETURN(T row, parse((*arr)[i], at.Index(i)));
    out->push_back(std::move(row));
  }
  return Status::Ok();
}

}  // namespace

json ToJson(const Trace& trace) {
  json tensors = json::array();
  for (const Tensor& t : trace.tensors) tensors.push_back(TensorToJson(t));
  json ops = json::array();
  for (const Op& op : trace.ops) ops.push_back(OpToJson(op));
  json edges = json::array();
  for (const Edge& e : trace.edges) {
    edges.push_back(json{{"from", e.from}, {"to", e.to}, {"kind", ToString(e.kind)}});
  }
  return json{{"format", kTraceFormatName},
              {"version", kTraceFormatVersion},
              {"header", HeaderToJson(trace.header)},
              {"tensors", std::move(tensors)},
              {"ops", std::move(ops)},
              {"edges", std::move(edges)}};
}

Result<Trace> TraceFromJson(const json& j, const std::string& source) {
  JsonPath root_at(source, "");
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, root_at));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string format, r.String("format"));
  if (format != kTraceFormatName) {
    return r.At("format").Error("expected \"" + std::string(kTraceFormatName) + "\", got \"" +
                                format + "\"");
  }
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t version, r.Int("version"));
  if (version != kTraceFormatVersion) {
    return r.At("version").Error("unsupported version " + std::to_string(version) +
                                 "; this build reads version " +
                                 std::to_string(kTraceFormatVersion));
  }
  Trace trace;
  SSDTRAIN_ASSIGN_OR_RETURN(const json* header, r.Value("header"));
  SSDTRAIN_ASSIGN_OR_RETURN(trace.header, ParseHeader(*header, r.At("header")));
  SSDTRAIN_RETURN_IF_ERROR(ParseTable<Tensor>(r, "tensors", true, ParseTensor, &trace.tensors));
  SSDTRAIN_RETURN_IF_ERROR(ParseTable<Op>(r, "ops", true, ParseOp, &trace.ops));
  SSDTRAIN_RETURN_IF_ERROR(ParseTable<Edge>(r, "edges", false, ParseEdge, &trace.edges));
  SSDTRAIN_RETURN_IF_ERROR(r.CheckNoUnknown());
  SSDTRAIN_RETURN_IF_ERROR(Validate(trace, source));
  return trace;
}

}  // namespace ssdtrain::traces

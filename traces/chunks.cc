#include "traces/chunks.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "traces/collective_kind.h"

namespace ssdtrain::traces {

std::vector<int64_t> ChunkOfOps(const Trace& trace, int64_t v) {
  const int64_t layers = trace.header.stage_layers;
  if (v < 1 || layers < v || layers % v != 0) return {};
  const int64_t per_chunk = layers / v;
  std::vector<int64_t> chunk(trace.ops.size(), -1);
  for (const Phase phase : {Phase::kForward, Phase::kBackward}) {
    int64_t current = phase == Phase::kForward ? 0 : v - 1;
    for (const Op& op : trace.ops) {
      if (op.phase != phase) continue;
      if (op.layer != kNoLayer) {
        current = std::clamp<int64_t>((op.layer - trace.header.first_layer) / per_chunk, 0, v - 1);
      }
      chunk[static_cast<size_t>(op.id)] = current;
    }
  }
  // An op on a side stream (ZeRO's, models/detail/zero_shard.cc) belongs with
  // what it serves, not where it is issued: a gather with the first reader of
  // its copies, a reduce-scatter with the writer of its gradients; a gather's
  // cast, issued with it, with its layer.
  auto chunk_of = [&](OpId o) { return chunk[static_cast<size_t>(o)]; };
  for (const Op& op : trace.ops) {
    if (op.stream == 0 || op.phase == Phase::kOptimizer) continue;
    int64_t c = -1;
    if (!op.outputs.empty()) {
      for (OpId reader : trace.tensor(op.outputs[0]).consumers) {
        if (trace.op(reader).phase == op.phase && trace.op(reader).stream == 0) {
          c = chunk_of(reader);
          break;
        }
      }
    }
    if (c < 0 && !op.inputs.empty() && trace.tensor(op.inputs[0]).producer != kNoOp) {
      c = chunk_of(trace.tensor(op.inputs[0]).producer);
    }
    if (c >= 0) chunk[static_cast<size_t>(op.id)] = c;
  }
  return chunk;
}

namespace {

std::string Names(const Trace& trace, const std::vector<TensorId>& ids) {
  std::string out;
  for (TensorId id : ids) out += (out.empty() ? "" : ", ") + trace.tensor(id).name;
  return out.empty() ? "none" : out;
}

// The tensors each boundary moves: forward[c], chunk c − 1's forward to chunk
// c; backward[c], chunk c's backward to chunk c − 1 (c >= 1). `taker`: by
// tensor, the chunk that reads it across a boundary (-1: none).
Status FindBoundaries(const Trace& trace, const std::vector<int64_t>& chunk,
                      std::vector<std::vector<TensorId>>* forward,
                      std::vector<std::vector<TensorId>>* backward, std::vector<int64_t>* taker) {
  for (const Tensor& t : trace.tensors) {
    if (t.producer == kNoOp) continue;
    const Op& p = trace.op(t.producer);
    const int64_t from = chunk[static_cast<size_t>(p.id)];
    if (from < 0) continue;
    for (OpId c : t.consumers) {
      const int64_t to = chunk[static_cast<size_t>(c)];
      if (to < 0 || to == from) continue;
      const bool ahead = p.phase == Phase::kForward && to == from + 1;
      const bool back =
          p.phase == Phase::kBackward && trace.op(c).phase == Phase::kBackward && to == from - 1;
      if (!ahead && !back) {
        return Status::FailedPrecondition(
            "tensor " + t.name + " of chunk " + std::to_string(from) + "'s " +
            std::string(ToString(p.phase)) + " is read by " + trace.op(c).name + " of chunk " +
            std::to_string(to) + ": only the neighbouring chunk's pass may take a chunk's output");
      }
      std::vector<TensorId>& list =
          ahead ? (*forward)[static_cast<size_t>(to)] : (*backward)[static_cast<size_t>(from)];
      if (list.empty() || list.back() != t.id) list.push_back(t.id);
      (*taker)[static_cast<size_t>(t.id)] = to;
    }
  }
  for (size_t c = 1; c < forward->size(); ++c) {
    for (const bool ahead : {true, false}) {
      const std::vector<TensorId>& list = ahead ? (*forward)[c] : (*backward)[c];
      if (list.size() == 1) continue;
      const std::string from = std::to_string(ahead ? c - 1 : c);
      const std::string to = std::to_string(ahead ? c : c - 1);
      return Status::FailedPrecondition("chunk " + from + "'s " + (ahead ? "forward" : "backward") +
                                        " hands chunk " + to + " " + std::to_string(list.size()) +
                                        " tensors (" + Names(trace, list) +
                                        "); a chunk boundary moves exactly one");
    }
  }
  return Status::Ok();
}

Op Transfer(const Trace& trace, OpKind kind, Phase phase, TensorId t, const std::string& name) {
  Op op;
  op.name = name;
  op.kind = kind;
  op.phase = phase;
  op.stage = static_cast<int>(trace.header.stage);
  if (kind == OpKind::kSend) {
    op.inputs = {t};
    op.bytes_read = trace.tensor(t).bytes;
  } else {
    op.outputs = {t};
    op.bytes_written = trace.tensor(t).bytes;
  }
  return op;
}

// Producers (the first writer) and consumers (in issue order) from the ops.
void Relink(Trace* u) {
  for (Tensor& t : u->tensors) {
    t.producer = kNoOp;
    t.consumers.clear();
  }
  for (const Op& op : u->ops) {
    for (TensorId t : op.inputs) {
      std::vector<OpId>& c = u->tensors[static_cast<size_t>(t)].consumers;
      if (c.empty() || c.back() != op.id) c.push_back(op.id);
    }
    for (TensorId t : op.outputs) {
      OpId& p = u->tensors[static_cast<size_t>(t)].producer;
      if (p == kNoOp) p = op.id;
    }
  }
}

// One chunk: the trace itself, every op in chunk 0 (the optimizer's in none).
ChunkedTrace Unchunked(const Trace& trace) {
  ChunkedTrace same{trace, {}, {}, {}, std::vector<TensorId>(trace.tensors.size())};
  for (const Op& op : trace.ops) {
    same.chunk.push_back(op.phase == Phase::kOptimizer ? -1 : 0);
    same.original_op.push_back(op.id);
  }
  same.op_of = same.original_op;
  std::iota(same.received_as.begin(), same.received_as.end(), TensorId{0});
  return same;
}

// Each boundary tensor's copy, as the next chunk (forward) or the previous one
// (backward) receives it: `out->received_as` maps the tensor to its copy.
void AddBoundaryCopies(const Trace& trace, const std::vector<std::vector<TensorId>>& forward,
                       const std::vector<std::vector<TensorId>>& backward, size_t vv,
                       ChunkedTrace* out) {
  Trace& u = out->trace;
  for (const bool ahead : {true, false}) {
    for (size_t c = 1; c < vv; ++c) {
      const TensorId from = ahead ? forward[c][0] : backward[c][0];
      Tensor copy = trace.tensor(from);
      copy.id = static_cast<TensorId>(u.tensors.size());
      copy.name += ".chunk" + std::to_string(ahead ? c : c - 1);
      copy.kind = ahead ? TensorKind::kActivation : TensorKind::kGradient;
      copy.alias_of.reset();
      out->received_as[static_cast<size_t>(from)] = copy.id;
      u.tensors.push_back(std::move(copy));
    }
  }
}

// The ops in the order the chunked trace runs them. ZeRO-3's gathers run ahead
// of their layer (models/detail/zero_shard.cc, zero_prefetch): one that would
// run in an earlier chunk's stretch of its phase waits for the first op of its
// own chunk there (no prefetch across a chunk boundary: another chunk step may
// come between), and so does the cast issued just before it (on the compute
// stream, named ...zero_gather_cast).
std::vector<OpId> ChunkOrder(const Trace& trace, const std::vector<int64_t>& chunk) {
  std::vector<OpId> order;
  order.reserve(trace.ops.size());
  std::map<std::pair<int, int64_t>, std::vector<OpId>> held;  // (phase, chunk) -> gathers
  int64_t current[2] = {-1, -1};  // the chunk of the phase's last compute op
  for (const Op& op : trace.ops) {
    const int64_t c = chunk[static_cast<size_t>(op.id)];
    const int ph = op.phase == Phase::kForward ? 0 : 1;
    const bool with_a_gather = op.stream != 0 || op.name.ends_with(kZeroGatherCastSuffix);
    if (c >= 0 && with_a_gather && c != current[ph]) {
      held[{ph, c}].push_back(op.id);
      continue;
    }
    if (c >= 0 && op.stream == 0 && c != current[ph]) {
      current[ph] = c;
      if (auto it = held.find({ph, c}); it != held.end()) {
        order.insert(order.end(), it->second.begin(), it->second.end());
        held.erase(it);
      }
    }
    order.push_back(op.id);
  }
  for (const auto& [key, ops] : held) order.insert(order.end(), ops.begin(), ops.end());
  return order;
}

// A boundary tensor and its copy are saved for backward where a backward op
// still reads them.
void MarkBoundariesSaved(size_t original_tensors, ChunkedTrace* out) {
  Trace& u = out->trace;
  for (size_t t = 0; t < u.tensors.size(); ++t) {
    const bool boundary = t >= original_tensors || out->received_as[t] != static_cast<TensorId>(t);
    if (!boundary) continue;
    Tensor& x = u.tensors[t];
    x.saved_for_backward = x.saved_for_backward &&
                           std::any_of(x.consumers.begin(), x.consumers.end(),
                                       [&](OpId o) { return u.op(o).phase == Phase::kBackward; });
  }
}

}  // namespace

Result<ChunkedTrace> SplitIntoChunks(const Trace& trace, int64_t v) {
  if (v == 1) return Unchunked(trace);  // one chunk: the trace itself
  const std::vector<int64_t> chunk = ChunkOfOps(trace, v);
  const std::string where =
      "the trace of " + trace.header.model + " stage " + std::to_string(trace.header.stage);
  if (chunk.empty()) {
    return Status::InvalidArgument(where + " holds " + std::to_string(trace.header.stage_layers) +
                                   " blocks, which do not split into " + std::to_string(v) +
                                   " model chunks");
  }
  const auto vv = static_cast<size_t>(v);
  std::vector<std::vector<TensorId>> forward(vv), backward(vv);
  std::vector<int64_t> taker(trace.tensors.size(), -1);
  SSDTRAIN_RETURN_IF_ERROR(
      FindBoundaries(trace, chunk, &forward, &backward, &taker).WithPrefix(where));

  ChunkedTrace out;
  Trace& u = out.trace;
  u.header = trace.header;
  u.tensors = trace.tensors;
  out.received_as.resize(trace.tensors.size());
  std::iota(out.received_as.begin(), out.received_as.end(), TensorId{0});
  AddBoundaryCopies(trace, forward, backward, vv, &out);

  out.op_of.assign(trace.ops.size(), kNoOp);
  auto add = [&](Op op, int64_t c, OpId original) {
    op.id = static_cast<OpId>(u.ops.size());
    out.chunk.push_back(c);
    out.original_op.push_back(original);
    u.ops.push_back(std::move(op));
  };
  // Each op in chunk order, with a send and a receive where its phase moves
  // on to the next chunk; a boundary tensor's reader takes the copy.
  const std::vector<OpId> order = ChunkOrder(trace, chunk);
  int64_t last[2] = {-1, -1};  // the chunk of the phase's last op (forward, backward)
  for (const OpId id : order) {
    const Op& op = trace.op(id);
    const int64_t c = chunk[static_cast<size_t>(op.id)];
    if (c >= 0) {
      const bool ahead = op.phase == Phase::kForward;
      int64_t& prev = last[ahead ? 0 : 1];
      if (prev >= 0 && c != prev) {
        if (c != prev + (ahead ? 1 : -1)) {
          return Status::FailedPrecondition(where + ": " + op.name + " of chunk " +
                                            std::to_string(c) + " follows chunk " +
                                            std::to_string(prev) + "'s ops in its phase");
        }
        const TensorId b =
            ahead ? forward[static_cast<size_t>(c)][0] : backward[static_cast<size_t>(prev)][0];
        const TensorId copy = out.received_as[static_cast<size_t>(b)];
        add(Transfer(u, OpKind::kSend, op.phase, b, u.tensor(copy).name + ".send"), prev, kNoOp);
        add(Transfer(u, OpKind::kRecv, op.phase, copy, u.tensor(copy).name + ".recv"), c, kNoOp);
      }
      prev = c;
    }
    Op moved = op;
    for (TensorId& t : moved.inputs) {
      if (c >= 0 && taker[static_cast<size_t>(t)] == c) t = out.received_as[static_cast<size_t>(t)];
    }
    out.op_of[static_cast<size_t>(op.id)] = static_cast<OpId>(u.ops.size());
    add(std::move(moved), c, op.id);
  }
  for (const Edge& e : trace.edges) {
    u.edges.push_back(
        {out.op_of[static_cast<size_t>(e.from)], out.op_of[static_cast<size_t>(e.to)], e.kind});
  }
  Relink(&u);
  MarkBoundariesSaved(trace.tensors.size(), &out);
  return out;
}

}  // namespace ssdtrain::traces

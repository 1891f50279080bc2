#include "traces/whole_step.h"

#include <algorithm>
#include <map>
#include <optional>

#include "traces/chunks.h"
#include "traces/storage_plan.h"

namespace ssdtrain::traces {

Result<Schedule> ParseSchedule(std::string_view s, const std::string& field) {
  if (s == "gpipe") return Schedule::kGpipe;
  if (s == "1f1b") return Schedule::kOneFOneB;
  if (s == "interleaved") return Schedule::kInterleaved;
  return Status::InvalidArgument(
      field + ": expected \"1f1b\", \"gpipe\" or \"interleaved\", got \"" + std::string(s) + "\"");
}

std::string_view ToString(Schedule s) {
  switch (s) {
    case Schedule::kGpipe:
      return "gpipe";
    case Schedule::kOneFOneB:
      return "1f1b";
    case Schedule::kInterleaved:
      return "interleaved";
  }
  return "1f1b";
}

std::string InterleavedError(int64_t p, int64_t m, int64_t v, int64_t layers) {
  const std::string pv = "pp x v = " + std::to_string(p) + " x " + std::to_string(v);
  if (v < 2) return "needs at least 2 model chunks per stage, got " + std::to_string(v);
  if (p < 2) return "needs at least 2 pipeline stages, got pp = " + std::to_string(p);
  if (layers > 0 && layers % (p * v) != 0) {
    return "the model's " + std::to_string(layers) + " layers do not divide by " + pv + " = " +
           std::to_string(p * v) + " (each chunk holds layers / (pp x v) layers)";
  }
  if (m % p != 0) {
    return "the " + std::to_string(m) +
           " micro-batches are not a multiple of pp = " + std::to_string(p) +
           " (Megatron-LM interleaves groups of pp micro-batches)";
  }
  return "";
}

namespace {

// Megatron-LM's interleaved order (whole_step.h): chunk steps k = 0 .. m·v − 1.
std::vector<StageTask> InterleavedOrder(int64_t p, int64_t stage, int64_t m, int64_t v) {
  const int64_t total = m * v, group = p * v;
  auto step = [&](int64_t k, bool forward) {
    const int64_t chunk = (k % group) / p;
    return StageTask{forward, (k / group) * p + k % p, forward ? chunk : v - 1 - chunk};
  };
  const int64_t warmup = std::min(total, (p - stage - 1) * 2 + (v - 1) * p);
  std::vector<StageTask> order;
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back(step(f, true));
  while (f < total) {
    order.push_back(step(f++, true));
    order.push_back(step(b++, false));
  }
  while (b < total) order.push_back(step(b++, false));
  return order;
}

}  // namespace

int64_t ChunksInFlight(Schedule schedule, int64_t p, int64_t stage, int64_t m, int64_t v) {
  // Every StageOrder runs its warm-up forwards, then a forward and a backward
  // in turn, then the backwards left: it holds the most just after its first
  // forward past the warm-up (GPipe's warm-up is every forward). In closed
  // form, since a search asks this of every stage of every simulation.
  const int64_t total = schedule == Schedule::kInterleaved ? m * v : m;
  if (total <= 0) return 0;
  int64_t warmup = total;
  if (schedule == Schedule::kInterleaved) {
    warmup = std::min(total, (p - stage - 1) * 2 + (v - 1) * p);
  } else if (schedule == Schedule::kOneFOneB) {
    warmup = std::min(total, p - stage - 1);
  }
  warmup = std::max<int64_t>(0, warmup);
  return warmup < total ? warmup + 1 : total;
}

int64_t HeldByOtherChunks(int64_t between_passes_bytes, int64_t chunks_in_flight, int64_t v) {
  if (chunks_in_flight <= v || v < 1) return 0;
  return ((chunks_in_flight - v) * between_passes_bytes + v - 1) / v;
}

std::vector<StageTask> StageOrder(Schedule schedule, int64_t p, int64_t stage, int64_t m,
                                  int64_t v) {
  if (schedule == Schedule::kInterleaved) return InterleavedOrder(p, stage, m, v);
  std::vector<StageTask> order;
  if (schedule == Schedule::kGpipe) {
    for (int64_t i = 0; i < m; ++i) order.push_back({true, i});
    for (int64_t i = 0; i < m; ++i) order.push_back({false, i});
    return order;
  }
  const int64_t warmup = std::clamp<int64_t>(p - stage - 1, 0, m);
  int64_t f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back({true, f});
  while (f < m) {
    order.push_back({true, f++});
    order.push_back({false, b++});
  }
  while (b < m) order.push_back({false, b++});
  return order;
}

int64_t MicroBatchesIn(const Trace& trace) {
  int64_t m = 0;
  for (const Op& op : trace.ops) m = std::max<int64_t>(m, op.micro_batch);
  return m + 1;
}

namespace {

std::string InMicroBatch(int64_t k, const std::string& name) {
  return "mb" + std::to_string(k) + "." + name;
}

// The plan's placements on the chunked trace: op ids moved; a boundary tensor's
// placement on the copy its taking chunk saves (traces/chunks.h).
Plan PlanOnChunks(const Plan& plan, const ChunkedTrace& c) {
  Plan out = plan;
  for (Placement& p : out.placements) {
    const TensorId copy = c.received_as[static_cast<size_t>(p.tensor)];
    if (copy != p.tensor && c.trace.tensor(copy).saved_for_backward) p.tensor = copy;
    if (p.prefetch_before != kNoOp)
      p.prefetch_before = c.op_of[static_cast<size_t>(p.prefetch_before)];
    if (p.evict_before != kNoOp) p.evict_before = c.op_of[static_cast<size_t>(p.evict_before)];
    if (p.hold_until != kNoOp) p.hold_until = c.op_of[static_cast<size_t>(p.hold_until)];
  }
  return out;
}

// The chunk whose forward pass makes tensor `t`'s storage (0 for an input).
int64_t ChunkOf(const ChunkedTrace& c, TensorId t) {
  const OpId producer = c.trace.tensor(c.trace.StorageOf(t)).producer;
  return producer == kNoOp ? 0 : std::max<int64_t>(0, c.chunk[static_cast<size_t>(producer)]);
}

// Micro-batch k >= 1's offload file: "mb<k>-" before the file's own name.
std::string FileOf(int64_t k, const std::string& file) {
  if (k == 0) return file;
  const size_t slash = file.rfind('/');
  const size_t at = slash == std::string::npos ? 0 : slash + 1;
  return file.substr(0, at) + "mb" + std::to_string(k) + "-" + file.substr(at);
}

}  // namespace

Result<WholeStep> UnrollStep(const Trace& one, const Plan& step_plan,
                             const std::string& plan_source) {
  const int64_t m = step_plan.num_micro_batches;
  if (m < 1) {
    return Status::InvalidArgument(plan_source + ": num_micro_batches: expected at least 1, got " +
                                   std::to_string(m));
  }
  SSDTRAIN_ASSIGN_OR_RETURN(const Schedule schedule,
                            ParseSchedule(step_plan.schedule, plan_source + ": schedule"));
  if (MicroBatchesIn(one) != 1) {
    return Status::InvalidArgument("the trace of " + one.header.model +
                                   " already holds several micro-batches; unroll a single one");
  }
  const int64_t v = schedule == Schedule::kInterleaved ? step_plan.virtual_stages : 1;
  if (m == 1 && v == 1) {
    WholeStep same{one, step_plan, {}, std::vector<int64_t>(one.ops.size(), 0)};
    for (const Op& op : one.ops) same.original_op.push_back(op.id);
    return same;
  }
  if (schedule == Schedule::kInterleaved) {
    const std::string why = InterleavedError(one.header.pp, m, v, one.header.layers);
    if (!why.empty()) {
      return Status::InvalidArgument(plan_source + ": virtual_stages: interleaved " + why);
    }
  }
  // The stage in its chunks (traces/chunks.h), each boundary a send and a recv;
  // one chunk without interleaving.
  SSDTRAIN_ASSIGN_OR_RETURN(const ChunkedTrace chunked, SplitIntoChunks(one, v));
  const Trace& trace = chunked.trace;
  const Plan plan = PlanOnChunks(step_plan, chunked);
  const auto vv = static_cast<size_t>(v);

  const size_t n_tensors = trace.tensors.size(), n_ops = trace.ops.size();
  const auto mm = static_cast<size_t>(m);
  // Shared by every micro-batch: resident-all-step storages, the weight
  // gradients (set_to_none too: accumulated over the micro-batches) and
  // whatever the optimizer produces.
  std::vector<bool> shared(n_tensors, false);
  for (const Tensor& t : trace.tensors) {
    const Tensor& root = trace.tensor(trace.StorageOf(t.id));
    shared[static_cast<size_t>(t.id)] =
        IsPersistent(trace, root) || IsWeightGradient(trace, root) ||
        (root.producer != kNoOp && trace.op(root.producer).phase == Phase::kOptimizer);
  }
  // tensor_id[k][t]: micro-batch k's id of tensor t.
  std::vector<std::vector<TensorId>> tensor_id(mm, std::vector<TensorId>(n_tensors));
  WholeStep out;
  Trace& u = out.trace;
  u.header = trace.header;
  u.tensors = trace.tensors;
  for (size_t t = 0; t < n_tensors; ++t) tensor_id[0][t] = static_cast<TensorId>(t);
  for (size_t k = 1; k < mm; ++k) {
    for (size_t t = 0; t < n_tensors; ++t) {
      if (shared[t]) {
        tensor_id[k][t] = static_cast<TensorId>(t);
        continue;
      }
      Tensor copy = trace.tensors[t];
      copy.id = static_cast<TensorId>(u.tensors.size());
      copy.micro_batch = static_cast<int>(k);
      copy.name = InMicroBatch(static_cast<int64_t>(k), copy.name);
      tensor_id[k][t] = copy.id;
      u.tensors.push_back(std::move(copy));
    }
  }
  for (size_t t = 0; t < n_tensors; ++t) {
    if (!shared[t]) u.tensors[t].name = InMicroBatch(0, u.tensors[t].name);
  }
  for (Tensor& t : u.tensors) {
    t.consumers.clear();
    t.producer = kNoOp;
  }
  for (size_t k = 0; k < mm; ++k) {
    for (size_t t = 0; t < n_tensors; ++t) {
      const Tensor& orig = trace.tensors[t];
      if (orig.alias_of && !shared[t]) {
        u.tensors[static_cast<size_t>(tensor_id[k][t])].alias_of =
            tensor_id[k][static_cast<size_t>(*orig.alias_of)];
      }
    }
  }

  // op_id[k][o]: micro-batch k's id of op o (the optimizer's: in k = 0 only).
  std::vector<std::vector<OpId>> op_id(mm, std::vector<OpId>(n_ops, kNoOp));
  auto emit = [&](const Op& orig, size_t k) {
    Op op = orig;
    op.id = static_cast<OpId>(u.ops.size());
    op.micro_batch = static_cast<int>(k);
    if (orig.phase != Phase::kOptimizer) op.name = InMicroBatch(static_cast<int64_t>(k), op.name);
    for (TensorId& t : op.inputs) t = tensor_id[k][static_cast<size_t>(t)];
    for (TensorId& t : op.outputs) t = tensor_id[k][static_cast<size_t>(t)];
    for (TensorId t : op.inputs) {
      std::vector<OpId>& c = u.tensors[static_cast<size_t>(t)].consumers;
      if (c.empty() || c.back() != op.id) c.push_back(op.id);
    }
    for (TensorId t : op.outputs) {
      // The first writer produces; later ones accumulate (weight gradients).
      if (u.tensors[static_cast<size_t>(t)].producer == kNoOp) {
        u.tensors[static_cast<size_t>(t)].producer = op.id;
      }
    }
    op_id[k][static_cast<size_t>(orig.id)] = op.id;
    out.original_op.push_back(chunked.original_op[static_cast<size_t>(orig.id)]);
    out.chunk.push_back(chunked.chunk[static_cast<size_t>(orig.id)]);
    u.ops.push_back(std::move(op));
  };
  // pass_end[k][c]: the first op issued after micro-batch k's forward pass of chunk c.
  std::vector<std::vector<OpId>> pass_end(mm, std::vector<OpId>(vv, kNoOp));
  std::optional<std::pair<size_t, size_t>> ended;  // the pass that just ended
  for (const StageTask& task : StageOrder(schedule, trace.header.pp, trace.header.stage, m, v)) {
    const Phase phase = task.forward ? Phase::kForward : Phase::kBackward;
    for (const Op& op : trace.ops) {
      if (op.phase != phase || chunked.chunk[static_cast<size_t>(op.id)] != task.chunk) continue;
      if (ended) pass_end[ended->first][ended->second] = static_cast<OpId>(u.ops.size());
      ended.reset();
      emit(op, static_cast<size_t>(task.micro_batch));
    }
    if (task.forward) {
      ended = {static_cast<size_t>(task.micro_batch), static_cast<size_t>(task.chunk)};
    }
  }
  for (const Op& op : trace.ops) {
    if (op.phase == Phase::kOptimizer) emit(op, 0);
  }
  for (const Edge& e : trace.edges) {
    const bool from_shared = trace.op(e.from).phase == Phase::kOptimizer;
    const bool to_shared = trace.op(e.to).phase == Phase::kOptimizer;
    for (size_t k = 0; k < mm; ++k) {
      if (from_shared && to_shared && k > 0) break;
      const OpId from = op_id[from_shared ? 0 : k][static_cast<size_t>(e.from)];
      const OpId to = op_id[to_shared ? 0 : k][static_cast<size_t>(e.to)];
      u.edges.push_back({from, to, e.kind});
    }
  }

  Plan& p = out.plan;
  p = plan;
  p.placements.clear();
  for (size_t k = 0; k < mm; ++k) {
    for (const Placement& orig : plan.placements) {
      if (k > 0 && shared[static_cast<size_t>(orig.tensor)])
        continue;  // one storage: one placement
      Placement pl = orig;
      pl.tensor = tensor_id[k][static_cast<size_t>(orig.tensor)];
      if (orig.prefetch_before != kNoOp) {
        const bool opt = trace.op(orig.prefetch_before).phase == Phase::kOptimizer;
        pl.prefetch_before = op_id[opt ? 0 : k][static_cast<size_t>(orig.prefetch_before)];
      }
      if (orig.evict_before != kNoOp) {  // after a forward use: never in the optimizer
        // A point in backward is the end of the forward pass (storage_plan.h).
        pl.evict_before = trace.op(orig.evict_before).phase == Phase::kBackward
                              ? pass_end[k][static_cast<size_t>(ChunkOf(chunked, orig.tensor))]
                              : op_id[k][static_cast<size_t>(orig.evict_before)];
      }
      if (orig.hold_until != kNoOp) {  // after the producer: never in the optimizer
        pl.hold_until = op_id[k][static_cast<size_t>(orig.hold_until)];
      }
      if (!pl.file.empty()) pl.file = FileOf(static_cast<int64_t>(k), pl.file);
      p.placements.push_back(std::move(pl));
    }
  }
  p.trace_fingerprint = Fingerprint(u);
  return out;
}

}  // namespace ssdtrain::traces

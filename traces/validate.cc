#include "traces/validate.h"

#include <algorithm>
#include <string>
#include <vector>

#include "traces/fp8.h"
#include "traces/storage_plan.h"

namespace ssdtrain::traces {
namespace {

std::string Path(const char* table, size_t i) {
  return std::string(table) + "[" + std::to_string(i) + "]";
}

Status Bad(const std::string& source, const std::string& path, const std::string& what) {
  return Status::InvalidArgument(source + ": " + path + ": " + what);
}

// Every tensor id an op names exists (checked first, so a dangling id is named as such).
Status CheckOpReferences(const Trace& trace, const std::string& source) {
  const auto n_tensors = static_cast<int64_t>(trace.tensors.size());
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    const Op& op = trace.ops[i];
    for (auto [field, ids] :
         {std::pair{".inputs[", &op.inputs}, std::pair{".outputs[", &op.outputs}}) {
      for (size_t k = 0; k < ids->size(); ++k) {
        const TensorId t = (*ids)[k];
        if (t < 0 || t >= n_tensors) {
          return Bad(source, Path("ops", i) + field + std::to_string(k) + "]",
                     "tensor " + std::to_string(t) + " does not exist");
        }
      }
    }
  }
  return Status::Ok();
}

Status CheckTensors(const Trace& trace, const std::string& source) {
  const auto n_ops = static_cast<int64_t>(trace.ops.size());
  for (size_t i = 0; i < trace.tensors.size(); ++i) {
    const Tensor& t = trace.tensors[i];
    const std::string at = Path("tensors", i);
    if (t.id != static_cast<int64_t>(i)) {
      return Bad(
          source, at + ".id",
          "expected " + std::to_string(i) + " (ids are row indices), got " + std::to_string(t.id));
    }
    if (t.bytes < 0) return Bad(source, at + ".bytes", "negative size " + std::to_string(t.bytes));
    int64_t elements = 1;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 0) {
        return Bad(source, at + ".shape[" + std::to_string(d) + "]",
                   "negative dimension " + std::to_string(t.shape[d]));
      }
      elements *= t.shape[d];
    }
    if (t.dtype == DType::kFp8 && !t.alias_of) {
      // Its scales follow its data (traces/fp8.h): the header's recipe decides them.
      const std::optional<Fp8Recipe> recipe = ParseFp8Recipe(trace.header.fp8);
      if (!recipe || *recipe == Fp8Recipe::kOff) {
        return Bad(source, at + ".dtype",
                   "an fp8 tensor in a trace whose header names no fp8 recipe");
      }
      if (t.bytes != Fp8Bytes(*recipe, t.shape, Fp8Blocks::kVector) &&
          t.bytes != Fp8Bytes(*recipe, t.shape, Fp8Blocks::kWeight) &&
          !IsGatheredFp8Bytes(*recipe, t.shape, t.bytes)) {
        return Bad(source, at + ".bytes",
                   std::to_string(t.bytes) + " does not match shape and the " + trace.header.fp8 +
                       " recipe (" + std::to_string(elements) + " fp8 elements and " +
                       std::to_string(Fp8ScaleBytes(*recipe, t.shape, Fp8Blocks::kVector)) +
                       " bytes of scales)");
      }
    } else if (!t.shape.empty() && !t.alias_of && elements * DTypeSize(t.dtype) != t.bytes) {
      return Bad(source, at + ".bytes",
                 std::to_string(t.bytes) + " does not match shape and dtype (" +
                     std::to_string(elements) + " elements of " + std::string(ToString(t.dtype)) +
                     ")");
    }
    if (t.producer != kNoOp && (t.producer < 0 || t.producer >= n_ops)) {
      return Bad(source, at + ".producer", "op " + std::to_string(t.producer) + " does not exist");
    }
    if (t.producer != kNoOp) {
      const auto& outs = trace.op(t.producer).outputs;
      if (std::find(outs.begin(), outs.end(), t.id) == outs.end()) {
        return Bad(source, at + ".producer",
                   "op " + std::to_string(t.producer) + " does not list tensor " +
                       std::to_string(t.id) + " among its outputs");
      }
    }
    for (size_t c = 0; c < t.consumers.size(); ++c) {
      const OpId op = t.consumers[c];
      const std::string cat = at + ".consumers[" + std::to_string(c) + "]";
      if (op < 0 || op >= n_ops)
        return Bad(source, cat, "op " + std::to_string(op) + " does not exist");
      if (c > 0 && op <= t.consumers[c - 1]) {
        return Bad(source, cat, "consumers must be listed once each, in issue order");
      }
      const auto& ins = trace.op(op).inputs;
      if (std::find(ins.begin(), ins.end(), t.id) == ins.end()) {
        return Bad(source, cat,
                   "op " + std::to_string(op) + " does not list tensor " + std::to_string(t.id) +
                       " among its inputs");
      }
    }
    if (t.alias_of) {
      if (*t.alias_of < 0 || *t.alias_of >= static_cast<int64_t>(i)) {
        return Bad(source, at + ".alias_of",
                   "tensor " + std::to_string(*t.alias_of) +
                       " is not an earlier tensor (a view must "
                       "name the tensor whose storage it shares, listed before it)");
      }
      if (t.bytes > trace.tensor(trace.StorageOf(t.id)).bytes) {
        return Bad(source, at + ".bytes", "a view cannot be larger than the tensor it aliases");
      }
    }
  }
  return Status::Ok();
}

Status CheckOps(const Trace& trace, const std::string& source) {
  const bool h_fp8_off =
      ParseFp8Recipe(trace.header.fp8).value_or(Fp8Recipe::kOff) == Fp8Recipe::kOff;
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    const Op& op = trace.ops[i];
    const std::string at = Path("ops", i);
    if (op.id != static_cast<int64_t>(i)) {
      return Bad(
          source, at + ".id",
          "expected " + std::to_string(i) + " (ids are row indices), got " + std::to_string(op.id));
    }
    for (auto [field, value] :
         {std::pair{"flops", op.flops}, std::pair{"bytes_read", op.bytes_read},
          std::pair{"bytes_written", op.bytes_written}}) {
      if (value < 0)
        return Bad(source, at + "." + field, "negative value " + std::to_string(value));
    }
    if (op.measured_ns && *op.measured_ns < 0) {
      return Bad(source, at + ".measured_ns",
                 "negative duration " + std::to_string(*op.measured_ns));
    }
    if (op.tp_overlap) {
      if (op.kind != OpKind::kCollective) {
        return Bad(
            source, at + ".tp_overlap",
            "only a collective overlaps a GEMM; this op is a " + std::string(ToString(op.kind)));
      }
      const GemmDims& g = op.tp_overlap->gemm;
      for (auto [field, value] : {std::pair{"m", g.m}, std::pair{"n", g.n}, std::pair{"k", g.k},
                                  std::pair{"batch", g.batch}}) {
        if (value <= 0) {
          return Bad(source, at + ".tp_overlap.gemm." + field,
                     "expected a positive size, got " + std::to_string(value));
        }
      }
      if (g.fp8 && h_fp8_off) {
        return Bad(source, at + ".tp_overlap.gemm.fp8",
                   "an FP8 GEMM in a trace whose header names no fp8 recipe");
      }
    }
    if (op.attention) {
      if (op.kind != OpKind::kAttention) {
        return Bad(source, at + ".attention",
                   "only a fused attention op has a kernel call; this op is a " +
                       std::string(ToString(op.kind)));
      }
      if (op.attention->seq_len <= 0) {
        return Bad(source, at + ".attention.seq_len",
                   "expected a positive length, got " + std::to_string(op.attention->seq_len));
      }
    }
    if (op.gemm) {
      for (auto [field, value] : {std::pair{"m", op.gemm->m}, std::pair{"n", op.gemm->n},
                                  std::pair{"k", op.gemm->k}, std::pair{"batch", op.gemm->batch}}) {
        if (value <= 0) {
          return Bad(source, at + ".gemm." + field,
                     "expected a positive size, got " + std::to_string(value));
        }
      }
      if (op.gemm->fp8 && h_fp8_off) {
        return Bad(source, at + ".gemm.fp8",
                   "an FP8 GEMM in a trace whose header names no fp8 recipe");
      }
    }
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const TensorId t = op.inputs[k];
      const std::string kat = at + ".inputs[" + std::to_string(k) + "]";
      const auto& cons = trace.tensor(t).consumers;
      if (!std::binary_search(cons.begin(), cons.end(), op.id)) {
        return Bad(source, kat,
                   "tensor " + std::to_string(t) + " does not list op " + std::to_string(op.id) +
                       " among its consumers");
      }
    }
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      const TensorId t = op.outputs[k];
      const std::string kat = at + ".outputs[" + std::to_string(k) + "]";
      // Accumulation (FORMAT.md): a tensor resident all step or a weight
      // gradient (over several micro-batches) may be written again by later
      // ops after the one that produced it.
      const Tensor& out = trace.tensor(t);
      const bool accumulates = out.producer != kNoOp && out.producer < op.id &&
                               (IsPersistent(trace, out) || IsWeightGradient(trace, out));
      if (out.producer != op.id && !accumulates) {
        return Bad(source, kat,
                   "tensor " + std::to_string(t) + " names op " +
                       std::to_string(trace.tensor(t).producer) + " as its producer");
      }
    }
  }
  for (size_t i = 0; i < trace.edges.size(); ++i) {
    const Edge& e = trace.edges[i];
    const std::string at = Path("edges", i);
    for (auto [field, value] : {std::pair{"from", e.from}, std::pair{"to", e.to}}) {
      if (value < 0 || value >= static_cast<int64_t>(trace.ops.size())) {
        return Bad(source, at + "." + field, "op " + std::to_string(value) + " does not exist");
      }
    }
  }
  return Status::Ok();
}

// Kahn's algorithm over data dependencies (producer -> consumer) and edges.
Status CheckAcyclic(const Trace& trace, const std::string& source) {
  const size_t n = trace.ops.size();
  std::vector<std::vector<OpId>> succ(n);
  std::vector<int64_t> indegree(n, 0);
  auto add = [&](OpId from, OpId to) {
    succ[static_cast<size_t>(from)].push_back(to);
    ++indegree[static_cast<size_t>(to)];
  };
  for (const Tensor& t : trace.tensors) {
    if (t.producer == kNoOp) continue;
    for (OpId c : t.consumers) add(t.producer, c);
  }
  for (const Edge& e : trace.edges) add(e.from, e.to);
  std::vector<OpId> ready;
  for (size_t i = 0; i < n; ++i) {
    if (indegree[i] == 0) ready.push_back(static_cast<OpId>(i));
  }
  size_t visited = 0;
  while (!ready.empty()) {
    const OpId op = ready.back();
    ready.pop_back();
    ++visited;
    for (OpId s : succ[static_cast<size_t>(op)]) {
      if (--indegree[static_cast<size_t>(s)] == 0) ready.push_back(s);
    }
  }
  if (visited == n) return Status::Ok();
  for (size_t i = 0; i < n; ++i) {
    if (indegree[i] > 0) {
      return Bad(source, Path("ops", i),
                 "dependency cycle: op " + std::to_string(i) + " (" + trace.ops[i].name +
                     ") depends, through its inputs or edges, on itself");
    }
  }
  return Status::Internal(source + ": cycle check lost track");
}

// Every op must come after the producers of its inputs: ops are in issue order.
Status CheckOrder(const Trace& trace, const std::string& source) {
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    const Op& op = trace.ops[i];
    for (size_t k = 0; k < op.inputs.size(); ++k) {
      const Tensor& t = trace.tensor(op.inputs[k]);
      if (t.producer == kNoOp || t.producer < op.id) continue;
      const Op& producer = trace.op(t.producer);
      return Bad(source, Path("ops", i) + ".inputs[" + std::to_string(k) + "]",
                 "tensor " + std::to_string(t.id) + " is produced by op " +
                     std::to_string(producer.id) + " (" + std::string(ToString(producer.phase)) +
                     "), which comes after this " + std::string(ToString(op.phase)) +
                     " op; ops must be listed after their producers");
    }
  }
  return Status::Ok();
}

}  // namespace

Status Validate(const Trace& trace, const std::string& source) {
  const Header& h = trace.header;
  for (auto [field, value] :
       {std::pair{"hidden", h.hidden}, std::pair{"heads", h.heads}, std::pair{"layers", h.layers},
        std::pair{"seq_len", h.seq_len}, std::pair{"micro_batch", h.micro_batch},
        std::pair{"tp", h.tp}, std::pair{"cp", h.cp}, std::pair{"pp", h.pp}, std::pair{"ep", h.ep},
        std::pair{"zero_shards", h.zero_shards}}) {
    if (value <= 0) {
      return Bad(source, std::string("header.") + field,
                 "expected a positive integer, got " + std::to_string(value));
    }
  }
  if (!h.attention_kernel.empty() && h.attention != "flash") {
    return Bad(
        source, "header.attention_kernel",
        "names the kernel flash attention runs as, but the trace's attention is " + h.attention);
  }
  if (h.zero_stage < 0 || h.zero_stage > 3) {
    return Bad(source, "header.zero_stage",
               "expected 0, 1, 2 or 3, got " + std::to_string(h.zero_stage));
  }
  if (h.zero_defer_grad_sync && h.zero_stage < 2) {
    return Bad(source, "header.zero_defer_grad_sync",
               "applies to zero_stage 2 or 3 (the stages whose trace reduce-scatters its "
               "gradients), got zero_stage " +
                   std::to_string(h.zero_stage));
  }
  if (!ParseFp8Recipe(h.fp8)) {
    return Bad(source, "header.fp8",
               "unknown recipe \"" + h.fp8 + "\"; expected " + std::string(kFp8RecipeNames));
  }
  if (h.stage < 0 || h.stage >= h.pp) {
    return Bad(
        source, "header.stage",
        "expected 0 <= stage < pp (" + std::to_string(h.pp) + "), got " + std::to_string(h.stage));
  }
  SSDTRAIN_RETURN_IF_ERROR(CheckOpReferences(trace, source));
  SSDTRAIN_RETURN_IF_ERROR(CheckTensors(trace, source));
  SSDTRAIN_RETURN_IF_ERROR(CheckOps(trace, source));
  SSDTRAIN_RETURN_IF_ERROR(CheckAcyclic(trace, source));
  return CheckOrder(trace, source);
}

}  // namespace ssdtrain::traces

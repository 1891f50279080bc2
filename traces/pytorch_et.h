// PyTorch execution traces (the JSON torch.profiler.ExecutionTraceObserver
// writes; ExecutionGraphObserver in torch 1.13), read as a trace.
//
// What the file holds: every operator call and record_function scope of the
// observed region as a node (id, name, parent, op_schema, seq_id, tid,
// fw_tid, and its inputs and outputs: values, shapes, types), a tensor value
// being [tensor id, storage id, offset, numel, itemsize, device]. There are
// no durations, no frees, no module names and no model dims. Both layouts are
// read: torch 1.13's (schema 1.0.1: "parent", "inputs", "input_shapes",
// "input_types", the rest as fields) and torch 2's (schema 1.0.2-chakra.0.0.4
// onwards: "ctrl_deps", "inputs": {"values", "shapes", "types", "strides"},
// the rest under "attrs" as {"name", "type", "value"}).
//
// How it becomes a trace:
// - Ops: the operator nodes (a non-empty op_schema) with no operator above
//   them, in the order they started (node id); what they call inside is their
//   work, not ops of their own. Phase: backward for those under an
//   "autograd::engine::evaluate_function: ..." node, forward before the first
//   of them, optimizer after the last. Kinds, views, GEMM dims and attention
//   FLOPs: traces/torch_ops.h; FLOPs one per output element otherwise, bytes
//   the tensors' (a view's none).
// - Tensors: one row per storage lifetime. An output on a storage none of the
//   op's inputs is on starts a new one (storage ids are data addresses, reused
//   once freed); an output on an input's storage is that op's view (a row
//   aliasing it) or, with the input's own tensor id, written in place (an
//   input). A tensor first seen as an input was made before the trace: a
//   weight when backward accumulates a gradient of its shape and dtype into a
//   leaf (torch::autograd::AccumulateGrad), optimizer state when first seen in
//   the optimizer phase, a step input otherwise. Made in forward: activation;
//   in backward: gradient; in the optimizer phase: workspace.
// - saved_for_backward: made in forward, read by a backward op. Against
//   ssdtrain.capture (which sees autograd's saved-tensor hooks) on the
//   python/tests/zoo.py models: the same bytes (but for the 4-byte gradient
//   seed) for GPT, the torch encoder and decoder, BERT, shared and frozen
//   weights, bf16, autocast and reentrant checkpointing; more under
//   non-reentrant checkpointing (1.2-2x: the blocks' inputs the checkpoint
//   holds, read by the recompute, live across the gap without a saved-tensor
//   hook); less for the Llama block and T5 (0.94x): tensors autograd saves
//   but whose backward kernels never read them (the Llama block's RMSNorm
//   x.pow(2) output) are not in the file.
// - Layers: the first integer of the innermost record_function scope around an
//   op whose name has one ("blocks.3", as ssdtrain.capture reads module names;
//   -1 outside such scopes), a backward op taking its forward op's (through
//   seq_id); a trace without such scopes is one layer, 0.
// - Assumed, and said in `assumed`: the header's model dims (1: not in the
//   file), one micro-batch (0), fp32/bf16/fp16 from the activations' bytes,
//   offloadable activations of at least `min_bytes`.
// A malformed file is InvalidArgument naming `source`, the node (id and name)
// and the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

// A JSON document that is a PyTorch execution trace: an object with "nodes"
// and "schema", and no "format" (ssdtrain's own files have one).
bool IsPytorchEt(const nlohmann::json& j);

struct PytorchEtOptions {
  int64_t min_bytes = 64 << 10;  // smaller activations are not offloadable (ssdtrain.capture's)
};

struct PytorchEtImport {
  Trace trace;
  std::vector<std::string> assumed;  // what the file could not say, one line each
};

Result<PytorchEtImport> TraceFromPytorchEt(const nlohmann::json& j, const std::string& source,
                                           const PytorchEtOptions& options = {});

}  // namespace ssdtrain::traces

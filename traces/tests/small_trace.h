// A hand-built, valid five-op trace for tests of the trace format.
//
//   op0 fwd gemm   (x, w)  -> a        a is saved, offloadable
//   op1 fwd gelu   (a)     -> b        b is saved; v is a view of b
//   op2 fwd loss   (b)     -> l
//   op3 bwd gelu   (l, v)  -> gb
//   op4 bwd gemm   (gb, a) -> gw
#pragma once

#include "traces/trace.h"

namespace ssdtrain::traces::testing {

inline Trace SmallTrace() {
  Trace t;
  t.header.model = "small";
  t.header.family = "gpt";
  t.header.hidden = 8;
  t.header.heads = 2;
  t.header.layers = 1;
  t.header.seq_len = 4;
  t.header.micro_batch = 2;
  t.header.stage_layers = 1;
  auto tensor = [&](std::string name, TensorKind kind, OpId producer, std::vector<OpId> consumers,
                    bool saved) {
    Tensor x;
    x.id = static_cast<TensorId>(t.tensors.size());
    x.name = std::move(name);
    x.dtype = DType::kFp16;
    x.shape = {2, 4, 8};
    x.bytes = 2 * 4 * 8 * 2;
    x.kind = kind;
    x.producer = producer;
    x.consumers = std::move(consumers);
    x.saved_for_backward = saved;
    x.layer = 0;
    x.offloadable = saved && kind == TensorKind::kActivation;
    t.tensors.push_back(x);
  };
  tensor("x", TensorKind::kInput, kNoOp, {0}, false);      // 0
  tensor("w", TensorKind::kWeight, kNoOp, {0}, false);     // 1
  tensor("a", TensorKind::kActivation, 0, {1, 4}, true);   // 2
  tensor("b", TensorKind::kActivation, 1, {2}, false);     // 3
  tensor("l", TensorKind::kActivation, 2, {3}, false);     // 4
  tensor("v", TensorKind::kActivation, kNoOp, {3}, true);  // 5 (view of b)
  t.tensors[5].alias_of = 3;
  t.tensors[5].shape = {};
  tensor("gb", TensorKind::kGradient, 3, {4}, false);  // 6
  tensor("gw", TensorKind::kGradient, 4, {}, false);   // 7
  auto op = [&](std::string name, OpKind kind, Phase phase, std::vector<TensorId> in,
                std::vector<TensorId> out) {
    Op o;
    o.id = static_cast<OpId>(t.ops.size());
    o.name = std::move(name);
    o.kind = kind;
    o.phase = phase;
    o.layer = 0;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.flops = 1000;
    o.bytes_read = 128;
    o.bytes_written = 128;
    if (kind == OpKind::kGemm) o.gemm = GemmDims{8, 8, 8, 1};
    t.ops.push_back(o);
  };
  op("fc", OpKind::kGemm, Phase::kForward, {0, 1}, {2});
  op("gelu", OpKind::kElementwise, Phase::kForward, {2}, {3});
  op("loss", OpKind::kLoss, Phase::kForward, {3}, {4});
  op("gelu_bwd", OpKind::kElementwise, Phase::kBackward, {4, 5}, {6});
  op("fc_wgrad", OpKind::kGemm, Phase::kBackward, {6, 2}, {7});
  t.edges.push_back(Edge{0, 2, EdgeKind::kOrder});
  return t;
}

}  // namespace ssdtrain::traces::testing

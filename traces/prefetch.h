// Order-based prefetch, as SSDTrain schedules its reads (FlashTrain
// tensor_cache.py, prefetch_num_leaves_per_chunk = 2: "the next two modules"):
// the point at which a plan issues the read of an offloaded tensor. Shared by
// the simulator's policies and the uniform plans (uniform_plans.h) that the
// executor replays.
//
// A module is a backward op that consumes saved activations, as FlashTrain
// hooks Megatron's leaf modules: linear layers, the attention core and the
// norms, with the elementwise ops after them fused in. A backward op belongs to
// the forward op whose name prefixes its own ("L2.fc2" -> "L2.fc2.dgrad",
// "L2.fc2.wgrad"). When module i begins, the tensors of modules
// i+1 .. i+lookahead are read.
#pragma once

#include <vector>

#include "traces/trace.h"

namespace ssdtrain::traces {

// Order-based prefetch point for saved tensor `t`: among the modules, in
// order, the one `lookahead` places before t's first backward consumer (the
// first module when fewer precede it). kNoOp when t has no backward consumer.
OpId LookaheadPrefetchOp(const Trace& trace, TensorId t, int lookahead);
// The same for every tensor id at once (kNoOp where none).
std::vector<OpId> LookaheadPrefetchOps(const Trace& trace, int lookahead);

}  // namespace ssdtrain::traces

// Context parallelism's attention (ModelConfig::cp > 1, flash attention only):
// Transformer Engine's P2P ring (AttnFuncWithCPAndKVP2P), as
// ../shared/TODAYS_LAYOUTS.md §2 reads it. Each of the cp ranks holds seq/cp
// tokens (the load-balanced chunks r and 2·cp − 1 − r); its queries attend to
// every rank's keys and values, one rank's K/V per step, cp steps, each
// 1/cp of the rank's attention work (every rank does 1/cp of the whole).
//
// Forward: step 0 runs on the rank's own K/V; before step i runs, the ring op
// L<l>.<attn>.kv<i+1>.cp_ring (traces/collective_kind.h, kCpRingStream) has
// sent the K/V the rank holds to the next cp rank and received the previous
// one's into a transient buffer [2, s/cp, b, kv_heads·d] (TE's double buffer:
// two alive at once), so each exchange overlaps the step before it. Each step
// reads the running output and log-sum-exp and writes the corrected ones
// (TE's out correction), one tensor [b, heads, s/cp, d + the lse's 4 bytes]
// (one output per step: the stage simulator and the replay rebuild only the
// output a recompute asks for, so a chain of two-output steps would be
// rebuilt once per output, doubling at every step); the last writes the
// context and lse that backward reads. (cp − 1) · KV bytes cross the link, KV
// the rank's K and V bytes.
//
// Backward: the ring again. Step 0 on the own K/V; the first exchange carries
// K/V only, the middle ones K/V and the dK/dV accumulated so far (a buffer of
// 2·KV), and a last one, after the last step, carries the accumulated dK/dV
// home, which the rank's K and V gradients are: 2·(cp − 1)·KV bytes, as TE
// sends. Each step reads and rewrites the running dQ and dK/dV.
//
// Each exchange reads the rank's own K and V: what it sends is what the one
// before brought, but the dependency the trace records is the local K/V (the
// exchanges run in order on their link anyway), so recomputing the attention
// re-runs each exchange once instead of a chain of them (a chain made a full
// recompute of a cp 32 layer quadratic in cp).
//
// The ring steps' FLOPs sum to flash attention's at cp 1 divided by cp (the
// trace's FLOP convention: no causal halving).
#pragma once

#include <string>

#include "models/detail/attention.h"
#include "models/detail/dims.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

// q: [s/cp, b, heads·d]; k, v: [s/cp, b, kv_heads·d]. Fills st's q, k, v,
// ctx and lse; returns the context.
TensorId RingAttentionForward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId q,
                              TensorId k, TensorId v, AttentionState* st);
AttentionGrads RingAttentionBackward(TraceBuilder& b, const Dims& d, const AttentionState& st,
                                     TensorId g_ctx);

}  // namespace ssdtrain::models::detail

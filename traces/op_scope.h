// Module scopes: the part of an op's name after its layer prefix that names
// the module a recompute option selects by, decided here for the trace
// builder that names the ops and the policies that select them.
// "L3.mla_up.q_rope" is in scope "mla_up".
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "traces/trace.h"

namespace ssdtrain::traces {

// Multi-head latent attention's up-projection outputs, query, key and value
// (models/mla_config.h): what Megatron-Core's `--recompute-modules
// mla_up_proj` drops after the forward and rebuilds before the attention's
// backward.
inline constexpr std::string_view kMlaUpScope = "mla_up";

// `op`'s name less a leading "L<layer>." prefix.
std::string_view UnprefixedName(const Op& op);

// True when `op`'s name, less its layer prefix, begins with `scope` followed by '.'.
bool InScope(const Op& op, std::string_view scope);

// Megatron-Core's fine-grained activation offloading modules
// (--offload-modules), each the ops the trace builder names so
// (models/detail/block.cc, mla.cc, moe.cc), forward and backward alike:
//   attn_norm   ln1 (the attention's norm)        mlp_norm  ln2
//   qkv_linear  qkv, q_proj, q_down, q_up, kv_down, kv_up (the projections to q, k, v)
//   core_attn   attn.* (the attention core: flash kernel, or scores, softmax, ·V)
//   attn_proj   proj (the output projection)
//   expert_fc1  experts.fc1 (the routed experts' first grouped gemm)
//   moe_act     experts.swiglu, experts.swiglu_clamped (their activation)
// What a module "saves" is what its backward ops read (sim/policy.h,
// megatron-offload).
inline constexpr std::string_view kOffloadModules[] = {
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act"};
// The module `op` belongs to, or "" for an op of none.
std::string_view OffloadModuleOf(const Op& op);

// Whether an op outside block `layer` reads `t`: a block's output (the next
// block's input, or the head's), which checkpointing the block never drops. The
// recompute policies (sim/policies.cc, sim/sac_policy.cc) decide it here.
bool ReadOutsideLayer(const Trace& trace, const Tensor& t, int layer);

}  // namespace ssdtrain::traces

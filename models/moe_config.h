// Mixture-of-experts fields of a model config (ModelConfig::experts and the
// fields after it) and the sizes derived from them.
//
// A MoE layer is the llama block's attention plus a routed MLP: a router (a gemm
// to E logits, a softmax in fp32, top-k, renormalised weights), the dispatch of
// each token to its k experts (a permute), E gated (SwiGLU) expert FFNs of
// expert_ffn_hidden each at the tokens they receive, an optional shared expert
// every token sees, and the combine (an unpermute weighted by the router). Layers
// are MoE unless the config keeps them dense (first_dense_layers, moe_layer_step,
// dense_layers); a dense layer has the llama MLP of ffn_hidden.
//
// Routing is balanced: the tokens·k assignments of a micro-batch are spread over
// the E experts as evenly as integers allow (the first tokens·k mod E experts
// take one more); a capacity factor c > 0 bounds each expert at
// ceil(c·tokens·k/E) tokens (the rest are dropped, as capacity does).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "models/model_config.h"
#include "traces/status.h"

namespace ssdtrain::traces::detail {
class ObjectReader;
}

namespace ssdtrain::models {

// True when the config has routed experts (experts > 0).
bool IsMoe(const ModelConfig& c);
// True when block `layer` (0-based, over the whole model) has routed experts;
// layers + k is multi-token-prediction depth k, built as the last block is.
bool IsMoeLayer(const ModelConfig& c, int64_t layer);
// The main model's blocks with routed experts (no MTP depth).
int64_t MoeLayerCount(const ModelConfig& c);
// Each expert's width: expert_ffn_hidden, or ffn_hidden when it is 0.
int64_t ExpertFfnHidden(const ModelConfig& c);
// Tokens routed to each expert in one micro-batch: seq_len · micro_batch · k
// spread evenly, bounded by the capacity (see above). `expert` in [0, experts).
int64_t ExpertTokens(const ModelConfig& c, int64_t expert);
// Expert parallelism: the ep ranks of a group (strided by tp, as Megatron-Core
// lays out its expert ranks: the experts are split over tp as the dense MLP is,
// so ep · tp must divide dp · tp, i.e. ep divides dp) each hold E/ep experts
// (this trace: the group's first rank, experts [0, E/ep)). Every replica routes
// its micro-batch alike (balanced), so local expert j receives ExpertTokens(j)
// tokens from each of the ep ranks. An all-to-all sends each rank's permuted
// rows to their experts' ranks (dispatch) and brings the outputs back (combine).
int64_t LocalExperts(const ModelConfig& c);
// Rows local expert `local` (in [0, E/ep)) runs at: ep · ExpertTokens(local).
int64_t LocalExpertTokens(const ModelConfig& c, int64_t local);
// Parameters of one routed expert (its SwiGLU's three matrices): 3 · hidden · width,
// plus its biases (2 · width + hidden) with expert_bias.
int64_t ExpertParameters(const ModelConfig& c);
// Parameters a token passes through: ParameterCount less the (E - k) experts of
// every MoE layer it does not visit (MTP depths included).
Result<int64_t> ActiveParameterCount(const ModelConfig& c);

// The MoE fields of our own JSON config (absent: a dense model).
Status ReadMoeFields(const traces::detail::ObjectReader& r, ModelConfig* c);
// Writes the MoE fields into `j` for a MoE config; a dense config writes none.
void MoeFieldsToJson(const ModelConfig& c, nlohmann::json& j);
// The MoE rules: with experts = 0 no other MoE field is set; otherwise the llama
// family, no parallel block, 1 <= experts_per_token <= experts, tp divides the
// expert and shared-expert widths, every expert receives at least one token
// (seq_len · micro_batch · k >= experts), capacity_factor >= 0, moe_layer_step >= 1,
// dense_layers inside [0, layers), shared_expert_gate only with a shared expert,
// router_score softmax or sigmoid, swiglu_limit >= 0;
// ep >= 1 divides experts and dp (ep · tp divides dp · tp), and ep > 1 only with
// zero_stage 0; a dense model has ep 1.
Status ValidateMoe(const ModelConfig& c, const std::string& source);

}  // namespace ssdtrain::models

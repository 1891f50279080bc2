// Multi-token prediction on the last stage (models/mla_config.h, "MTP"): one
// depth's embedding of the next tokens, its two norms, eh_proj, its block and
// its head and loss.
#pragma once

#include <string>

#include "models/detail/block.h"
#include "models/detail/embedding.h"
#include "models/detail/head.h"

namespace ssdtrain::models::detail {

struct MtpState {
  int layer = 0;  // layers + depth: the block's layer index
  EmbeddingState embedding;
  NormState enorm, hnorm;
  LinearState eh_proj;
  BlockState block;
  HeadState head;
};

// `x`: the hidden state [s_local, b, h] the depth reads (the last block's
// output, or the previous depth's). `word`: the word table the next tokens are
// looked up in; `output`: the output layer's weight, shared with the main
// head. `d` has the depth's block dims, `moe` its routed MLP or null. Returns
// the depth's hidden output (its block's), which the next depth reads.
TensorId MtpForward(TraceBuilder& b, const Dims& d, const BlockStyle& style, const MoeSpec* moe,
                    int depth, int layer, TensorId x, TensorId word, TensorId output, MtpState* st);
// `g_out`: the gradient of the depth's hidden output from the next depth, or
// kNoTensor for the last. Returns the gradient of `x`.
TensorId MtpBackward(TraceBuilder& b, const Dims& d, const MtpState& st, TensorId g_out);

}  // namespace ssdtrain::models::detail

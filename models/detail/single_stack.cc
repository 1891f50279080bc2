#include <vector>

#include "models/detail/block.h"
#include "models/detail/embedding.h"
#include "models/detail/head.h"
#include "models/detail/mtp.h"
#include "models/detail/pipeline.h"
#include "models/detail/stacks.h"
#include "models/moe_config.h"

namespace ssdtrain::models::detail {

traces::Trace BuildSingleStack(const ModelConfig& c, const traces::Header& header) {
  const Dims d = MakeDims(c);
  const BlockStyle style = StyleFor(c);
  const MoeSpec moe = MoeSpecFor(c);
  const bool first = header.stage == 0;
  const bool last = header.stage == header.pp - 1;
  const int lo = static_cast<int>(header.first_layer);
  const int hi = lo + static_cast<int>(header.stage_layers);
  const size_t n = static_cast<size_t>(hi - lo);
  TraceBuilder b(header, kTensorsPerBlock * n + kOutsideBlocks, kOpsPerBlock * n + kOutsideBlocks);
  b.SetOptimizer(OptimizerFor(c));
  b.SetZero(ZeroFor(c));

  EmbeddingOptions emb;
  emb.learned_positions = !style.rotary;
  emb.token_types = c.family == "bert";
  if (c.token_types != 0) emb.token_type_rows = c.token_types;
  emb.norm = c.family == "bert";
  emb.dropout = style.dropout && style.embedding_dropout;
  // With pp > 1 the last stage keeps its own copy of a tied output layer, as Megatron-LM does.
  const bool tied = TiedOutput(c);
  // Each block's sizes: the model's, with its layer's attention window.
  auto dims_of = [&](int l) {
    Dims dl = d;
    dl.window = AttentionWindow(c, l);
    return dl;
  };

  b.SetPhase(Phase::kForward);
  EmbeddingState embedding;
  TensorId x = first ? EmbeddingForward(b, d, emb, "embedding", kNoTensor, &embedding)
                     : Recv(b, "stage_input", d.Stream(), d.act, TensorKind::kActivation);
  std::vector<BlockState> blocks(n);
  for (int l = lo; l < hi; ++l) {
    b.SetLayer(l);
    x = BlockForward(b, dims_of(l), style, x, kNoTensor, kNoTensor,
                     &blocks[static_cast<size_t>(l - lo)], IsMoeLayer(c, l) ? &moe : nullptr);
  }
  b.SetLayer(traces::kNoLayer);
  HeadState head;
  // Multi-token prediction's depths follow the head on the last stage
  // (mla_config.h); with pp > 1 they look the next tokens up in the last
  // stage's own copy of the word table.
  std::vector<MtpState> mtp(last ? static_cast<size_t>(c.mtp_layers) : 0);
  if (last) {
    const TensorId word = tied && first ? embedding.word : kNoTensor;
    HeadForward(b, d, style.norm, c.family == "bert", x, word, &head,
                /*output_bias=*/c.family == "phi" || c.family == "gptj" || c.family == "bert",
                style.final_softcap);
    TensorId table = first ? embedding.word : kNoTensor;
    if (!mtp.empty() && table == kNoTensor && tied) table = head.logits_layer.weight;
    TensorId hidden = x;
    for (size_t k = 0; k < mtp.size(); ++k) {
      const int layer = static_cast<int>(c.layers + static_cast<int64_t>(k));
      hidden =
          MtpForward(b, dims_of(layer), style, IsMoeLayer(c, layer) ? &moe : nullptr,
                     static_cast<int>(k), layer, hidden, table, head.logits_layer.weight, &mtp[k]);
      table = mtp[k].embedding.word;  // a copy made by the first depth is shared by the rest
    }
    b.SetLayer(traces::kNoLayer);
  } else {
    Send(b, "stage_output", x);
  }

  b.SetPhase(Phase::kBackward);
  TensorId g = last ? HeadBackward(b, d, head)
                    : Recv(b, "stage_output.grad", d.Stream(), d.act, TensorKind::kGradient);
  if (!mtp.empty()) {
    TensorId g_next = kNoTensor;
    for (size_t k = mtp.size(); k-- > 0;) {
      g_next = MtpBackward(b, dims_of(mtp[k].layer), mtp[k], g_next);
    }
    b.SetLayer(traces::kNoLayer);
    g = AccumulateGrad(b, "mtp.in.grad_sum", g, g_next);
  }
  TensorId no_bias = kNoTensor, no_encoder = kNoTensor;
  for (int l = hi - 1; l >= lo; --l) {
    b.SetLayer(l);
    g = BlockBackward(b, dims_of(l), blocks[static_cast<size_t>(l - lo)], g, &no_bias, &no_encoder);
  }
  b.SetLayer(traces::kNoLayer);
  if (first) {
    EmbeddingBackward(b, d, embedding, g);
  } else {
    Send(b, "stage_input.grad", g);
  }
  return b.Finish();
}

}  // namespace ssdtrain::models::detail

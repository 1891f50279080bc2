#include <algorithm>
#include <vector>

#include "models/detail/block.h"
#include "models/detail/embedding.h"
#include "models/detail/head.h"
#include "models/detail/pipeline.h"
#include "models/detail/stacks.h"

namespace ssdtrain::models::detail {

// Stage boundaries may fall inside either stack. A stage that ends inside the
// encoder sends the encoder stream; one that holds the last encoder block applies
// the encoder's final norm and sends the encoder output; decoder stages pass the
// decoder stream and the encoder output on. Gradients travel the same way back.
traces::Trace BuildEncoderDecoder(const ModelConfig& c, const traces::Header& header) {
  const Dims d = MakeDims(c);
  const BlockStyle style = StyleFor(c);
  const bool last = header.stage == header.pp - 1;
  const int lo = static_cast<int>(header.first_layer);
  const int hi = lo + static_cast<int>(header.stage_layers);
  const int enc_end = static_cast<int>(c.encoder_layers);
  const bool has_encoder = lo < enc_end;
  const bool has_decoder = hi > enc_end;
  const bool ends_encoder = has_encoder && hi >= enc_end;  // holds the last encoder block
  const size_t n = static_cast<size_t>(hi - lo);
  TraceBuilder b(header, kTensorsPerBlock * n + kOutsideBlocks, kOpsPerBlock * n + kOutsideBlocks);
  b.SetOptimizer(OptimizerFor(c));
  b.SetZero(ZeroFor(c));

  EmbeddingOptions emb;
  emb.learned_positions = false;
  emb.dropout = style.dropout;
  std::vector<BlockState> blocks(n);
  auto block = [&](int l) -> BlockState& { return blocks[static_cast<size_t>(l - lo)]; };

  // Forward.
  b.SetPhase(Phase::kForward);
  TensorId word = kNoTensor;  // shared by both embeddings and the head on one stage
  EmbeddingState enc_embedding, dec_embedding;
  TensorId enc_table = kNoTensor, dec_table = kNoTensor;
  TensorId encoder_out = kNoTensor;
  NormState enc_final;
  if (has_encoder) {
    TensorId x = lo == 0
                     ? EmbeddingForward(b, d, emb, "encoder_embedding", kNoTensor, &enc_embedding)
                     : Recv(b, "encoder_input", d.Stream(), d.act, TensorKind::kActivation);
    if (lo == 0) word = enc_embedding.word;
    const TensorId bias = RelativeBiasForward(b, d, "encoder", &enc_table);
    for (int l = lo; l < std::min(hi, enc_end); ++l) {
      b.SetLayer(l);
      x = BlockForward(b, d, style, x, bias, kNoTensor, &block(l));
    }
    b.SetLayer(traces::kNoLayer);
    if (ends_encoder) {
      encoder_out = NormForward(b, d, style.norm, "encoder_final_norm", x, &enc_final);
    } else {
      Send(b, "encoder_output_stream", x);
    }
  }
  HeadState head;
  if (has_decoder) {
    if (!has_encoder) {
      encoder_out = Recv(b, "encoder_out", d.Stream(), d.act, TensorKind::kActivation);
    }
    const bool holds_dec_start = lo <= enc_end;
    TensorId y = holds_dec_start
                     ? EmbeddingForward(b, d, emb, "decoder_embedding", word, &dec_embedding)
                     : Recv(b, "decoder_input", d.Stream(), d.act, TensorKind::kActivation);
    if (holds_dec_start) word = dec_embedding.word;
    const TensorId bias = RelativeBiasForward(b, d, "decoder", &dec_table);
    for (int l = std::max(lo, enc_end); l < hi; ++l) {
      b.SetLayer(l);
      y = BlockForward(b, d, style, y, bias, encoder_out, &block(l));
    }
    b.SetLayer(traces::kNoLayer);
    if (last) {
      HeadForward(b, d, style.norm, /*mlm_transform=*/false, y, TiedOutput(c) ? word : kNoTensor,
                  &head);
    } else {
      Send(b, "decoder_output", y);
    }
  }
  if (!last && (has_decoder || ends_encoder)) Send(b, "encoder_out", encoder_out);

  // Backward, in reverse.
  b.SetPhase(Phase::kBackward);
  TensorId g_encoder_out = kNoTensor;
  if (!last && (has_decoder || ends_encoder)) {
    g_encoder_out = Recv(b, "encoder_out.grad", d.Stream(), d.act, TensorKind::kGradient);
  }
  if (has_decoder) {
    TensorId g = last ? HeadBackward(b, d, head)
                      : Recv(b, "decoder_output.grad", d.Stream(), d.act, TensorKind::kGradient);
    TensorId g_bias = kNoTensor;
    for (int l = hi - 1; l >= std::max(lo, enc_end); --l) {
      b.SetLayer(l);
      g = BlockBackward(b, d, block(l), g, &g_bias, &g_encoder_out);
    }
    b.SetLayer(traces::kNoLayer);
    RelativeBiasBackward(b, d, "decoder", dec_table, g_bias);
    if (lo <= enc_end) {
      EmbeddingBackward(b, d, dec_embedding, g);
    } else {
      Send(b, "decoder_input.grad", g);
    }
    if (!has_encoder) Send(b, "encoder_out.grad", g_encoder_out);
  }
  if (has_encoder) {
    TensorId g = ends_encoder ? NormBackward(b, d, enc_final, g_encoder_out, kNoTensor)
                              : Recv(b, "encoder_output_stream.grad", d.Stream(), d.act,
                                     TensorKind::kGradient);
    TensorId g_bias = kNoTensor, unused = kNoTensor;
    for (int l = std::min(hi, enc_end) - 1; l >= lo; --l) {
      b.SetLayer(l);
      g = BlockBackward(b, d, block(l), g, &g_bias, &unused);
    }
    b.SetLayer(traces::kNoLayer);
    RelativeBiasBackward(b, d, "encoder", enc_table, g_bias);
    if (lo == 0) {
      EmbeddingBackward(b, d, enc_embedding, g);
    } else {
      Send(b, "encoder_input.grad", g);
    }
  }
  return b.Finish();
}

}  // namespace ssdtrain::models::detail

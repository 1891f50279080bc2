#include <algorithm>
#include <vector>

#include "models/detail/block.h"
#include "models/detail/embedding.h"
#include "models/detail/head.h"
#include "models/detail/pipeline.h"
#include "models/detail/stacks.h"

namespace ssdtrain::models::detail {

namespace {

// One pipeline stage of the two stacks: where it sits, and what its forward
// keeps for its backward.
struct Stage {
  Stage(const ModelConfig& config, const traces::Header& header)
      : c(config),
        d(MakeDims(config)),
        style(StyleFor(config)),
        last(header.stage == header.pp - 1),
        lo(static_cast<int>(header.first_layer)),
        hi(lo + static_cast<int>(header.stage_layers)),
        enc_end(static_cast<int>(config.encoder_layers)),
        has_encoder(lo < enc_end),
        has_decoder(hi > enc_end),
        ends_encoder(has_encoder && hi >= enc_end),
        blocks(static_cast<size_t>(hi - lo)) {
    emb.learned_positions = false;
    emb.dropout = style.dropout;
  }
  BlockState& block(int l) { return blocks[static_cast<size_t>(l - lo)]; }
  // Later stages need the encoder output (and send its gradient back).
  bool sends_encoder_out() const { return !last && (has_decoder || ends_encoder); }

  const ModelConfig& c;
  const Dims d;
  const BlockStyle style;
  const bool last;
  const int lo, hi, enc_end;
  const bool has_encoder, has_decoder;
  const bool ends_encoder;  // holds the last encoder block
  EmbeddingOptions emb;
  std::vector<BlockState> blocks;
  TensorId word = kNoTensor;  // shared by both embeddings and the head on one stage
  EmbeddingState enc_embedding, dec_embedding;
  TensorId enc_table = kNoTensor, dec_table = kNoTensor;
  TensorId encoder_out = kNoTensor;
  NormState enc_final;
  HeadState head;
};

void EncoderForward(TraceBuilder& b, Stage& s) {
  const Dims& d = s.d;
  TensorId x = s.lo == 0
                   ? EmbeddingForward(b, d, s.emb, "encoder_embedding", kNoTensor, &s.enc_embedding)
                   : Recv(b, "encoder_input", d.Stream(), d.act, TensorKind::kActivation);
  if (s.lo == 0) s.word = s.enc_embedding.word;
  const TensorId bias = RelativeBiasForward(b, d, "encoder", &s.enc_table);
  for (int l = s.lo; l < std::min(s.hi, s.enc_end); ++l) {
    b.SetLayer(l);
    x = BlockForward(b, d, s.style, x, bias, kNoTensor, &s.block(l));
  }
  b.SetLayer(traces::kNoLayer);
  if (s.ends_encoder) {
    s.encoder_out = NormForward(b, d, s.style.norm, "encoder_final_norm", x, &s.enc_final);
  } else {
    Send(b, "encoder_output_stream", x);
  }
}

void DecoderForward(TraceBuilder& b, Stage& s) {
  const Dims& d = s.d;
  Dims causal = d;  // the decoder's self-attention masks the tokens after each query
  causal.causal = true;
  if (!s.has_encoder) {
    s.encoder_out = Recv(b, "encoder_out", d.Stream(), d.act, TensorKind::kActivation);
  }
  const bool holds_dec_start = s.lo <= s.enc_end;
  TensorId y = holds_dec_start
                   ? EmbeddingForward(b, d, s.emb, "decoder_embedding", s.word, &s.dec_embedding)
                   : Recv(b, "decoder_input", d.Stream(), d.act, TensorKind::kActivation);
  if (holds_dec_start) s.word = s.dec_embedding.word;
  const TensorId bias = RelativeBiasForward(b, d, "decoder", &s.dec_table);
  for (int l = std::max(s.lo, s.enc_end); l < s.hi; ++l) {
    b.SetLayer(l);
    y = BlockForward(b, causal, s.style, y, bias, s.encoder_out, &s.block(l));
  }
  b.SetLayer(traces::kNoLayer);
  if (s.last) {
    HeadForward(b, d, s.style.norm, /*mlm_transform=*/false, y,
                TiedOutput(s.c) ? s.word : kNoTensor, &s.head);
  } else {
    Send(b, "decoder_output", y);
  }
}

// `g_encoder_out`: the encoder output's gradient, summed over the decoder
// blocks' cross-attention here.
void DecoderBackward(TraceBuilder& b, Stage& s, TensorId* g_encoder_out) {
  const Dims& d = s.d;
  TensorId g = s.last ? HeadBackward(b, d, s.head)
                      : Recv(b, "decoder_output.grad", d.Stream(), d.act, TensorKind::kGradient);
  TensorId g_bias = kNoTensor;
  for (int l = s.hi - 1; l >= std::max(s.lo, s.enc_end); --l) {
    b.SetLayer(l);
    g = BlockBackward(b, d, s.block(l), g, &g_bias, g_encoder_out);
  }
  b.SetLayer(traces::kNoLayer);
  RelativeBiasBackward(b, d, "decoder", s.dec_table, g_bias);
  if (s.lo <= s.enc_end) {
    EmbeddingBackward(b, d, s.dec_embedding, g);
  } else {
    Send(b, "decoder_input.grad", g);
  }
  if (!s.has_encoder) Send(b, "encoder_out.grad", *g_encoder_out);
}

void EncoderBackward(TraceBuilder& b, Stage& s, TensorId g_encoder_out) {
  const Dims& d = s.d;
  TensorId g = s.ends_encoder ? NormBackward(b, d, s.enc_final, g_encoder_out, kNoTensor)
                              : Recv(b, "encoder_output_stream.grad", d.Stream(), d.act,
                                     TensorKind::kGradient);
  TensorId g_bias = kNoTensor, unused = kNoTensor;
  for (int l = std::min(s.hi, s.enc_end) - 1; l >= s.lo; --l) {
    b.SetLayer(l);
    g = BlockBackward(b, d, s.block(l), g, &g_bias, &unused);
  }
  b.SetLayer(traces::kNoLayer);
  RelativeBiasBackward(b, d, "encoder", s.enc_table, g_bias);
  if (s.lo == 0) {
    EmbeddingBackward(b, d, s.enc_embedding, g);
  } else {
    Send(b, "encoder_input.grad", g);
  }
}

}  // namespace

// Stage boundaries may fall inside either stack. A stage that ends inside the
// encoder sends the encoder stream; one that holds the last encoder block applies
// the encoder's final norm and sends the encoder output; decoder stages pass the
// decoder stream and the encoder output on. Gradients travel the same way back.
traces::Trace BuildEncoderDecoder(const ModelConfig& c, const traces::Header& header) {
  Stage s(c, header);
  const size_t n = s.blocks.size();
  TraceBuilder b(header, kTensorsPerBlock * n + kOutsideBlocks, kOpsPerBlock * n + kOutsideBlocks);
  b.SetOptimizer(OptimizerFor(c));
  b.SetZero(ZeroFor(c));

  b.SetPhase(Phase::kForward);
  if (s.has_encoder) EncoderForward(b, s);
  if (s.has_decoder) DecoderForward(b, s);
  if (s.sends_encoder_out()) Send(b, "encoder_out", s.encoder_out);

  // Backward, in reverse.
  b.SetPhase(Phase::kBackward);
  TensorId g_encoder_out = kNoTensor;
  if (s.sends_encoder_out()) {
    g_encoder_out = Recv(b, "encoder_out.grad", s.d.Stream(), s.d.act, TensorKind::kGradient);
  }
  if (s.has_decoder) DecoderBackward(b, s, &g_encoder_out);
  if (s.has_encoder) EncoderBackward(b, s, g_encoder_out);
  return b.Finish();
}

}  // namespace ssdtrain::models::detail

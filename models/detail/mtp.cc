#include "models/detail/mtp.h"

#include "traces/trace.h"

namespace ssdtrain::models::detail {

TensorId MtpForward(TraceBuilder& b, const Dims& d, const BlockStyle& style, const MoeSpec* moe,
                    int depth, int layer, TensorId x, TensorId word, TensorId output,
                    MtpState* st) {
  const std::string name = "mtp" + std::to_string(depth);
  st->layer = layer;
  // The next tokens' embeddings, outside the blocks as the main embedding is.
  b.SetLayer(traces::kNoLayer);
  EmbeddingOptions emb;
  emb.learned_positions = !style.rotary;
  emb.dropout = style.dropout && style.embedding_dropout;
  const TensorId e = EmbeddingForward(b, d, emb, name + ".embedding", word, &st->embedding);
  b.SetLayer(layer);
  const TensorId e_normed = NormForward(b, d, style.norm, "enorm", e, &st->enorm);
  const TensorId h_normed = NormForward(b, d, style.norm, "hnorm", x, &st->hnorm);
  const TensorId cat = b.Activation("eh_cat", {d.s_local, d.b, 2 * d.h}, d.act);
  b.Op("eh_cat", OpKind::kElementwise, {e_normed, h_normed}, {cat}, 0);
  // Column-parallel to h / t columns, gathered over tp (Megatron's
  // gather_from_tensor_model_parallel_region), then cut back to this rank's
  // rows with sequence parallelism.
  const TensorId part = b.Activation("eh_proj.out", d.Full(d.h / d.t), d.act);
  // Kept 16-bit under FP8: an assumption (models/README.md, "FP8").
  Dims proj = d;
  proj.fp8 = traces::Fp8Recipe::kOff;
  st->eh_proj = ColumnForward(b, proj, "eh_proj", cat, 2 * d.h, d.h / d.t, {part}, false);
  TensorId y = part;
  if (d.t > 1) {
    y = b.Activation("eh_proj.out_gathered", d.Full(d.h), d.act);
    b.Op("eh_proj.out_gathered.all_gather", OpKind::kCollective, {part}, {y}, 0);
  }
  if (d.sp) {
    const TensorId rows = b.Activation("eh_proj.out_split", d.Stream(), d.act);
    b.Op("eh_proj.out_split", OpKind::kElementwise, {y}, {rows}, 0);
    y = rows;
  }
  const TensorId out = BlockForward(b, d, style, y, kNoTensor, kNoTensor, &st->block, moe);
  // Its own final norm, the shared output layer and its loss.
  b.SetLayer(traces::kNoLayer);
  HeadForward(b, d, style.norm, /*mlm_transform=*/false, out, output, &st->head,
              /*output_bias=*/false, style.final_softcap, name + ".");
  return out;
}

TensorId MtpBackward(TraceBuilder& b, const Dims& d, const MtpState& st, TensorId g_out) {
  b.SetLayer(traces::kNoLayer);
  TensorId g = HeadBackward(b, d, st.head);
  b.SetLayer(st.layer);
  if (g_out != kNoTensor) g = AccumulateGrad(b, "mtp.out.grad_sum", g, g_out);
  TensorId no_bias = kNoTensor, no_encoder = kNoTensor;
  g = BlockBackward(b, d, st.block, g, &no_bias, &no_encoder);
  if (d.sp) g = AllGatherSeq(b, d, "eh_proj.out_split.grad", g, TensorKind::kGradient);
  if (d.t > 1) {
    // The gather's backward: this rank's columns of the gradient.
    const TensorId g_part = b.Gradient("eh_proj.out.grad", d.Full(d.h / d.t), d.act);
    b.Op("eh_proj.out_gathered.bwd", OpKind::kElementwise, {g}, {g_part}, 0);
    g = g_part;
  }
  const TensorId g_cat = ColumnBackward(b, d, st.eh_proj, {g});
  const TensorId g_e_normed = b.Gradient("enorm.out.grad", d.Stream(), d.act);
  const TensorId g_h_normed = b.Gradient("hnorm.out.grad", d.Stream(), d.act);
  b.Op("eh_cat.bwd", OpKind::kElementwise, {g_cat}, {g_e_normed, g_h_normed}, 0);
  const TensorId g_x = NormBackward(b, d, st.hnorm, g_h_normed, kNoTensor);
  const TensorId g_e = NormBackward(b, d, st.enorm, g_e_normed, kNoTensor);
  b.SetLayer(traces::kNoLayer);
  EmbeddingBackward(b, d, st.embedding, g_e);
  return g_x;
}

}  // namespace ssdtrain::models::detail

#include "models/detail/embedding.h"

#include "models/detail/costs.h"
#include "models/detail/linear.h"

namespace ssdtrain::models::detail {
namespace {

// T5's relative attention: 32 buckets of relative distance (Raffel et al., 2020).
constexpr int64_t kRelativeBuckets = 32;

}  // namespace

TensorId EmbeddingForward(TraceBuilder& b, const Dims& d, const EmbeddingOptions& options,
                          const std::string& name, TensorId word, EmbeddingState* st) {
  st->name = name;
  st->options = options;
  st->tokens = b.Input(name + ".tokens", {d.b, d.s}, DType::kInt64);
  st->word = word != kNoTensor ? word : b.Weight("word_embeddings", {d.vocab, d.h}, d.act);
  std::vector<TensorId> inputs = {st->tokens, st->word};
  int64_t tables = 1;
  if (options.learned_positions) {
    st->pos = b.Weight(name + ".position_embeddings", {d.seq, d.h}, d.act);
    inputs.push_back(st->pos);
    ++tables;
  }
  if (options.token_types) {
    st->types = b.Input(name + ".token_types", {d.b, d.s}, DType::kInt64);
    st->type = b.Weight(name + ".token_type_embeddings", {options.token_type_rows, d.h}, d.act);
    inputs.push_back(st->types);
    inputs.push_back(st->type);
    ++tables;
  }
  // Each rank looks up the rows of its vocabulary slice; the partial sums are
  // reduced across the tensor-parallel group.
  const TensorId partial = b.Activation(name + ".out", d.Full(d.h), d.act);
  b.Op(name, OpKind::kEmbedding, inputs, {partial}, kAddFlops * (tables - 1) * d.s * d.b * d.h);
  TensorId x = partial;
  if (d.sp) {
    x = ReduceScatterSeq(b, d, name + ".out_shard", partial, TensorKind::kActivation);
  } else if (d.t > 1) {
    x = AllReduce(b, d, name + ".out_reduced", partial);
  }
  if (options.norm) x = NormForward(b, d, NormKind::kLayerNorm, name + ".norm", x, &st->norm);
  if (!options.dropout) return x;
  const TensorId out = b.Activation(name + ".dropped", d.Stream(), d.act);
  st->mask = b.Activation(name + ".dropout_mask", d.Stream(), DType::kUint8);
  b.Op(name + ".dropout", OpKind::kDropout, {x}, {out, st->mask},
       kDropoutFlops * Elements(d.Stream()));
  return out;
}

void EmbeddingBackward(TraceBuilder& b, const Dims& d, const EmbeddingState& st, TensorId g_x) {
  TensorId g = g_x;
  if (st.mask != kNoTensor) {
    const TensorId g_in = b.Gradient(st.name + ".dropout.in.grad", d.Stream(), d.act);
    b.Op(st.name + ".dropout.bwd", OpKind::kDropout, {st.mask, g}, {g_in},
         kBackwardFactor * kDropoutFlops * Elements(d.Stream()));
    g = g_in;
  }
  if (st.options.norm) g = NormBackward(b, d, st.norm, g, kNoTensor);
  if (d.sp) g = AllGatherSeq(b, d, st.name + ".out.grad_full", g, TensorKind::kGradient);
  std::vector<TensorId> inputs = {st.tokens};
  if (st.types != kNoTensor) inputs.push_back(st.types);
  inputs.push_back(g);
  std::vector<TensorId> outputs = {b.WeightGrad(st.word, inputs)};
  if (st.pos != kNoTensor) outputs.push_back(b.WeightGrad(st.pos, inputs));
  if (st.type != kNoTensor) outputs.push_back(b.WeightGrad(st.type, inputs));
  // Scatter-add of every token's gradient row into the tables.
  b.Op(st.name + ".bwd", OpKind::kEmbedding, inputs, outputs,
       kAddFlops * static_cast<int64_t>(outputs.size()) * d.s * d.b * d.h);
}

TensorId RelativeBiasForward(TraceBuilder& b, const Dims& d, const std::string& name,
                             TensorId* table) {
  *table = b.Weight(name + ".relative_bias", {kRelativeBuckets, d.heads}, d.act);
  const TensorId bias = b.Activation(name + ".relative_bias.out", {d.heads, d.s, d.s}, d.act);
  b.Op(name + ".relative_bias", OpKind::kEmbedding, {*table}, {bias}, d.heads * d.s * d.s);
  return bias;
}

void RelativeBiasBackward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId table,
                          TensorId g_bias) {
  std::vector<TensorId> inputs = {g_bias};
  const TensorId g_table = b.WeightGrad(table, inputs);
  b.Op(name + ".relative_bias.bwd", OpKind::kEmbedding, inputs, {g_table},
       kAddFlops * d.heads * d.s * d.s);
}

}  // namespace ssdtrain::models::detail

// Input embeddings (vocabulary-parallel word table, learned positions, BERT's
// token types and embedding LayerNorm, embedding dropout) and T5's relative
// position bias. All live outside the blocks (layer kNoLayer).
#pragma once

#include <string>

#include "models/detail/dims.h"
#include "models/detail/norm.h"
#include "models/detail/trace_builder.h"

namespace ssdtrain::models::detail {

struct EmbeddingOptions {
  bool learned_positions = true;  // GPT, BERT
  bool token_types = false;       // BERT
  int64_t token_type_rows = 2;    // segment types: BERT 2, RoBERTa 1
  bool norm = false;              // BERT's embedding LayerNorm
  bool dropout = true;
};

struct EmbeddingState {
  std::string name;
  EmbeddingOptions options;
  TensorId tokens = kNoTensor, types = kNoTensor;                // int64 [b, s] inputs
  TensorId word = kNoTensor, pos = kNoTensor, type = kNoTensor;  // weights
  NormState norm;
  TensorId mask = kNoTensor;
};

// Returns the first block's input [s_local, b, h]. `word`: an existing word table
// to share (T5's decoder), or kNoTensor to make "word_embeddings" [vocab/t, h].
TensorId EmbeddingForward(TraceBuilder& b, const Dims& d, const EmbeddingOptions& options,
                          const std::string& name, TensorId word, EmbeddingState* st);
void EmbeddingBackward(TraceBuilder& b, const Dims& d, const EmbeddingState& st, TensorId g_x);

// T5: the bias [heads, s, s] added to every self-attention score of one stack,
// looked up from a [buckets, heads] table. Writes the table's id to *table.
TensorId RelativeBiasForward(TraceBuilder& b, const Dims& d, const std::string& name,
                             TensorId* table);
void RelativeBiasBackward(TraceBuilder& b, const Dims& d, const std::string& name, TensorId table,
                          TensorId g_bias);

}  // namespace ssdtrain::models::detail

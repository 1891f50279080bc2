// The family builders: one pipeline stage of one training step. The header
// (filled by BuildTrace) names the stage and its layer range.
#pragma once

#include "models/model_config.h"
#include "traces/trace.h"

namespace ssdtrain::models::detail {

// GPT (causal decoder), BERT (encoder, MLM head), Llama (RMSNorm, SwiGLU, rotary,
// grouped-query attention, untied output layer), Phi and GPT-J (parallel blocks,
// rotary positions, an untied output layer with a bias), OPT (GPT's block with
// ReLU), GPT-NeoX (rotary, biases, a parallel block with two norms, untied), Falcon
// (rotary, multi-query, no biases, tied) and Gemma (Llama's with GeGLU and a tied
// output): one stack of identical blocks.
traces::Trace BuildSingleStack(const ModelConfig& c, const traces::Header& header);

// T5: encoder blocks [0, encoder_layers), then decoder blocks with cross-attention
// over the encoder output, both stacks in one layer numbering.
traces::Trace BuildEncoderDecoder(const ModelConfig& c, const traces::Header& header);

// Capacity hints for the builder's vectors (a few blocks' worth more than needed).
inline constexpr size_t kTensorsPerBlock = 160;
inline constexpr size_t kOpsPerBlock = 120;
inline constexpr size_t kOutsideBlocks = 200;

}  // namespace ssdtrain::models::detail

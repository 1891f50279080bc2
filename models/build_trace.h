// Model config -> the trace of one training step of one micro-batch
// (forward, backward, optimizer) for one pipeline stage.
#pragma once

#include "models/model_config.h"
#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::models {

// Megatron-LM accounting (Korthikanti et al., arXiv 2205.05198): for GPT with
// standard attention, 2-byte activations and 1-byte dropout masks, the unique
// saved-for-backward activation bytes of each block are s·b·h·(34 + 5·a·s/h)
// without tensor parallelism and s·b·h·(10 + 24/t + 5·a·s/(h·t)) with it; with
// sequence parallelism s·b·h·(34/t + 5·a·s/(h·t)). Forward FLOPs per block are
// (24·b·s·h² + 4·b·s²·h)/t, backward twice that. Flash attention drops the
// 5·a·s/h term.
Result<traces::Trace> BuildTrace(const ModelConfig& config, int64_t stage = 0);

// The model's parameters: the elements of every weight of the whole model (the
// trace at tp 1 and pp 1, each tied weight once), with the vocabulary padded to a
// multiple of 128 as the trace pads it. Learned position tables have seq_len rows.
Result<int64_t> ParameterCount(const ModelConfig& config);

}  // namespace ssdtrain::models

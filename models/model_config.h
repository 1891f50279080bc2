// Model configs (configs/models/*.json) and the options that override them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "traces/status.h"

namespace ssdtrain::models {

// Mirrors the JSON config field for field. Sizes are element counts.
struct ModelConfig {
  std::string name;              // "gpt-1.3b"
  std::string family;            // gpt, bert, t5, llama
  int64_t hidden = 0;            // h
  int64_t heads = 0;             // a
  int64_t kv_heads = 0;          // grouped-query attention; 0 means = heads
  int64_t layers = 0;            // transformer blocks (for t5: encoder + decoder)
  int64_t encoder_layers = 0;    // t5 only; decoder_layers = layers - encoder_layers
  int64_t ffn_hidden = 0;        // 0 means 4h (gpt, bert, t5)
  int64_t vocab = 0;
  int64_t seq_len = 0;           // s
  int64_t micro_batch = 1;       // b
  int64_t tp = 1;                // tensor-parallel degree t
  bool sequence_parallel = false;
  int64_t pp = 1;                // pipeline stages
  std::string attention = "standard";  // standard or flash
  std::string dtype = "fp16";          // fp16, bf16, fp32
};

// Command-line overrides; unset fields keep the config's value.
struct ConfigOverrides {
  std::optional<int64_t> micro_batch, seq_len, tp, pp;
  std::optional<bool> sequence_parallel;
  std::optional<std::string> attention, dtype;
};

// `source` names the file in messages ("configs/models/x.json: hidden: ...").
Result<ModelConfig> ModelConfigFromJson(const nlohmann::json& j, const std::string& source);
Result<ModelConfig> LoadModelConfig(const std::string& path);
nlohmann::json ToJson(const ModelConfig& c);
// Applies overrides, then checks consistency (heads divide hidden, tp divides
// heads, pp divides layers, positive sizes, known family/attention/dtype).
Result<ModelConfig> ApplyOverrides(ModelConfig c, const ConfigOverrides& o, const std::string& source);
Status ValidateConfig(const ModelConfig& c, const std::string& source);

}  // namespace ssdtrain::models

// The model config's own JSON: reading it (types, required and unknown fields),
// writing it back, and loading a file of either format (ours or a Hugging Face
// config.json). The checks of what a config means are ValidateConfig's
// (model_config.cc).
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/hf_config.h"
#include "models/mla_config.h"
#include "models/model_config.h"
#include "models/moe_config.h"
#include "traces/detail/json_fields.h"
#include "traces/fp8.h"
#include "traces/io.h"

namespace ssdtrain::models {

using traces::detail::JsonPath;
using traces::detail::ObjectReader;

Result<ModelConfig> ModelConfigFromJson(const nlohmann::json& j, const std::string& source) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, JsonPath(source, "")));
  ModelConfig c;
  SSDTRAIN_ASSIGN_OR_RETURN(c.name, r.String("name"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.family, r.String("family"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.hidden, r.Int("hidden"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.heads, r.Int("heads"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.kv_heads, r.IntOr("kv_heads", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.head_dim, r.IntOr("head_dim", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.layers, r.Int("layers"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.encoder_layers, r.IntOr("encoder_layers", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.ffn_hidden, r.IntOr("ffn_hidden", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.qkv_bias, r.BoolOr("qkv_bias", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.attention_bias, r.BoolOr("attention_bias", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.attention_sinks, r.BoolOr("attention_sinks", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.qk_norm, r.BoolOr("qk_norm", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.parallel_block, r.BoolOr("parallel_block", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.token_types, r.IntOr("token_types", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.gated_mlp, r.BoolOr("gated_mlp", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.untied_output, r.BoolOr("untied_output", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.sliding_window, r.IntOr("sliding_window", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.sliding_window_period, r.IntOr("sliding_window_period", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(c.sliding_window_first_layer, r.IntOr("sliding_window_first_layer", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.tied_output, r.BoolOr("tied_output", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.vocab, r.Int("vocab"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.seq_len, r.Int("seq_len"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.micro_batch, r.IntOr("micro_batch", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(c.tp, r.IntOr("tp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(c.sequence_parallel, r.BoolOr("sequence_parallel", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.tp_comm_overlap, r.BoolOr("tp_comm_overlap", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.tp_backward_overlap, r.BoolOr("tp_backward_overlap", true));
  SSDTRAIN_ASSIGN_OR_RETURN(c.cp, r.IntOr("cp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(c.pp, r.IntOr("pp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(c.pp_first_layers, r.IntOr("pp_first_layers", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.pp_last_layers, r.IntOr("pp_last_layers", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.attention, r.StringOr("attention", "standard"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.attention_kernel, r.StringOr("attention_kernel", ""));
  SSDTRAIN_ASSIGN_OR_RETURN(c.dtype, r.StringOr("dtype", "fp16"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.fp8, r.StringOr("fp8", ""));
  c.fp8 = traces::Fp8Name(c.fp8);
  SSDTRAIN_ASSIGN_OR_RETURN(c.optimizer, r.StringOr("optimizer", "adam"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.precision, r.StringOr("precision", "mixed"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.optimizer_step, r.StringOr("optimizer_step", "megatron"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.projections, r.StringOr("projections", "fused"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.cross_entropy, r.StringOr("cross_entropy", "vocab_parallel"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.rotary, r.StringOr("rotary", "fused"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.gqa, r.StringOr("gqa", "native"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.norm, r.StringOr("norm", "fused"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.zero_stage, r.IntOr("zero_stage", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.dp, r.IntOr("dp", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(c.dp_shard, r.IntOr("dp_shard", 0));
  SSDTRAIN_ASSIGN_OR_RETURN(c.zero_prefetch, r.IntOr("zero_prefetch", 1));
  SSDTRAIN_ASSIGN_OR_RETURN(c.zero_defer_grad_sync, r.BoolOr("zero_defer_grad_sync", false));
  SSDTRAIN_RETURN_IF_ERROR(ReadMlaFields(r, &c));
  SSDTRAIN_RETURN_IF_ERROR(ReadMoeFields(r, &c));
  SSDTRAIN_ASSIGN_OR_RETURN(c.fp16_lm_cross_entropy, r.BoolOr("fp16_lm_cross_entropy", false));
  SSDTRAIN_ASSIGN_OR_RETURN(c.weight_grads, r.StringOr("weight_grads", "persistent"));
  SSDTRAIN_ASSIGN_OR_RETURN(c.grad_dtype, r.StringOr("grad_dtype", ""));
  SSDTRAIN_RETURN_IF_ERROR(r.CheckNoUnknown());
  SSDTRAIN_RETURN_IF_ERROR(ValidateConfig(c, source));
  return c;
}

Result<ModelConfig> LoadModelConfig(const std::string& path, HfReport* hf) {
  std::error_code ec;
  const std::string file = std::filesystem::is_directory(path, ec)
                               ? (std::filesystem::path(path) / "config.json").string()
                               : path;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(file, ec)) return Status::NotFound(file + ": no such file");
    return Status::IoError(file + ": cannot open for reading");
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::IoError(file + ": read failed");
  SSDTRAIN_ASSIGN_OR_RETURN(nlohmann::json j, traces::ParseJson(text.str(), false, file));
  if (IsHfConfig(j)) return ModelConfigFromHfJson(j, file, HfConfigName(file), hf);
  SSDTRAIN_ASSIGN_OR_RETURN(ModelConfig c, ModelConfigFromJson(j, file));
  const std::string stem = std::filesystem::path(file).stem().string();
  if (c.name != stem) {
    return Status::InvalidArgument(file + ": name: " + "\"" + c.name +
                                   "\" does not match the file name (expected \"" + stem + "\")");
  }
  return c;
}

nlohmann::json ToJson(const ModelConfig& c) {
  nlohmann::json j{{"name", c.name},
                   {"family", c.family},
                   {"hidden", c.hidden},
                   {"heads", c.heads},
                   {"kv_heads", c.kv_heads},
                   {"head_dim", c.head_dim},
                   {"layers", c.layers},
                   {"encoder_layers", c.encoder_layers},
                   {"ffn_hidden", c.ffn_hidden},
                   {"vocab", c.vocab},
                   {"seq_len", c.seq_len},
                   {"micro_batch", c.micro_batch},
                   {"tp", c.tp},
                   {"sequence_parallel", c.sequence_parallel},
                   {"pp", c.pp},
                   {"attention", c.attention},
                   {"dtype", c.dtype},
                   {"optimizer", c.optimizer},
                   {"precision", c.precision},
                   {"zero_stage", c.zero_stage},
                   {"dp", c.dp}};
  if (!c.attention_kernel.empty()) j["attention_kernel"] = c.attention_kernel;
  if (c.qkv_bias) j["qkv_bias"] = true;
  if (c.attention_bias) j["attention_bias"] = true;
  if (c.attention_sinks) j["attention_sinks"] = true;
  if (c.qk_norm) j["qk_norm"] = true;
  if (c.parallel_block) j["parallel_block"] = true;
  if (c.token_types != 0) j["token_types"] = c.token_types;
  if (c.gated_mlp) j["gated_mlp"] = true;
  if (c.untied_output) j["untied_output"] = true;
  if (c.tied_output) j["tied_output"] = true;
  if (c.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (!c.tp_backward_overlap) j["tp_backward_overlap"] = false;
  if (c.sliding_window != 0) j["sliding_window"] = c.sliding_window;
  if (c.sliding_window_period != 1) j["sliding_window_period"] = c.sliding_window_period;
  if (c.sliding_window_first_layer != 0) {
    j["sliding_window_first_layer"] = c.sliding_window_first_layer;
  }
  MlaFieldsToJson(c, j);
  MoeFieldsToJson(c, j);
  if (c.fp16_lm_cross_entropy) j["fp16_lm_cross_entropy"] = true;
  if (c.weight_grads != "persistent") j["weight_grads"] = c.weight_grads;
  if (!c.grad_dtype.empty()) j["grad_dtype"] = c.grad_dtype;
  if (c.optimizer_step != "megatron") j["optimizer_step"] = c.optimizer_step;
  if (c.projections != "fused") j["projections"] = c.projections;
  if (c.cross_entropy != "vocab_parallel") j["cross_entropy"] = c.cross_entropy;
  if (c.rotary != "fused") j["rotary"] = c.rotary;
  if (c.gqa != "native") j["gqa"] = c.gqa;
  if (c.norm != "fused") j["norm"] = c.norm;
  if (c.dp_shard != 0) j["dp_shard"] = c.dp_shard;
  if (c.zero_prefetch != 1) j["zero_prefetch"] = c.zero_prefetch;
  if (c.zero_defer_grad_sync) j["zero_defer_grad_sync"] = true;
  if (c.cp != 1) j["cp"] = c.cp;
  if (c.pp_first_layers != 0) j["pp_first_layers"] = c.pp_first_layers;
  if (c.pp_last_layers != 0) j["pp_last_layers"] = c.pp_last_layers;
  if (!c.fp8.empty()) j["fp8"] = c.fp8;
  return j;
}

}  // namespace ssdtrain::models

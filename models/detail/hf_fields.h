// The field reader the Hugging Face config readers share (hf_<family>_config.cc
// for the dense families, hf_moe_config.cc for the mixture-of-experts ones,
// hf_config.cc for the defaults): each field read is recorded for the report,
// and errors name the file and the field.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "models/hf_config.h"
#include "traces/detail/json_fields.h"

namespace ssdtrain::models::detail {

inline constexpr int64_t kHfMaxSize = std::numeric_limits<int32_t>::max();

inline std::string Str(int64_t v) { return std::to_string(v); }
// Shortest form: 0.1, 0, 1.5.
inline std::string Num(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Reads fields of one config object, recording each for the report.
class Fields {
 public:
  // `j` is the object `r` reads; it outlives the Fields.
  Fields(traces::detail::ObjectReader r, const nlohmann::json& j, const std::string& source,
         HfReport* report)
      : r_(std::move(r)), j_(j), source_(source), report_(report) {}

  Result<int64_t> Size(const std::string& name, const std::string& target) {
    Result<int64_t> v = r_.IntIn(name, 1, kHfMaxSize);
    if (v.ok()) Read(name, Str(*v), target);
    return v;
  }
  // null or absent -> nullopt; else a positive integer.
  Result<std::optional<int64_t>> OptionalSize(const std::string& name, const std::string& target) {
    SSDTRAIN_ASSIGN_OR_RETURN(std::optional<int64_t> v, r_.OptionalInt(name));
    if (v && (*v < 1 || *v > kHfMaxSize)) {
      return Bad(name, "expected a positive integer or null, got " + Str(*v));
    }
    if (v) {
      Read(name, Str(*v), target);
    } else if (j_.contains(name)) {
      Read(name, "null", "");  // read: null selects the documented default
    }
    return v;
  }
  // A non-negative integer (a token id), or `fallback` when absent.
  Result<int64_t> IndexOr(const std::string& name, int64_t fallback) {
    SSDTRAIN_ASSIGN_OR_RETURN(int64_t v, r_.IntInOr(name, fallback, 0, kHfMaxSize));
    if (r_.Has(name)) Read(name, Str(v), "");
    return v;
  }
  Result<double> NumberOr(const std::string& name, double fallback) {
    SSDTRAIN_ASSIGN_OR_RETURN(double v, r_.NumberOr(name, fallback));
    if (r_.Has(name)) Read(name, Num(v), "");
    return v;
  }
  Result<bool> BoolOr(const std::string& name, bool fallback) {
    SSDTRAIN_ASSIGN_OR_RETURN(bool v, r_.BoolOr(name, fallback));
    if (r_.Has(name)) Read(name, v ? "true" : "false", "");
    return v;
  }
  Result<std::string> StringOr(const std::string& name, const std::string& fallback) {
    SSDTRAIN_ASSIGN_OR_RETURN(std::string v, r_.StringOr(name, fallback));
    if (r_.Has(name)) Read(name, "\"" + v + "\"", "");
    return v;
  }
  // A list of integers, or `fallback` when absent.
  Result<std::vector<int64_t>> IntListOr(const std::string& name, std::vector<int64_t> fallback) {
    if (!r_.Has(name)) return fallback;
    SSDTRAIN_ASSIGN_OR_RETURN(std::vector<int64_t> v, r_.IntArray(name));
    std::string text;
    for (int64_t x : v) text += (text.empty() ? "" : ", ") + Str(x);
    Read(name, "[" + text + "]", "");
    return v;
  }
  // A list of strings, or `fallback` when absent (gpt_oss's layer_types).
  Result<std::vector<std::string>> StringListOr(const std::string& name,
                                                std::vector<std::string> fallback) {
    if (!r_.Has(name)) return fallback;
    SSDTRAIN_ASSIGN_OR_RETURN(const nlohmann::json* v, r_.Value(name));
    if (!v->is_array()) return Bad(name, "expected a list of strings");
    std::vector<std::string> out;
    for (const nlohmann::json& e : *v) {
      if (!e.is_string()) return Bad(name, "expected a list of strings, got " + e.dump());
      out.push_back(e.get<std::string>());
    }
    Read(name, "[" + Str(static_cast<int64_t>(out.size())) + " entries]", "");
    return out;
  }
  bool Has(const std::string& name) const { return r_.Has(name); }
  bool IsNull(const std::string& name) const { return j_.contains(name) && j_[name].is_null(); }
  // Records a null field as read (null selects the documented default).
  void ReadNull(const std::string& name) { Read(name, "null", ""); }
  void Assume(const std::string& what) {
    if (report_ != nullptr) report_->assumed.push_back(what);
  }
  Status Bad(const std::string& field, const std::string& what) const {
    return Status::InvalidArgument(source_ + ": " + field + ": " + what);
  }
  Status NotModelled(const std::string& field, const std::string& what,
                     const std::string& supported) const {
    return Bad(field, what + " not modelled (supported: " + supported + ")");
  }
  const std::vector<std::string>& read() const { return names_; }

 private:
  void Read(const std::string& name, const std::string& value, const std::string& target) {
    names_.push_back(name);
    if (report_ != nullptr) {
      report_->read.push_back(name + " " + value + (target.empty() ? "" : " -> " + target));
    }
  }
  traces::detail::ObjectReader r_;
  const nlohmann::json& j_;
  std::string source_;
  HfReport* report_;
  std::vector<std::string> names_;
};

// The activations read as GELU (gpt2, gptj, phi, gpt_neox, gemma).
inline constexpr std::array<std::string_view, 4> kGelus = {"gelu", "gelu_new", "gelu_fast",
                                                           "gelu_pytorch_tanh"};

template <size_t N>
bool OneOf(const std::array<std::string_view, N>& names, const std::string& v) {
  return std::find(names.begin(), names.end(), v) != names.end();
}

// "a, b, c": the names, comma-separated.
template <size_t N>
std::string List(const std::array<std::string_view, N>& names) {
  std::string out;
  for (size_t i = 0; i < N; ++i) out += (i > 0 ? ", " : "") + std::string(names[i]);
  return out;
}

// The shape most readers share, in Llama's field names: hidden_size, num_hidden_layers,
// num_attention_heads, intermediate_size (as ffn_hidden) and vocab_size onto `c`;
// returns max_position_embeddings (detail/hf_checks.cc).
Result<int64_t> ReadLlamaNamedShape(Fields& f, ModelConfig* c);

// num_key_value_heads (kv_heads; absent: heads) and head_dim (absent: hidden /
// heads), checked against num_attention_heads and hidden_size.
Status ReadGroupedQueryHeads(Fields& f, ModelConfig* c);
// The MoE readers' assumptions: no load-balancing loss, balanced routing.
void AssumeNoAuxLoss(Fields& f);
// The llama-like readers' MLP and output layer: hidden_act silu (the SwiGLU
// MLP; another is refused for `model_type`), tie_word_embeddings onto tied_output.
Status ReadSwigluAndTiedOutput(Fields& f, const std::string& model_type, ModelConfig* c);

// The field checks the readers share (detail/hf_checks.cc). `field` true is
// refused as `what` not modelled.
Status RequireFalse(Fields& f, const std::string& field, const std::string& what);
// Heads divide the width (unless head_dim is explicit) and kv heads divide heads,
// in the file's own field names.
Status CheckHeads(const Fields& f, const ModelConfig& c, const char* heads, const char* hidden,
                  const char* kv);
// A dropout the trace does not build (on `where`): its rate must be 0.
Status RequireNoDropout(Fields& f, const std::string& field, const std::string& where);
// The fraction of each head that rotary rotates (phi's partial_rotary_factor,
// gpt_neox's rotary_pct), `fallback` when absent: a number in (0, 1]. It changes
// neither the trace's tensors nor its op times, so it is read, checked and reported:
// the rotated part and the copied rest are one q (k) tensor, saved whole for the
// attention, and the rotary op, memory-bound, reads and writes all of q and k
// whatever the fraction (only its arithmetic, which no memory-bound time counts, is
// smaller).
Status CheckRotaryFraction(Fields& f, const std::string& field, double fallback);

// The dense families' readers, one file each (hf_<family>_config.cc): each
// maps its model_type's fields onto `c` and returns the positions.
Result<int64_t> ReadGpt2(Fields& f, ModelConfig* c);
Result<int64_t> ReadGptj(Fields& f, ModelConfig* c);
Result<int64_t> ReadBert(Fields& f, const std::string& model_type, ModelConfig* c);
Result<int64_t> ReadT5(Fields& f, ModelConfig* c);
Result<int64_t> ReadPhi(Fields& f, ModelConfig* c);
Result<int64_t> ReadOpt(Fields& f, ModelConfig* c);
Result<int64_t> ReadNeox(Fields& f, ModelConfig* c);
// falcon, and (`rw`) the original RWConfig files (RefinedWebModel, RefinedWeb).
Result<int64_t> ReadFalcon(Fields& f, bool rw, ModelConfig* c);
Result<int64_t> ReadGemma(Fields& f, ModelConfig* c);
// gemma2: gemma's fields plus its soft-capping, post-norms and sliding window.
Result<int64_t> ReadGemma2(Fields& f, ModelConfig* c);

// llama, mistral, qwen2, qwen3 and their mixture-of-experts kin (mixtral,
// qwen2_moe, qwen3_moe): RMSNorm, rotary, SwiGLU, untied; reads the attention,
// intermediate_size (as ffn_hidden), vocabulary and positions. Returns the positions.
Result<int64_t> ReadLlamaLike(Fields& f, const std::string& model_type, ModelConfig* c);

// deepseek_v2, deepseek_v3 and kimi_k2 (hf_deepseek_config.cc): multi-head
// latent attention, DeepSeekMoE and multi-token prediction. Returns the positions.
Result<int64_t> ReadDeepseek(Fields& f, const std::string& model_type, ModelConfig* c);

// gpt_oss (hf_gpt_oss_config.cc): attention sinks and biases, windows on
// alternate layers, biased experts with a clamped SwiGLU. Returns the positions.
Result<int64_t> ReadGptOss(Fields& f, ModelConfig* c);

// The mixture-of-experts model_types: true for every one we know of, read or refused.
bool IsHfMoeType(const std::string& model_type);
// The ones read ("mixtral, qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, kimi_k2").
std::string HfMoeSupported();
// Reads a MoE model_type (IsHfMoeType) onto `c`, or refuses it naming the field
// it does not model. Returns the positions.
Result<int64_t> ReadHfMoe(Fields& f, const std::string& model_type, ModelConfig* c);

}  // namespace ssdtrain::models::detail

// Hugging Face config.json files read as model configs (hf_config.h): the
// supported model_types, the dispatch to each family's reader (hf_<family>_config.cc,
// hf_moe_config.cc), the training-time defaults, and what was ignored.
#include "models/hf_config.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <string_view>

#include "models/detail/hf_fields.h"
#include "traces/detail/json_fields.h"

namespace ssdtrain::models {
namespace {

using detail::Fields;
using detail::List;
using detail::OneOf;
using detail::Str;
using traces::detail::JsonPath;
using traces::detail::ObjectReader;

constexpr std::array<std::string_view, 16> kSupported = {
    "bert",    "falcon", "gemma", "gemma2", "gpt2",  "gpt_neox", "gptj",    "llama",
    "mistral", "opt",    "phi",   "phi3",   "qwen2", "qwen3",    "roberta", "t5"};
// Falcon's original RWConfig files, read by the falcon reader in their own names.
constexpr std::array<std::string_view, 2> kFalconRw = {"RefinedWebModel", "RefinedWeb"};

// seq_len and dtype: the training-time choices the file does not make.
Status ReadTrainingDefaults(Fields& f, int64_t positions, ModelConfig* c) {
  c->seq_len = std::min(positions, kHfDefaultSeqLen);
  f.Assume("seq_len " + Str(c->seq_len) + ": min(max positions " + Str(positions) + ", " +
           Str(kHfDefaultSeqLen) + ")");
  const char* field = f.Has("torch_dtype") ? "torch_dtype" : "dtype";
  SSDTRAIN_ASSIGN_OR_RETURN(std::string dtype, f.StringOr(field, ""));
  if (dtype.empty()) {
    c->dtype = "bf16";
    f.Assume("dtype bf16: the file has no torch_dtype");
  } else if (dtype == "bfloat16") {
    c->dtype = "bf16";
  } else if (dtype == "float16") {
    c->dtype = "fp16";
  } else if (dtype == "float32") {
    c->dtype = "fp32";
  } else {
    return f.NotModelled(field, "\"" + dtype + "\" is", "bfloat16, float16, float32");
  }
  f.Assume("micro_batch 1, tp 1, pp 1, standard attention, Adam with mixed precision");
  return Status::Ok();
}

Result<int64_t> ReadFamily(Fields& f, const std::string& model_type, ModelConfig* c) {
  if (model_type == "gpt2") return detail::ReadGpt2(f, c);
  if (model_type == "bert" || model_type == "roberta") return detail::ReadBert(f, model_type, c);
  if (model_type == "t5") return detail::ReadT5(f, c);
  if (model_type == "phi") return detail::ReadPhi(f, c);
  if (model_type == "opt") return detail::ReadOpt(f, c);
  if (model_type == "gptj") return detail::ReadGptj(f, c);
  if (model_type == "gpt_neox") return detail::ReadNeox(f, c);
  if (model_type == "falcon" || OneOf(kFalconRw, model_type)) {
    return detail::ReadFalcon(f, OneOf(kFalconRw, model_type), c);
  }
  if (model_type == "gemma") return detail::ReadGemma(f, c);
  if (model_type == "gemma2") return detail::ReadGemma2(f, c);
  if (detail::IsHfMoeType(model_type)) return detail::ReadHfMoe(f, model_type, c);
  return detail::ReadLlamaLike(f, model_type, c);
}

void ListIgnored(const nlohmann::json& j, const std::vector<std::string>& read, HfReport* report) {
  if (report == nullptr) return;
  for (const auto& [key, value] : j.items()) {
    if (key == "model_type") continue;
    if (std::find(read.begin(), read.end(), key) == read.end()) report->ignored.push_back(key);
  }
}

}  // namespace

std::string HfSupportedModelTypes() {
  return List(kSupported) + ", " + List(kFalconRw) +
         "; mixture of experts: " + detail::HfMoeSupported();
}

bool IsHfConfig(const nlohmann::json& j) {
  return j.is_object() && (j.contains("model_type") || j.contains("architectures"));
}

std::string HfConfigName(const std::string& path) {
  const std::filesystem::path p(path);
  if (p.filename() != "config.json") return p.stem().string();
  const std::filesystem::path dir = std::filesystem::absolute(p).parent_path();
  return dir.filename().string();
}

Result<ModelConfig> ModelConfigFromHfJson(const nlohmann::json& j, const std::string& source,
                                          const std::string& name, HfReport* report) {
  SSDTRAIN_ASSIGN_OR_RETURN(ObjectReader r, ObjectReader::Make(j, JsonPath(source, "")));
  SSDTRAIN_ASSIGN_OR_RETURN(std::string model_type, r.String("model_type"));
  if (!OneOf(kSupported, model_type) && !OneOf(kFalconRw, model_type) &&
      !detail::IsHfMoeType(model_type)) {
    return Status::InvalidArgument(source + ": model_type: \"" + model_type +
                                   "\" is not supported (supported: " + HfSupportedModelTypes() +
                                   ")");
  }
  if (report != nullptr) report->model_type = model_type;
  Fields f(std::move(r), j, source, report);
  ModelConfig c;
  c.name = name;
  SSDTRAIN_ASSIGN_OR_RETURN(int64_t positions, ReadFamily(f, model_type, &c));
  SSDTRAIN_RETURN_IF_ERROR(ReadTrainingDefaults(f, positions, &c));
  ListIgnored(j, f.read(), report);
  SSDTRAIN_RETURN_IF_ERROR(ValidateConfig(c, source));
  return c;
}

}  // namespace ssdtrain::models
